"""The Kubernetes API as an `ObjectSource`: the pod's service account, plain HTTPS, metadata where it is
enough.

ReplicaSets and Jobs are read as PartialObjectMetadata (the API server sends only their metadata: name,
namespace, owner references), which is all the owner chain needs. Pods need three fields outside metadata
(`status.podIP`, `spec.hostNetwork`, `spec.nodeName`); the API has no field projection and field selectors
filter objects, not fields, so pods are read whole, as JSON parsed with `json.loads`, and the index keeps only
what it needs of each.

Three GET requests (list, watch) need no client library: this module speaks HTTPS with the standard library.
The `kubernetes` package would cost every receiver pod ~40 MiB of memory and seconds of start-up for its
generated models (measured), and it would re-read nothing: here the service account token is read from its
file on every request, so kubelet's rotation of the bound token is followed.

Rights: get/list/watch on pods, apps/replicasets and batch/jobs (per watched namespace, or cluster-wide).
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import ssl
import threading
from collections.abc import Iterator, Sequence
from typing import Any, Final, Protocol
from urllib.parse import urlencode

from kct.attribution.config import AttributionConfig
from kct.attribution.index import PodIndex
from kct.attribution.watch import Gone, Kind, ObjectList, WatchEvent, start_reflectors

__all__ = [
    "ApiError",
    "HttpsTransport",
    "KubeObjectSource",
    "Transport",
    "in_cluster_source",
    "start_in_cluster",
    "watched_namespaces",
]

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_DIR: Final = "/var/run/secrets/kubernetes.io/serviceaccount"
_PATHS: Final[dict[Kind, tuple[str, str]]] = {
    "Pod": ("/api/v1", "pods"),
    "ReplicaSet": ("/apis/apps/v1", "replicasets"),
    "Job": ("/apis/batch/v1", "jobs"),
}
_METADATA_LIST: Final = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
_METADATA: Final = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
# The server ends a watch after this long; the reflector watches again from the last resourceVersion.
WATCH_TIMEOUT_S: Final = 300


class ApiError(RuntimeError):
    """The API server answered something other than 200 (410 is `Gone`)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class Response(Protocol):
    def read(self) -> bytes: ...

    def readline(self) -> bytes: ...

    def close(self) -> None: ...


class Transport(Protocol):
    def get(self, path: str, accept: str, timeout_s: float) -> Response:
        """An open 200 response to `GET path` (path with query); ApiError or Gone otherwise."""


class HttpsTransport:
    """The in-cluster API endpoint, authenticated with the pod's service account token."""

    def __init__(self, host: str, port: int, ca_file: str, token_file: str) -> None:
        self.host, self.port, self.token_file = host, port, token_file
        self.context = ssl.create_default_context(cafile=ca_file)

    def get(self, path: str, accept: str, timeout_s: float) -> Response:
        with open(self.token_file, encoding="utf-8") as file:
            token = file.read().strip()
        connection = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=timeout_s)
        try:
            headers = {"Authorization": f"Bearer {token}", "Accept": accept, "Connection": "close"}
            connection.request("GET", path, headers=headers)
            response = connection.getresponse()
        except BaseException:
            connection.close()
            raise
        if response.status != 200:
            body = response.read(2048).decode("utf-8", "replace")
            connection.close()
            if response.status == 410:
                raise Gone(body)
            raise ApiError(response.status, body)
        return response  # `Connection: close`: the response owns the socket, closing it closes the connection


def in_cluster_source() -> KubeObjectSource | None:
    """The API through the pod's service account; None outside a pod (no service host or token)."""
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    token_file, ca_file = f"{SERVICE_ACCOUNT_DIR}/token", f"{SERVICE_ACCOUNT_DIR}/ca.crt"
    if not host or not os.path.exists(token_file) or not os.path.exists(ca_file):
        return None
    return KubeObjectSource(HttpsTransport(host, int(port), ca_file, token_file))


class KubeObjectSource:
    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    def _path(self, kind: Kind, namespace: str | None, query: dict[str, str]) -> str:
        prefix, plural = _PATHS[kind]
        path = f"{prefix}/namespaces/{namespace}/{plural}" if namespace else f"{prefix}/{plural}"
        return f"{path}?{urlencode(query)}" if query else path

    def list(self, kind: Kind, namespace: str | None) -> ObjectList:
        accept = "application/json" if kind == "Pod" else _METADATA_LIST
        response = self.transport.get(self._path(kind, namespace, {}), accept, 60)
        try:
            body = json.loads(response.read())
        finally:
            response.close()
        return ObjectList(body.get("items") or [], str((body.get("metadata") or {}).get("resourceVersion", "")))

    def watch(self, kind: Kind, namespace: str | None, resource_version: str) -> Iterator[WatchEvent]:
        accept = "application/json" if kind == "Pod" else _METADATA
        query = {
            "watch": "true", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_TIMEOUT_S),
        }
        response = self.transport.get(self._path(kind, namespace, query), accept, WATCH_TIMEOUT_S + 30)
        try:
            while line := response.readline():  # one JSON event per line
                if line.strip():
                    yield _event(json.loads(line))
        finally:
            response.close()


def _event(raw: dict[str, Any]) -> WatchEvent:
    kind = raw.get("type")
    obj = raw.get("object") or {}
    if kind == "ERROR":
        if obj.get("code") == 410:
            raise Gone(str(obj.get("message", "")))
        raise ApiError(int(obj.get("code") or 0), str(obj.get("message", obj)))
    if kind not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
        raise ApiError(0, f"unexpected watch event type {kind!r}")
    return WatchEvent(kind, obj)


def start_in_cluster(settings: AttributionConfig, index: PodIndex) -> threading.Event | None:
    """Start feeding `index` from the API when attribution is on and the receiver runs in a pod; the event
    stops the watch threads. Outside Kubernetes: None, said once in the log (then only the rules apply)."""
    if not settings.enabled:
        return None
    source = in_cluster_source()
    if source is None:
        log.info("attribution: not running in a Kubernetes pod with a service account token; only rules apply")
        return None
    with open(f"{SERVICE_ACCOUNT_DIR}/namespace", encoding="utf-8") as file:
        own = file.read().strip()
    namespaces = watched_namespaces(settings.namespaces, own)
    where = ", ".join(n or "every namespace" for n in namespaces)
    log.info("attribution: watching pods, replicasets and jobs in %s", where)
    return start_reflectors(source, index, namespaces)


def watched_namespaces(configured: Sequence[str], own: str) -> tuple[str | None, ...]:
    """The namespaces to watch (None: all): `configured`, `*` meaning all; empty meaning `own`."""
    if "*" in configured:
        return (None,)
    return tuple(configured) or (own,)
