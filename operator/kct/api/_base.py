"""The base every CR spec model derives from.

Spec models are the single source of the CRD schemas (see `kct.api.crdgen`), so they are strict
(no coercion: `"100"` is not an interval), frozen (values, not mutable records) and closed
(`extra="forbid"`: a typo in a spec is an error, not silence). Python names are snake_case; the
Kubernetes field names are their camelCase aliases, and both are accepted when parsing.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

__all__ = ["SpecModel", "cel_rule"]


class SpecModel(BaseModel):
    """Strict, frozen, closed model whose JSON names are camelCase."""

    model_config = ConfigDict(
        strict=True,
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        use_attribute_docstrings=True,
    )

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
