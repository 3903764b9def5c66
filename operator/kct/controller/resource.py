"""The parts of a custom resource's body that reconciliation reads, shared by both controllers.

kopf hands handlers raw bodies; the reconcile functions take this small frozen view instead, so they can
be driven by unit tests without kopf and read the same fields the same way for every kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Self

__all__ = ["PAUSE_ANNOTATION", "ResourceView"]

# `kubectl annotate <kind> NAME telemetry.kct.dev/paused=true` freezes what the operator does for it.
PAUSE_ANNOTATION: Final = "telemetry.kct.dev/paused"


@dataclass(frozen=True)
class ResourceView:
    namespace: str
    name: str
    uid: str
    generation: int
    spec: Mapping[str, Any]
    annotations: Mapping[str, str]
    status: Mapping[str, Any]
    creation_timestamp: str = ""

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Self:
        meta = body.get("metadata", {})
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            generation=int(meta.get("generation", 0) or 0),
            spec=dict(body.get("spec") or {}),
            annotations=dict(meta.get("annotations") or {}),
            status=dict(body.get("status") or {}),
            creation_timestamp=str(meta.get("creationTimestamp", "")),
        )

    @property
    def paused(self) -> bool:
        return self.annotations.get(PAUSE_ANNOTATION, "").strip().lower() == "true"
