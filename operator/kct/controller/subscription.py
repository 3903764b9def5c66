"""Reconciling one ClientMetricsSubscription, without kopf.

`reconcile_subscription` reads top to bottom, one named step each: pause? -> `parse_spec` ->
`check_ownership` (who owns the subscription name?) -> desired configs (pure) -> `sync_configs` (describe
the broker, alter what differs) -> status, validated by the `ClientMetricsSubscriptionStatus` model. A step
that cannot go on raises `StopReconcile` (`kct.controller.kernel`). It is a plain blocking function over
the admin port, so unit tests drive it with the in-memory fake and the kopf handlers
(`kct.controller.subscription_handlers`) run it in a thread and only translate its `Outcome` into a status patch,
events and retries.

Ownership: CLIENT_METRICS configs cannot carry an owner marker, so when several resources claim one
subscription name the oldest (by creationTimestamp, then namespace/name) owns it; the others get
Ready=False/Conflict and never touch the broker. The claims come from a kopf index over all resources.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from pydantic import ValidationError

from kct.api.status import ClientMetricsSubscriptionStatus
from kct.api.subscription import (
    BROKER_MAX_EFFECTIVE_INTERVAL_MS,
    ClientMetricsSubscriptionSpec,
    KafkaConnection,
    effective_subscription_name,
)
from kct.controller.conditions import ConditionType, Reason, now_rfc3339
from kct.controller.kernel import (
    ConditionTracker,
    Event,
    Outcome,
    SecretMissing,
    StopReconcile,
    backoff,
    stopped_outcome,
)
from kct.controller.reasons import KAFKA_PROBLEMS, invalid_spec_stop, kafka_stop
from kct.controller.resource import PAUSE_ANNOTATION, ResourceView
from kct.kafka.clientmetrics import config_changes, desired_configs
from kct.kafka.port import ClientMetricsAdmin

__all__ = [
    "PAUSE_ANNOTATION",
    "AdminFactory",
    "Claim",
    "ConfigSync",
    "SubscriptionResource",
    "check_ownership",
    "delete_subscription",
    "owner_of",
    "parse_spec",
    "reconcile_subscription",
    "sync_configs",
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


def _servers(spec: ClientMetricsSubscriptionSpec, admin_for: AdminFactory) -> str:
    if spec.kafka:
        return spec.kafka.bootstrap_servers
    default = getattr(admin_for, "default_bootstrap", None)
    return f"default cluster {default or ''}".strip()


def parse_spec(resource: SubscriptionResource) -> ClientMetricsSubscriptionSpec:
    """The spec as a strict model; a problem names the field and stops before Kafka is asked anything."""
    try:
        return ClientMetricsSubscriptionSpec.model_validate(dict(resource.spec))
    except ValidationError as error:
        raise invalid_spec_stop(error, untouched="nothing was sent to Kafka") from None


def check_ownership(resource: SubscriptionResource, claims: Iterable[Claim]) -> None:
    """Only the oldest claimant of a subscription name touches the broker; the others stop here."""
    owner = owner_of(claims)
    if owner is not None and owner.uid != resource.uid:
        message = (
            f"CLIENT_METRICS subscription {resource.subscription_name!r} is already managed by {owner.ref} "
            f"(created {owner.creation_timestamp}); this resource leaves it alone"
        )
        raise StopReconcile(Reason.CONFLICT, message)


@dataclass(frozen=True)
class ConfigSync:
    """The broker's configs before `sync_configs` altered them, and what it changed."""

    actual: Mapping[str, str]
    changed: bool
    bootstrap_servers: str | None


def sync_configs(
    spec: ClientMetricsSubscriptionSpec,
    desired: Mapping[str, str],
    admin_for: AdminFactory,
    namespace: str,
    name: str,
) -> ConfigSync:
    """Describe the CLIENT_METRICS resource and alter what differs from `desired`."""
    try:
        admin = admin_for(spec.kafka, namespace)
        actual = admin.describe_subscription(name)
        changes = config_changes(dict(desired), actual)
        if changes:
            admin.alter_subscription(name, changes.set_configs, changes.delete_configs)
    except KAFKA_PROBLEMS as error:
        refused = f"the broker refused CLIENT_METRICS {name!r} configs {dict(desired)}"
        raise kafka_stop(error, servers=_servers(spec, admin_for), refused=refused) from None
    servers = getattr(admin, "bootstrap_servers", None) or (spec.kafka.bootstrap_servers if spec.kafka else None)
    return ConfigSync(actual, bool(changes), servers)


def _retry_in(retry: int, base: float, maximum: float, scale: float) -> float:
    return backoff(retry, base * scale, maximum)


def _status(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The status patch, checked against the CRD's status model before it is written."""
    return ClientMetricsSubscriptionStatus.model_validate(dict(fields)).to_kube()


def _paused(resource: SubscriptionResource, conditions: ConditionTracker) -> Outcome:
    """ReconciliationPaused=True and nothing else: the broker is not asked anything."""
    message = f"annotation {PAUSE_ANNOTATION}=true: the broker's configs are left alone"
    conditions.set(ConditionType.RECONCILIATION_PAUSED, True, Reason.PAUSED, message)
    # The pause is not a new observation of the spec: keep observedGeneration where it was.
    return Outcome(_status({"conditions": conditions.items, "subscriptionName": resource.subscription_name}))


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
    conditions = ConditionTracker(resource.status.get("conditions"), resource.generation, now)
    if resource.paused:
        return _paused(resource, conditions)
    conditions.remove(ConditionType.RECONCILIATION_PAUSED)
    name = resource.subscription_name
    status: dict[str, Any] = {"observedGeneration": resource.generation, "subscriptionName": name}
    try:
        spec = parse_spec(resource)
        check_ownership(resource, claims)
        conditions.set(ConditionType.INTERVAL_CAPPED, *_interval_capped(spec))
        desired = desired_configs(spec)
        synced = sync_configs(spec, desired, admin_for, resource.namespace, name)
    except StopReconcile as stop:
        outcome = stopped_outcome(stop, conditions, status, (), partial(_retry_in, retry, backoff_base, backoff_max))
        return Outcome(_status(outcome.status), outcome.events, outcome.retry_after, outcome.error)
    stamp = now_rfc3339(now)
    events: list[Event] = []
    # A difference found by a resync, after the same configs were applied, was made outside the operator.
    if synced.changed and resync and resource.status.get("appliedConfigs") == desired:
        status["driftReverted"] = int(resource.status.get("driftReverted") or 0) + 1
        status["lastDriftRevertedTime"] = stamp
        events.append(_drift_event(name, desired, synced.actual))
    verb = "applied" if synced.changed else "already in effect"
    conditions.set(ConditionType.READY, True, Reason.RECONCILED, f"CLIENT_METRICS {name!r} {verb}: {desired}")
    status.update(conditions=conditions.items, appliedConfigs=desired, lastSyncTime=stamp)
    if synced.bootstrap_servers:
        status["bootstrapServers"] = synced.bootstrap_servers
    return Outcome(_status(status), events=tuple(events))


def _drift_event(name: str, desired: Mapping[str, str], actual: Mapping[str, str]) -> Event:
    found = {key: actual.get(key) for key in sorted(set(desired) | set(actual))}
    message = f"CLIENT_METRICS {name!r} was changed outside the operator ({found}); restored {dict(desired)}"
    return Event("Warning", Reason.DRIFT_REVERTED, message)


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
    except KAFKA_PROBLEMS as error:
        message = f"cannot delete CLIENT_METRICS {name!r}: {error}"
        return Outcome({}, retry_after=backoff(retry, backoff_base, backoff_max), error=message)
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
