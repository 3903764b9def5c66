"""What the plugin asks of the Kubernetes API, behind a Protocol: one real implementation over the user's
kubeconfig, one in-memory fake (kct.kubectl.fake) for the unit tests.

Receivers are read through the API server's proxy, so no port-forward and no direct route to the pods is
needed: each ready pod behind the receiver's Service (from its Endpoints; `pods/proxy` RBAC), so every
replica is asked, else the Service itself (`services/proxy`), which reaches one replica per request. The API
server consumes the user's `Authorization` header to authenticate the user and does not forward it, so the
receiver's token travels in
`X-Kct-Read-Token` (kct.otlp.clients_doc); the plugin reads it from the receiver's token Secret, which
takes `get` on that Secret: the user's RBAC decides that too.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Protocol

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from kct.api.crds import GROUP, VERSION

__all__ = ["Cluster", "CrdMissing", "Forbidden", "KubeCluster", "PluginError", "Unreachable", "current_namespace"]

RECEIVERS = "telemetryreceivers"
SUBSCRIPTIONS = "clientmetricssubscriptions"


class PluginError(Exception):
    """What the user sees, as one line (kct.kubectl.command prints it and exits 1)."""


class CrdMissing(PluginError):
    pass


class Forbidden(PluginError):
    pass


class Unreachable(PluginError):
    """A receiver did not answer (no ready pod, refused token, a NetworkPolicy keeping the API server out)."""


class Cluster(Protocol):
    def list_objects(self, plural: str, namespace: str | None) -> list[dict[str, Any]]:
        """TelemetryReceivers or ClientMetricsSubscriptions in `namespace` (None: every namespace)."""
        ...

    def secret_value(self, namespace: str, name: str, key: str) -> str:
        ...

    def endpoint_pods(self, namespace: str, service: str) -> list[str]:
        """The pods behind the Service's ready addresses (its Endpoints), [] when it has none."""
        ...

    def proxy_get(self, namespace: str, kind: str, name: str, port: int, path: str, headers: dict[str, str],
                  scheme: str = "http") -> Any:
        """GET `path` on port `port` of a Service or pod (`kind`: services | pods) through the API server's
        proxy, over `scheme` (http or https); the decoded JSON body."""
        ...


def current_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the kubeconfig's context (as kubectl picks it), else `default`."""
    try:
        contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    except Exception:  # no kubeconfig: KubeCluster reports it
        return "default"
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else active
    return str(((chosen or {}).get("context") or {}).get("namespace") or "default")


class KubeCluster:
    """The real cluster, from the user's kubeconfig (the `kubernetes` package)."""

    def __init__(self, kubeconfig: str | None = None, context: str | None = None, timeout_s: float = 10.0) -> None:
        try:
            config.load_kube_config(config_file=kubeconfig, context=context)  # type: ignore[no-untyped-call]
        except Exception as exc:  # the kubernetes package raises several unrelated types here
            raise PluginError(f"cannot load the kubeconfig: {exc}") from None
        self._api = client.ApiClient()
        self._custom = client.CustomObjectsApi(self._api)
        self._core = client.CoreV1Api(self._api)
        self._timeout = timeout_s

    def list_objects(self, plural: str, namespace: str | None) -> list[dict[str, Any]]:
        try:
            if namespace is None:
                found = self._custom.list_cluster_custom_object(GROUP, VERSION, plural, _request_timeout=self._timeout)
            else:
                found = self._custom.list_namespaced_custom_object(
                    GROUP, VERSION, namespace, plural, _request_timeout=self._timeout
                )
        except ApiException as exc:
            if exc.status == 404:
                raise CrdMissing(
                    f"the {plural}.{GROUP} CRD is not installed in this cluster (kct crds / the Helm chart install it)"
                ) from None
            if exc.status == 403:
                where = f"namespace {namespace!r}" if namespace else "the cluster (-A)"
                raise Forbidden(f"you may not list {plural}.{GROUP} in {where}") from None
            raise PluginError(f"listing {plural}: {exc.status} {exc.reason}") from None
        items = found.get("items", []) if isinstance(found, dict) else []
        return [item for item in items if isinstance(item, dict)]

    def secret_value(self, namespace: str, name: str, key: str) -> str:
        try:
            secret = self._core.read_namespaced_secret(name, namespace, _request_timeout=self._timeout)
        except ApiException as exc:
            if exc.status == 403:
                raise Forbidden(f"you may not get Secret {namespace}/{name} (the receiver's token)") from None
            raise PluginError(f"reading Secret {namespace}/{name}: {exc.status} {exc.reason}") from None
        data = secret.data or {}
        if key not in data:
            raise PluginError(f"Secret {namespace}/{name} has no key {key!r}")
        return base64.b64decode(data[key]).decode().strip()

    def endpoint_pods(self, namespace: str, service: str) -> list[str]:
        try:
            endpoints = self._core.read_namespaced_endpoints(service, namespace, _request_timeout=self._timeout)
        except ApiException as exc:
            if exc.status == 404:
                return []
            if exc.status == 403:
                raise Forbidden(f"you may not get Endpoints {namespace}/{service}") from None
            raise PluginError(f"reading Endpoints {namespace}/{service}: {exc.status} {exc.reason}") from None
        return sorted({
            str(address.target_ref.name)
            for subset in endpoints.subsets or () for address in subset.addresses or ()
            if address.target_ref is not None and address.target_ref.kind == "Pod"
        })

    def proxy_get(self, namespace: str, kind: str, name: str, port: int, path: str, headers: dict[str, str],
                  scheme: str = "http") -> Any:
        # The proxy's `<scheme>:<name>:<port>` form: an https backend (receivers serve TLS by default).
        target = f"{scheme}:{name}:{port}" if scheme != "http" else f"{name}:{port}"
        resource = f"/api/v1/namespaces/{namespace}/{kind}/{target}/proxy{path}"
        noun = "Service" if kind == "services" else "pod"
        where = f"{noun} {namespace}/{name}:{port}{path}"
        request = self._api.param_serialize(
            "GET", resource, header_params={"Accept": "application/json", **headers}, auth_settings=["BearerToken"]
        )
        try:
            response = self._api.call_api(*request, _request_timeout=self._timeout)
            body: bytes = response.read()  # type: ignore[no-untyped-call]
        except Exception as exc:  # urllib3's timeouts and connection errors
            raise Unreachable(f"{where}: {exc}") from None
        if response.status == 403 and f"{kind}/proxy".encode() in body:
            raise Forbidden(f"you may not proxy to {noun} {namespace}/{name} ({kind}/proxy)")
        if response.status != 200:
            raise Unreachable(f"{where}: {response.status} {_reason(body)}")
        try:
            return json.loads(body)
        except ValueError:
            raise Unreachable(f"{where}: the answer is not JSON") from None


def _reason(body: bytes) -> str:
    """The `message` of an API server Status, the `error` of the receiver's answer, else the text."""
    text = body.decode(errors="replace")
    try:
        found = json.loads(text)
    except ValueError:
        return text[:300]
    return str(found.get("message") or found.get("error") or text)[:300] if isinstance(found, dict) else text[:300]
