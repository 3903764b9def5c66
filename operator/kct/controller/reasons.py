"""Which condition Reason each error a reconcile step meets stands for: the one map both controllers read.

    error (and its subclasses)        Reason                  retry                 Warning event
    pydantic ValidationError,         InvalidSpec             no: the spec must     yes
      ValueError from a config model                          change first
    ConnectionProblem                 KafkaConnectionInvalid  slowly (x5)           yes
      (SecretMissing, no cluster)
    InvalidClientMetricsConfigError   KafkaRejected           no: the spec must     yes
                                                              change first
    KafkaNotAuthorizedError           KafkaNotAuthorized      slowly (x5)           no
    KafkaUnreachableError             KafkaUnreachable        yes                   no
    KafkaAdminError (any other)       KafkaError              yes                   no
    ApplyRefused, KindNotInstalled    ApplyFailed             yes                   yes

Why: a problem only the user can fix (the spec, the connection Secret) gets a Warning event, once per new
problem (`kct.controller.kernel.stopped_outcome`); an outage is reported in status and retried, not
announced on every try, as its message changes from try to try. A refusal is not retried: the periodic
resync looks again, and a changed spec reconciles at once. Authorization and connection problems need a
human too, so they are retried five times slower than an outage.

Each controller adds only its context: which cluster it talked to, what the broker refused, what was left
untouched, and which other condition goes False with Ready (`also`, e.g. TopicReady).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from pydantic import ValidationError

from kct.controller.children import ApplyRefused, KindNotInstalled
from kct.controller.conditions import ConditionType, Reason
from kct.controller.kernel import ConnectionProblem, StopReconcile
from kct.kafka.errors import (
    InvalidClientMetricsConfigError,
    KafkaAdminError,
    KafkaNotAuthorizedError,
    KafkaUnreachableError,
)
from kct.validation import format_validation_error

__all__ = [
    "ERROR_REASONS",
    "KAFKA_PROBLEMS",
    "KAFKA_SLOWDOWN",
    "ErrorReason",
    "apply_stop",
    "connection_stop",
    "invalid_spec_stop",
    "kafka_stop",
    "reason_for",
]

KAFKA_SLOWDOWN: Final = 5.0
"""Backoff multiplier for Kafka problems a quick retry will not fix (a bad connection, missing ACLs)."""


@dataclass(frozen=True)
class ErrorReason:
    """What an error means in status: its Reason, how much slower than usual to retry (None: not at all,
    the spec must change first), and whether a new occurrence posts a Warning event."""

    reason: Reason
    retry_scale: float | None
    warn: bool


ERROR_REASONS: Final[Mapping[type[Exception], ErrorReason]] = {
    ValidationError: ErrorReason(Reason.INVALID_SPEC, None, warn=True),
    ConnectionProblem: ErrorReason(Reason.KAFKA_CONNECTION_INVALID, KAFKA_SLOWDOWN, warn=True),
    InvalidClientMetricsConfigError: ErrorReason(Reason.KAFKA_REJECTED, None, warn=True),
    KafkaNotAuthorizedError: ErrorReason(Reason.KAFKA_NOT_AUTHORIZED, KAFKA_SLOWDOWN, warn=False),
    KafkaUnreachableError: ErrorReason(Reason.KAFKA_UNREACHABLE, 1.0, warn=False),
    KafkaAdminError: ErrorReason(Reason.KAFKA_ERROR, 1.0, warn=False),
    ApplyRefused: ErrorReason(Reason.APPLY_FAILED, 1.0, warn=True),
    KindNotInstalled: ErrorReason(Reason.APPLY_FAILED, 1.0, warn=True),
    # Last in every MRO that reaches it: a model's own ValueError (ConnectionProblem, ApplyRefused and
    # InvalidClientMetricsConfigError are ValueErrors too, and meet their own entry first).
    ValueError: ErrorReason(Reason.INVALID_SPEC, None, warn=True),
}

KAFKA_PROBLEMS: Final = (KafkaAdminError, ConnectionProblem)
"""What a talk to Kafka may raise: every step that talks to it catches these (and only these)."""


def reason_for(error: Exception) -> ErrorReason:
    """The entry of the error's nearest class in `ERROR_REASONS` (a subclass reads as its parent);
    TypeError for an error no step should have caught."""
    for cls in type(error).__mro__:
        found = ERROR_REASONS.get(cls)
        if found is not None:
            return found
    raise TypeError(f"no condition reason for {type(error).__name__}: {error}")


def _stop(error: Exception, message: str, also: ConditionType | None = None) -> StopReconcile:
    meaning = reason_for(error)
    return StopReconcile(meaning.reason, message, retry_scale=meaning.retry_scale, warn=meaning.warn, also=also)


def invalid_spec_stop(error: ValidationError | ValueError, *, untouched: str) -> StopReconcile:
    """InvalidSpec naming the field, value and rule, and what was left alone (e.g. "nothing was applied")."""
    text = format_validation_error(error) if isinstance(error, ValidationError) else str(error)
    return _stop(error, f"{text}; {untouched}")


def kafka_stop(
    error: KafkaAdminError | ConnectionProblem,
    *,
    servers: str,
    refused: str,
    also: ConditionType | None = None,
) -> StopReconcile:
    """The stop for a failed talk to Kafka. `servers` names the cluster asked; `refused` says what the
    broker refused, should it refuse (e.g. "spec.topic: the broker refused topic 'x'")."""
    if isinstance(error, ConnectionProblem):
        return connection_stop(error, also)
    meaning = reason_for(error)
    if meaning.reason is Reason.KAFKA_REJECTED:
        message = f"{refused}: {error}"
    else:
        message = f"{meaning.reason}: {servers}: {error}"
    return _stop(error, message, also)


def connection_stop(error: ConnectionProblem, also: ConditionType | None = None) -> StopReconcile:
    """KafkaConnectionInvalid: no cluster configured, or spec.kafka's Secret missing or unusable."""
    return _stop(error, f"spec.kafka: {error}", also)


def apply_stop(error: ApplyRefused | KindNotInstalled) -> StopReconcile:
    """ApplyFailed with the API server's own message (it names the object and the field)."""
    return _stop(error, str(error))
