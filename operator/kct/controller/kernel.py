"""What both controllers share: the outcome of a reconcile, its events, retry backoff, and how a
validation error reads to a user.

The reconcile functions (`kct.controller.subscription`, `kct.controller.receiver`) are plain blocking
functions that return an `Outcome`; the kopf handlers turn it into a status patch, events and retries.
Nothing here imports kopf or a client, so the reconciles stay testable with in-memory fakes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

__all__ = ["ConnectionProblem", "Event", "Outcome", "backoff", "format_validation_error"]


class ConnectionProblem(ValueError):
    """The Kafka connection cannot be built (no cluster configured, Secret missing or unusable)."""


@dataclass(frozen=True)
class Event:
    type: str  # "Normal" | "Warning"
    reason: str
    message: str


@dataclass(frozen=True)
class Outcome:
    """What a reconcile decided: status fields to merge, events to post, and whether to retry."""

    status: dict[str, Any]
    events: tuple[Event, ...] = ()
    retry_after: float | None = None
    error: str | None = None


def backoff(retry: int, base: float, maximum: float) -> float:
    """Seconds before retry number `retry` (0-based): `base * 2**retry`, at most `maximum`."""
    return float(min(maximum, base * (2 ** min(retry, 16))))


def format_validation_error(error: ValidationError, prefix: str = "spec") -> str:
    """`spec.match.clientId: 'a(' is not a valid RE2 regular expression: missing ): a(` (one per line)."""
    lines = []
    for problem in error.errors():
        location = ".".join([prefix, *(str(part) for part in problem["loc"])])
        message = problem["msg"].removeprefix("Value error, ")
        value = problem.get("input")
        shown = "" if isinstance(value, dict | list) or value is None or repr(value) in message else f" (got {value!r})"
        lines.append(f"{location}: {message}{shown}")
    return "; ".join(lines)
