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
from kct.controller.kernel import ConnectionProblem, Event, Outcome, backoff, format_validation_error
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
    "SubscriptionResource",
    "delete_subscription",
    "owner_of",
    "reconcile_subscription",
]



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


def owner_of(claims: Iterable[Claim]) -> Claim | None:
    ordered = sorted(claims)
    return ordered[0] if ordered else None


def _kafka_connection(spec: Mapping[str, Any]) -> KafkaConnection | None:
    raw = spec.get("kafka")
    return KafkaConnection.model_validate(raw) if raw else None


def _interval_capped(spec: ClientMetricsSubscriptionSpec) -> tuple[bool, Reason, str]:
    """IntervalCapped: the broker pushes at most every BROKER_MAX_EFFECTIVE_INTERVAL_MS, whatever is asked."""
    cap = BROKER_MAX_EFFECTIVE_INTERVAL_MS
    if spec.interval_ms > cap:
        message = (
            f"spec.intervalMs: {spec.interval_ms} exceeds the broker's cap of {cap} ms; "
            f"clients will push every {cap} ms"
        )
        return True, Reason.INTERVAL_ABOVE_BROKER_CAP, message
    message = f"spec.intervalMs: {spec.interval_ms} is within the broker's cap of {cap} ms"
    return False, Reason.INTERVAL_WITHIN_BROKER_CAP, message


def _broker_problem(
    error: ConnectionProblem | KafkaAdminError,
    spec: ClientMetricsSubscriptionSpec,
    admin_for: AdminFactory,
    name: str,
    desired: Mapping[str, str],
) -> tuple[Reason, str, float | None]:
    """Ready's reason and message for a failed talk to the broker, and how much slower than usual to retry
    (None: not at all)."""
    if isinstance(error, ConnectionProblem):
        return Reason.KAFKA_CONNECTION_INVALID, f"spec.kafka: {error}", 5.0
    if isinstance(error, InvalidClientMetricsConfigError):
        message = f"the broker refused CLIENT_METRICS {name!r} configs {dict(desired)}: {error}"
        return Reason.KAFKA_REJECTED, message, None
    reason = {
        KafkaUnreachableError: Reason.KAFKA_UNREACHABLE,
        KafkaNotAuthorizedError: Reason.KAFKA_NOT_AUTHORIZED,
    }.get(type(error), Reason.KAFKA_ERROR)
    slow = 5.0 if reason is Reason.KAFKA_NOT_AUTHORIZED else 1.0
    return reason, f"{reason}: {_servers(spec, admin_for)}: {error}", slow


def _servers(spec: ClientMetricsSubscriptionSpec, admin_for: AdminFactory) -> str:
    if spec.kafka:
        return spec.kafka.bootstrap_servers
    default = getattr(admin_for, "default_bootstrap", None)
    return f"default cluster {default or ''}".strip()


def _warning_if_new(previous_ready: Mapping[str, Any], reason: Reason, message: str) -> tuple[Event, ...]:
    """One Warning event per new problem, not one per resync."""
    unchanged = previous_ready.get("reason") == reason and previous_ready.get("message") == message
    return () if unchanged else (Event("Warning", reason, message),)


def _paused(resource: SubscriptionResource, conditions: list[dict[str, Any]], now: dt.datetime | None) -> Outcome:
    """ReconciliationPaused=True and nothing else: the broker is not asked anything."""
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
    return Outcome({"conditions": conditions, "subscriptionName": resource.subscription_name})


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
        return _warning_if_new(previous_ready, reason, message)

    if resource.paused:
        return _paused(resource, conditions, now)
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

    capped, capped_reason, capped_message = _interval_capped(spec)
    conditions = set_condition(
        conditions,
        ConditionType.INTERVAL_CAPPED,
        capped,
        capped_reason,
        capped_message,
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
    except (ConnectionProblem, KafkaAdminError) as error:
        reason, message, slow = _broker_problem(error, spec, admin_for, name, desired)
        status["conditions"] = ready(False, reason, message)
        if slow is None:  # the broker refused the spec: retrying will not help, a new spec will
            return Outcome(status, events=_on_change(reason, message), error=message)
        return Outcome(status, retry_after=backoff(retry, backoff_base * slow, backoff_max), error=message)

    # A difference found by a resync, after the same configs were applied, was made outside the operator.
    if changes and resync and resource.status.get("appliedConfigs") == desired:
        status["driftReverted"] = int(resource.status.get("driftReverted") or 0) + 1
        status["lastDriftRevertedTime"] = stamp
        events.append(_drift_event(name, desired, actual))
    verb = "applied" if changes else "already in effect"
    status["conditions"] = ready(True, Reason.RECONCILED, f"CLIENT_METRICS {name!r} {verb}: {desired}")
    status["appliedConfigs"] = desired
    status["lastSyncTime"] = stamp
    status.update(_bootstrap_status(spec, admin))
    return Outcome(status, events=tuple(events))


def _drift_event(name: str, desired: Mapping[str, str], actual: Mapping[str, str]) -> Event:
    found = {key: actual.get(key) for key in sorted(set(desired) | set(actual))}
    message = f"CLIENT_METRICS {name!r} was changed outside the operator ({found}); restored {dict(desired)}"
    return Event("Warning", Reason.DRIFT_REVERTED, message)


def _bootstrap_status(spec: ClientMetricsSubscriptionSpec, admin: ClientMetricsAdmin) -> dict[str, str]:
    """`bootstrapServers`: the cluster the admin talked to (or the spec's), omitted when unknown."""
    servers = getattr(admin, "bootstrap_servers", None) or (spec.kafka.bootstrap_servers if spec.kafka else None)
    return {"bootstrapServers": servers} if servers else {}


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
        admin_for(connection, resource.namespace).delete_subscription(name)
    except (KafkaAdminError, ConnectionProblem) as error:
        message = f"cannot delete CLIENT_METRICS {name!r}: {error}"
        return Outcome({}, retry_after=backoff(retry, backoff_base, backoff_max), error=message)
    return Outcome({})
