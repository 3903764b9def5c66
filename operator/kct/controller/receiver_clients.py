"""Reading the client registries of a TelemetryReceiver's pods, behind a Protocol: one real implementation
through the API server's pod proxy, one in-memory fake (kct.controller.receiver_clients_fake) for tests.

Why the API server's pod proxy and not the pod IPs: it is the path `kubectl kct` already takes, so the
operator and the plugin see the same answers through the same door (the receiver's NetworkPolicy, its
read token header); it works wherever the operator runs (in the cluster, or on a laptop against a remote
cluster, where pod IPs are not routable); and it needs no rule in every receiver's NetworkPolicy letting
the operator's pods in (with `spec.networkPolicy.from` set, only the brokers may reach the pods directly).
The price is one RBAC grant, `get` on `pods/proxy`, and a hop through the API server per replica per
interval: a few small requests every 30 s by default.

Every pod of the receiver that is Running and Ready is asked (each replica knows only the pushes it
stored); the pods are found by the receiver's selector labels (`list` on pods, which the operator holds
for attribution already), not by Endpoints, so no new grant is needed for that.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kct.otlp.clients_doc import CLIENTS_ROUTE, READ_TOKEN_HEADER
from kct.render.names import COMPONENT_RECEIVER, ChildNames, selector_labels
from kct.render.params import OTLP_PORT

__all__ = ["ApiServerProxySource", "ReceiverClientsSource", "ReceiverRead", "ReceiverRef", "read_receiver"]


@dataclass(frozen=True)
class ReceiverRef:
    """What reading a TelemetryReceiver's registries takes from its body."""

    namespace: str
    name: str
    token_secret: tuple[str, str] | None  # (Secret name, key), None when auth is off
    scheme: str = "https"  # receivers serve TLS unless spec.receiver.tls.mode is disabled

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> ReceiverRef:
        meta = body.get("metadata") or {}
        name = str(meta.get("name", ""))
        receiver = (body.get("spec") or {}).get("receiver") or {}
        auth = receiver.get("auth") or {}  # spec.receiver.auth
        scheme = "http" if (receiver.get("tls") or {}).get("mode") == "disabled" else "https"
        token = None
        if auth.get("enabled", True):
            ref = auth.get("tokenSecretRef") or {}
            token = (str(ref.get("name") or ChildNames(name).token_secret), str(ref.get("key") or "token"))
        return cls(str(meta.get("namespace", "")), name, token, scheme)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class ReceiverClientsSource(Protocol):
    def ready_pods(self, receiver: ReceiverRef) -> list[str]:
        """The names of the receiver's pods that are Running and Ready."""
        ...

    def read_token(self, receiver: ReceiverRef) -> str | None:
        """The receiver's push token (its registry answers to it), None when auth is off."""
        ...

    def clients_document(self, receiver: ReceiverRef, pod: str, token: str | None) -> Mapping[str, Any]:
        """`GET /v1/clients` of one pod; raises when it cannot be had."""
        ...


@dataclass
class ReceiverRead:
    """What one read of one receiver gave: each answering replica's document, and why the others did not."""

    documents: list[Mapping[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def read_receiver(source: ReceiverClientsSource, receiver: ReceiverRef) -> ReceiverRead:
    """Ask every ready replica of `receiver` (blocking: the caller runs it in a thread and absorbs the
    documents into its census on its own loop, so the census needs no lock)."""
    read = ReceiverRead()
    try:
        pods = source.ready_pods(receiver)
        token = source.read_token(receiver) if pods else None
    except Exception as exc:  # the API server's and the client's many error types: reported, never raised
        read.problems.append(f"{receiver.key}: {exc}")
        return read
    if not pods:
        read.problems.append(f"{receiver.key}: no receiver pod is ready")
    for pod in pods:
        try:
            read.documents.append(source.clients_document(receiver, pod, token))
        except Exception as exc:  # one replica down does not spoil the others' answers
            read.problems.append(f"{receiver.key} pod {pod}: {exc}")
    return read


def _ready(pod: Any) -> bool:
    status = pod.status
    if status is None or status.phase != "Running":
        return False
    return any(c.type == "Ready" and c.status == "True" for c in status.conditions or ())


class ApiServerProxySource:
    """The real source: the `kubernetes` package with the operator's own credentials (kct.controller.kube_config)."""

    def __init__(self, api_client: Any, timeout_s: float = 10.0) -> None:
        from kubernetes import client

        self._api = api_client
        self._core = client.CoreV1Api(api_client)
        self._timeout = timeout_s

    def ready_pods(self, receiver: ReceiverRef) -> list[str]:
        selector = ",".join(f"{k}={v}" for k, v in selector_labels(receiver.name, COMPONENT_RECEIVER).items())
        found: list[Any] = self._core.list_namespaced_pod(receiver.namespace, label_selector=selector,
                                                          _request_timeout=self._timeout).items
        return sorted(str(pod.metadata.name) for pod in found if _ready(pod))

    def read_token(self, receiver: ReceiverRef) -> str | None:
        if receiver.token_secret is None:
            return None
        name, key = receiver.token_secret
        secret = self._core.read_namespaced_secret(name, receiver.namespace, _request_timeout=self._timeout)
        data = secret.data or {}
        if key not in data:
            raise LookupError(f"Secret {receiver.namespace}/{name} has no key {key!r}")
        return base64.b64decode(data[key]).decode().strip()

    def clients_document(self, receiver: ReceiverRef, pod: str, token: str | None) -> Mapping[str, Any]:
        # The API server consumes `Authorization` (it authenticates us), so the token travels in its own header.
        headers = {"Accept": "application/json", **({READ_TOKEN_HEADER: token} if token else {})}
        path = f"/api/v1/namespaces/{receiver.namespace}/pods/{receiver.scheme}:{pod}:{OTLP_PORT}/proxy{CLIENTS_ROUTE}"
        request = self._api.param_serialize("GET", path, header_params=headers, auth_settings=["BearerToken"])
        response = self._api.call_api(*request, _request_timeout=self._timeout)
        body: bytes = response.read()
        if response.status != 200:
            raise ConnectionError(f"{response.status} {body[:200].decode(errors='replace')}")
        document = json.loads(body)
        if not isinstance(document, dict):
            raise ValueError("the answer is not a clients document")
        return document
