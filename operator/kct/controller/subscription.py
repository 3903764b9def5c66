"""Reconciling one ClientMetricsSubscription, without kopf.

`reconcile_subscription` reads top to bottom: pause? -> parse the spec -> who owns the subscription
name? -> desired configs (pure) -> describe the broker -> alter what differs -> status. It is a plain
blocking function over the admin port, so unit tests drive it with the in-memory fake and the kopf
handlers (`kct.controller.handlers`) run it in a thread and only translate its `Outcome` into a
status patch, events and retries.

Ownership: CLIENT_METRICS configs cannot carry an owner marker, so when several resources claim one
subscription name the oldest (by creationTimestamp, then namespace/name) owns it; the others get
Ready=False/Conflict and never touch the broker. The claims come from a kopf index over all resources.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from kct.api.subscription import (
    BROKER_MAX_EFFECTIVE_INTERVAL_MS,
    ClientMetricsSubscriptionSpec,
    KafkaConnection,
    effective_subscription_name,
)
from kct.controller.conditions import (
    ConditionType,
    Reason,
    find_condition,
    now_rfc3339,
    remove_condition,
    set_condition,
)
from kct.controller.resource import PAUSE_ANNOTATION, ResourceView
from kct.kafka.clientmetrics import config_changes, desired_configs
from kct.kafka.errors import (
    InvalidClientMetricsConfigError,
    KafkaAdminError,
    KafkaNotAuthorizedError,
    KafkaUnreachableError,
)
from kct.kafka.port import ClientMetricsAdmin

__all__ = [
    "PAUSE_ANNOTATION",
    "AdminFactory",
    "Claim",
    "ConnectionProblem",
    "Event",
    "Outcome",
    "SubscriptionResource",
    "delete_subscription",
    "format_validation_error",
    "owner_of",
    "reconcile_subscription",
]



class ConnectionProblem(ValueError):
    """The Kafka connection cannot be built (no cluster configured, Secret missing or unusable)."""


class SecretMissing(ConnectionProblem):
    """The Secret named by `spec.kafka.secretRef` does not exist. `last_known` is the admin built from its
    data when it last existed (None if this operator never read it): enough to clean up after a resource
    whose Secret was deleted first, as happens when their namespace is deleted."""

    def __init__(self, message: str, last_known: ClientMetricsAdmin | None = None) -> None:
        super().__init__(message)
        self.last_known = last_known


# (connection from the spec or None for the default cluster, the resource's namespace) -> admin
AdminFactory = Callable[[KafkaConnection | None, str], ClientMetricsAdmin]


@dataclass(frozen=True, order=True)
class Claim:
    """A resource claiming a subscription name; ordering decides ownership (oldest first)."""

    creation_timestamp: str
    namespace: str
    name: str
    uid: str = field(compare=False)

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


class SubscriptionResource(ResourceView):
    """The parts of a ClientMetricsSubscription body that reconciliation reads."""

    @property
    def subscription_name(self) -> str:
        return effective_subscription_name(dict(self.spec), self.name)

    def claim(self) -> Claim:
        return Claim(self.creation_timestamp, self.namespace, self.name, self.uid)


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


def owner_of(claims: Iterable[Claim]) -> Claim | None:
    ordered = sorted(claims)
    return ordered[0] if ordered else None


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


def _kafka_connection(spec: Mapping[str, Any]) -> KafkaConnection | None:
    raw = spec.get("kafka")
    return KafkaConnection.model_validate(raw) if raw else None


def _backoff(retry: int, base: float, maximum: float) -> float:
    return float(min(maximum, base * (2 ** min(retry, 16))))


def reconcile_subscription(
    resource: SubscriptionResource,
    claims: Iterable[Claim],
    admin_for: AdminFactory,
    *,
    resync: bool = False,
    retry: int = 0,
    backoff_base: float = 2.0,
    backoff_max: float = 60.0,
    now: dt.datetime | None = None,
) -> Outcome:
    """Make the broker's CLIENT_METRICS resource follow `resource`'s spec (or explain why not).
    `resync` marks a periodic check: a difference found then is drift made outside the operator."""
    stamp = now_rfc3339(now)
    name = resource.subscription_name
    conditions: list[dict[str, Any]] = list(resource.status.get("conditions") or [])
    status: dict[str, Any] = {"observedGeneration": resource.generation, "subscriptionName": name}

    def ready(ok: bool, reason: Reason, message: str) -> list[dict[str, Any]]:
        return set_condition(
            conditions, ConditionType.READY, ok, reason, message, observed_generation=resource.generation, now=now
        )

    previous_ready = find_condition(conditions, ConditionType.READY) or {}

    def _on_change(reason: Reason, message: str) -> tuple[Event, ...]:
        # One Warning event per new problem, not one per resync.
        unchanged = previous_ready.get("reason") == reason and previous_ready.get("message") == message
        return () if unchanged else (Event("Warning", reason, message),)

    if resource.paused:
        conditions = set_condition(
            conditions,
            ConditionType.RECONCILIATION_PAUSED,
            True,
            Reason.PAUSED,
            f"annotation {PAUSE_ANNOTATION}=true: the broker's configs are left alone",
            observed_generation=resource.generation,
            now=now,
        )
        # The pause is not a new observation of the spec: keep observedGeneration where it was.
        return Outcome({"conditions": conditions, "subscriptionName": name})
    conditions = remove_condition(conditions, ConditionType.RECONCILIATION_PAUSED)

    try:
        spec = ClientMetricsSubscriptionSpec.model_validate(dict(resource.spec))
    except ValidationError as error:
        message = f"{format_validation_error(error)}; nothing was sent to Kafka"
        status["conditions"] = ready(False, Reason.INVALID_SPEC, message)
        return Outcome(status, events=_on_change(Reason.INVALID_SPEC, message), error=message)

    owner = owner_of(claims)
    if owner is not None and owner.uid != resource.uid:
        message = (
            f"CLIENT_METRICS subscription {name!r} is already managed by {owner.ref} "
            f"(created {owner.creation_timestamp}); this resource leaves it alone"
        )
        status["conditions"] = ready(False, Reason.CONFLICT, message)
        return Outcome(status, events=_on_change(Reason.CONFLICT, message), error=message)

    capped = spec.interval_ms > BROKER_MAX_EFFECTIVE_INTERVAL_MS
    conditions = set_condition(
        conditions,
        ConditionType.INTERVAL_CAPPED,
        capped,
        Reason.INTERVAL_ABOVE_BROKER_CAP if capped else Reason.INTERVAL_WITHIN_BROKER_CAP,
        (
            f"spec.intervalMs: {spec.interval_ms} exceeds the broker's cap of {BROKER_MAX_EFFECTIVE_INTERVAL_MS} ms; "
            f"clients will push every {BROKER_MAX_EFFECTIVE_INTERVAL_MS} ms"
            if capped
            else f"spec.intervalMs: {spec.interval_ms} is within the broker's cap "
            f"of {BROKER_MAX_EFFECTIVE_INTERVAL_MS} ms"
        ),
        observed_generation=resource.generation,
        now=now,
    )

    desired = desired_configs(spec)
    events: list[Event] = []
    try:
        admin = admin_for(spec.kafka, resource.namespace)
        actual = admin.describe_subscription(name)
        changes = config_changes(desired, actual)
        if changes:
            admin.alter_subscription(name, changes.set_configs, changes.delete_configs)
    except ConnectionProblem as error:
        message = f"spec.kafka: {error}"
        status["conditions"] = ready(False, Reason.KAFKA_CONNECTION_INVALID, message)
        return Outcome(status, retry_after=_backoff(retry, backoff_base * 5, backoff_max), error=message)
    except InvalidClientMetricsConfigError as error:
        message = f"the broker refused CLIENT_METRICS {name!r} configs {desired}: {error}"
        status["conditions"] = ready(False, Reason.KAFKA_REJECTED, message)
        return Outcome(status, events=_on_change(Reason.KAFKA_REJECTED, message), error=message)
    except KafkaAdminError as error:
        reason = {
            KafkaUnreachableError: Reason.KAFKA_UNREACHABLE,
            KafkaNotAuthorizedError: Reason.KAFKA_NOT_AUTHORIZED,
        }.get(type(error), Reason.KAFKA_ERROR)
        default = getattr(admin_for, "default_bootstrap", None)
        servers = spec.kafka.bootstrap_servers if spec.kafka else f"default cluster {default or ''}".strip()
        message = f"{reason}: {servers}: {error}"
        status["conditions"] = ready(False, reason, message)
        slow = 5.0 if reason is Reason.KAFKA_NOT_AUTHORIZED else 1.0
        return Outcome(status, retry_after=_backoff(retry, backoff_base * slow, backoff_max), error=message)

    previously_applied = resource.status.get("appliedConfigs")
    if changes and resync and previously_applied == desired:
        count = int(resource.status.get("driftReverted") or 0) + 1
        status["driftReverted"] = count
        status["lastDriftRevertedTime"] = stamp
        found = {key: actual.get(key) for key in sorted(set(desired) | set(actual))}
        events.append(
            Event(
                "Warning",
                Reason.DRIFT_REVERTED,
                f"CLIENT_METRICS {name!r} was changed outside the operator ({found}); restored {desired}",
            )
        )
    verb = "applied" if changes else "already in effect"
    status["conditions"] = ready(True, Reason.RECONCILED, f"CLIENT_METRICS {name!r} {verb}: {desired}")
    status["appliedConfigs"] = desired
    status["lastSyncTime"] = stamp
    status["bootstrapServers"] = getattr(admin, "bootstrap_servers", None) or (
        spec.kafka.bootstrap_servers if spec.kafka else None
    )
    if status["bootstrapServers"] is None:
        del status["bootstrapServers"]
    return Outcome(status, events=tuple(events))


def delete_subscription(
    resource: SubscriptionResource,
    claims: Iterable[Claim],
    admin_for: AdminFactory,
    *,
    retry: int = 0,
    backoff_base: float = 2.0,
    backoff_max: float = 60.0,
) -> Outcome:
    """Remove every config of the subscription, unless paused or another (older) resource owns it.
    `retry_after` is set when Kafka could not be reached (the finalizer stays until it can)."""
    name = resource.subscription_name
    if resource.paused:
        return Outcome({}, events=(Event("Normal", Reason.PAUSED, f"paused: CLIENT_METRICS {name!r} left in place"),))
    owner = owner_of([*claims, resource.claim()])
    if owner is not None and owner.uid != resource.uid:
        # Not ours: the owner keeps the subscription.
        return Outcome({})
    # Ours: delete even if later claimants exist. Deciding "someone else will keep it" would race
    # when several claimants are deleted at once (a namespace deletion) and leak the subscription;
    # a surviving claimant becomes the owner and recreates it at its next resync.
    try:
        connection = _kafka_connection(resource.spec)
    except ValidationError:
        connection = None
    try:
        try:
            admin = admin_for(connection, resource.namespace)
        except SecretMissing as missing:
            if missing.last_known is None:
                return _abandon_cleanup(name, str(missing))
            admin = missing.last_known  # the Secret went first (a namespace deletion): its last data still works
        admin.delete_subscription(name)
    except (KafkaAdminError, ConnectionProblem) as error:
        message = f"cannot delete CLIENT_METRICS {name!r}: {error}"
        return Outcome({}, retry_after=_backoff(retry, backoff_base, backoff_max), error=message)
    return Outcome({})


def _abandon_cleanup(name: str, why: str) -> Outcome:
    """Release a deleted resource whose Kafka connection is gone for good: retrying would hold its finalizer,
    and its namespace in Terminating, forever. The leftover configs are named so a human can remove them."""
    message = (
        f"CLIENT_METRICS {name!r} is left on the broker: {why}, and this operator holds no client built from "
        f"it; the finalizer is released. Remove the subscription with `kafka-client-metrics.sh "
        f"--bootstrap-server ... --alter --name {name} --delete-config metrics,interval.ms,match`"
    )
    return Outcome({}, events=(Event("Warning", Reason.CLEANUP_ABANDONED, message),), error=message)
