"""The one base of every configuration and spec model: strict, frozen, closed, camelCase on the wire.

CR specs (`kct.api`), the receiver's config file (`kct.receiver.config`) and the aggregation job's
(`kct.aggregation.config`) are the same kind of document, written by people and read by programs, and a
TelemetryReceiver embeds the latter two. So they share one set of rules: strict (no coercion: `"100"` is not
an interval), frozen (values, not mutable records), closed (`extra="forbid"`: a typo is an error naming the
key, not silence), snake_case in Python with camelCase aliases on the wire (both accepted when parsing), and
attribute docstrings as field descriptions (they become the CRD's and `kubectl explain`'s text).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

__all__ = ["StrictModel"]


class StrictModel(BaseModel):
    """Strict, frozen, closed model whose JSON names are camelCase."""

    model_config = ConfigDict(
        strict=True,
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        use_attribute_docstrings=True,
    )
