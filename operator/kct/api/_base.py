"""The base every CR spec model derives from.

Spec models are the single source of the CRD schemas (see `kct.api.crdgen`); they follow the rules of
every kct model (`kct.models.StrictModel`: strict, frozen, closed, camelCase aliases) and add how a spec
is written back to the API server.
"""

from __future__ import annotations

from typing import Any

from pydantic.config import JsonDict

from kct.models import StrictModel

__all__ = ["SpecModel", "cel_rule"]


class SpecModel(StrictModel):
    """A CR spec or status model."""

    def to_kube(self) -> dict[str, Any]:
        """The spec as the Kubernetes API server stores it: camelCase names, unset optionals omitted."""
        data: dict[str, Any] = self.model_dump(by_alias=True, exclude_none=True, mode="json")
        return data


def cel_rule(rule: str, message: str, *, field_path: str | None = None, reason: str | None = None) -> JsonDict:
    """One `x-kubernetes-validations` entry (a CEL rule checked by the API server at apply time)."""
    entry: JsonDict = {"rule": rule, "message": message}
    if field_path is not None:
        entry["fieldPath"] = field_path
    if reason is not None:
        entry["reason"] = reason
    return entry
