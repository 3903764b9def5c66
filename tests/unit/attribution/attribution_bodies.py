"""Kubernetes bodies for the attribution tests, as the API returns them (only the fields that matter)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(
    name: str,
    ip: str | None,
    *,
    uid: str | None = None,
    namespace: str = "shop",
    node: str = "node-1",
    created_ms: int = 1_000_000,
    owner: tuple[str, str] | None = None,
    host_network: bool = False,
    phase: str = "Running",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    resource_version: str = "1",
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name, "namespace": namespace, "uid": uid or f"uid-{name}", "creationTimestamp": iso(created_ms),
        "resourceVersion": resource_version, "labels": labels or {}, "annotations": annotations or {},
    }
    if owner is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": owner[0], "name": owner[1], "uid": "x", "controller": True}
        ]
    status: dict[str, Any] = {"phase": phase}
    if ip is not None:
        status["podIP"] = ip
    return {"metadata": meta, "spec": {"nodeName": node, "hostNetwork": host_network}, "status": status}


def owned(kind: str, name: str, owner: tuple[str, str] | None = None, namespace: str = "shop") -> dict[str, Any]:
    """A ReplicaSet or Job as PartialObjectMetadata."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "resourceVersion": "1"}
    if owner is not None:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta}
