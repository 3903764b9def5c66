"""What both controllers share: the outcome of a reconcile, its events, retry backoff, how a step
stops a reconcile (`StopReconcile`) and how that reads in status (a validation error is worded by
`kct.validation`, as everywhere else).

The reconcile functions (`kct.controller.subscription`, `kct.controller.telemetry_receiver`) are plain blocking
functions that return an `Outcome`; the kopf handlers turn it into a status patch, events and retries.
Nothing here imports kopf or a client, so the reconciles stay testable with in-memory fakes.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kct.controller.conditions import ConditionType, Reason, find_condition, remove_condition, set_condition

__all__ = [
    "NO_DEFAULT_CLUSTER",
    "ConditionTracker",
    "ConnectionProblem",
    "Event",
    "KeyedLocks",
    "OperatorConfig",
    "Outcome",
    "SecretMissing",
    "StopReconcile",
    "backoff",
    "stopped_outcome",
]


class ConnectionProblem(ValueError):
    """The Kafka connection cannot be built (no cluster configured, Secret missing or unusable)."""


NO_DEFAULT_CLUSTER: Final = "not set and the operator has no default cluster (set KAFKA_BOOTSTRAP_SERVERS)"
"""The `ConnectionProblem` of a resource without spec.kafka when the operator has no default cluster."""


class SecretMissing(ConnectionProblem):
    """The Secret named by `spec.kafka.secretRef` does not exist. `last_known` is the admin built from its
    data when it last existed (None if this operator never read it): enough to clean up after a resource
    whose Secret was deleted first, as happens when their namespace is deleted."""

    def __init__(self, message: str, last_known: Any = None) -> None:
        super().__init__(message)
        self.last_known = last_known


class KeyedLocks:
    """One asyncio.Lock per key, alive only while a handler holds or awaits it (no lock outlives its
    resource). A handler that reconciles outside kopf's per-resource serialisation (a timer, another
    object's event) and the delete handler take the same key, so a reconcile in flight cannot undo a
    delete that ran meanwhile."""

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[Any, asyncio.Lock] = weakref.WeakValueDictionary()

    def __call__(self, key: Any) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    def __len__(self) -> int:
        return len(self._locks)


@dataclass(frozen=True)
class OperatorConfig:
    """How often both controllers resync, how their retries back off, whether the spark-operator's
    applications are watched (only when the operator may list and watch them: the chart's
    `rbac.sparkApplications`), and how the subscriptions' matched clients are counted."""

    resync_seconds: float = 60.0
    backoff_base_seconds: float = 2.0
    backoff_max_seconds: float = 60.0
    watch_spark_applications: bool = False
    clients_interval_seconds: float = 30.0
    """How often the receivers' client registries are read and each subscription's `status.clients` updated."""
    no_clients_warning_seconds: float = 600.0
    """How long a subscription may match no live client before ClientsMatched=False and a Warning event."""


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


class StopReconcile(Exception):
    """A reconcile step cannot go on: Ready=False with `reason` and `message`.

    `retry_scale` multiplies the backoff base (None: do not retry, the spec must change first); `warn`
    posts a Warning event when the problem is new; `also` names another condition set False with it
    (e.g. TopicReady)."""

    def __init__(
        self,
        reason: Reason,
        message: str,
        *,
        retry_scale: float | None = None,
        warn: bool = True,
        also: ConditionType | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.retry_scale = retry_scale
        self.warn = warn
        self.also = also


class ConditionTracker:
    """A resource's conditions as one reconcile updates them (lastTransitionTime kept when unchanged)."""

    def __init__(self, conditions: Iterable[Mapping[str, Any]] | None, generation: int, now: dt.datetime | None):
        self.items: list[dict[str, Any]] = [dict(c) for c in conditions or ()]
        self.generation = generation
        self.now = now

    def set(self, type_: str, ok: bool, reason: Reason, message: str) -> None:
        self.items = set_condition(self.items, type_, ok, reason, message, observed_generation=self.generation,
                                   now=self.now)

    def remove(self, type_: str) -> None:
        self.items = remove_condition(self.items, type_)

    def find(self, type_: str) -> Mapping[str, Any] | None:
        return find_condition(self.items, type_)

    def is_new(self, type_: str, reason: Reason, message: str) -> bool:
        found = self.find(type_) or {}
        return (found.get("reason"), found.get("message")) != (str(reason), message)


def stopped_outcome(
    stop: StopReconcile,
    conditions: ConditionTracker,
    status: Mapping[str, Any],
    events: Iterable[Event],
    retry_in: Callable[[float], float],
) -> Outcome:
    """Ready=False for the step that stopped, with one Warning event per new problem (not one per resync)
    and a retry when the step asked for one. `status` is what the earlier steps found."""
    news = conditions.is_new(ConditionType.READY, stop.reason, stop.message)
    if stop.also is not None:
        conditions.set(stop.also, False, stop.reason, stop.message)
    conditions.set(ConditionType.READY, False, stop.reason, stop.message)
    warning = (Event("Warning", stop.reason, stop.message),) if stop.warn and news else ()
    return Outcome(
        {**status, "conditions": conditions.items},
        events=(*events, *warning),
        retry_after=retry_in(stop.retry_scale) if stop.retry_scale is not None else None,
        error=stop.message,
    )
