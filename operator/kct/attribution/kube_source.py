"""The Kubernetes API as an `ObjectSource`: the receiver's service account, raw JSON, metadata where it is
enough.

ReplicaSets and Jobs are read as PartialObjectMetadata (the API server sends only their metadata: name,
namespace, owner references), which is all the owner chain needs. Pods need three fields outside metadata
(`status.podIP`, `spec.hostNetwork`, `spec.nodeName`); the API has no field projection and field selectors
filter objects, not fields, so pods are read whole, as JSON parsed with `json.loads` (the client's model
classes cost several times the memory and CPU), and the index keeps only what it needs of each.

Rights: get/list/watch on pods, apps/replicasets and batch/jobs (cluster-wide, or per watched namespace).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Any, Final

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from kct.attribution.config import AttributionConfig
from kct.attribution.index import PodIndex
from kct.attribution.watch import Gone, Kind, ObjectList, WatchEvent, start_reflectors

__all__ = ["KubeObjectSource", "in_cluster_source", "start_in_cluster", "watched_namespaces"]

log = logging.getLogger(__name__)

_PATHS: Final[dict[Kind, tuple[str, str]]] = {
    "Pod": ("/api/v1", "pods"),
    "ReplicaSet": ("/apis/apps/v1", "replicasets"),
    "Job": ("/apis/batch/v1", "jobs"),
}
_METADATA_LIST: Final = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
_METADATA: Final = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
SERVICE_ACCOUNT_NAMESPACE: Final = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
# The server ends a watch after this long; the reflector watches again from the last resourceVersion.
WATCH_TIMEOUT_S: Final = 300


def in_cluster_source() -> KubeObjectSource:
    """The pod's own service account (raises kubernetes.config.ConfigException outside a pod)."""
    config.load_incluster_config()  # type: ignore[no-untyped-call]
    return KubeObjectSource(client.ApiClient())


class KubeObjectSource:
    def __init__(self, api: Any) -> None:
        self.api = api

    def _path(self, kind: Kind, namespace: str | None) -> str:
        prefix, plural = _PATHS[kind]
        return f"{prefix}/namespaces/{namespace}/{plural}" if namespace else f"{prefix}/{plural}"

    def _get(self, path: str, query: list[tuple[str, str]], accept: str, timeout: float | None) -> Any:
        try:
            return self.api.call_api(
                path, "GET", query_params=query, header_params={"Accept": accept},
                auth_settings=["BearerToken"], _preload_content=False, _return_http_data_only=True,
                _request_timeout=timeout,
            )
        except ApiException as exc:
            if exc.status == 410:
                raise Gone(str(exc.reason)) from None
            raise

    def list(self, kind: Kind, namespace: str | None) -> ObjectList:
        accept = "application/json" if kind == "Pod" else _METADATA_LIST
        response = self._get(self._path(kind, namespace), [], accept, 60)
        body = json.loads(response.data)
        return ObjectList(body.get("items") or [], str((body.get("metadata") or {}).get("resourceVersion", "")))

    def watch(self, kind: Kind, namespace: str | None, resource_version: str) -> Iterator[WatchEvent]:
        accept = "application/json" if kind == "Pod" else _METADATA
        query = [
            ("watch", "true"), ("resourceVersion", resource_version), ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(WATCH_TIMEOUT_S)),
        ]
        response = self._get(self._path(kind, namespace), query, accept, WATCH_TIMEOUT_S + 30)
        try:
            pending = b""
            for chunk in response.stream(65536, decode_content=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield _event(json.loads(line))
        finally:
            response.release_conn()


def _event(raw: dict[str, Any]) -> WatchEvent:
    kind = raw.get("type")
    obj = raw.get("object") or {}
    if kind == "ERROR":
        if obj.get("code") == 410:
            raise Gone(str(obj.get("message", "")))
        raise RuntimeError(f"watch error: {obj.get('message', obj)}")
    if kind not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
        raise RuntimeError(f"unexpected watch event type {kind!r}")
    return WatchEvent(kind, obj)


def start_in_cluster(settings: AttributionConfig, index: PodIndex) -> threading.Event | None:
    """Start feeding `index` from the API when attribution is on and the receiver runs in a pod; the event
    stops the watch threads. Outside Kubernetes: None, said once in the log (pushes are stored unchanged)."""
    if not settings.enabled:
        return None
    try:
        source = in_cluster_source()
    except config.ConfigException as exc:
        log.info("attribution: not running in a Kubernetes pod (%s); pushes are not attributed", exc)
        return None
    namespaces = watched_namespaces(settings.namespaces, _own_namespace())
    where = ", ".join(n or "every namespace" for n in namespaces)
    log.info("attribution: watching pods, replicasets and jobs in %s", where)
    return start_reflectors(source, index, namespaces)


def watched_namespaces(configured: Sequence[str], own: str) -> tuple[str | None, ...]:
    """The namespaces to watch (None: all): `configured`, `*` meaning all; empty meaning `own`."""
    if "*" in configured:
        return (None,)
    return tuple(configured) or (own,)


def _own_namespace() -> str:
    with open(SERVICE_ACCOUNT_NAMESPACE, encoding="utf-8") as file:
        return file.read().strip()
