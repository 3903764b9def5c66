"""The steps of a ClientMetricsSubscription reconcile, each alone: parse, ownership, broker sync."""

from __future__ import annotations

from typing import Any

import pytest

from kct.api.subscription import KafkaConnection
from kct.controller.conditions import Reason
from kct.controller.kernel import SecretMissing, StopReconcile
from kct.controller.subscription import (
    Claim,
    SubscriptionResource,
    check_ownership,
    parse_spec,
    sync_configs,
)
from kct.kafka.clientmetrics import desired_configs
from kct.kafka.fake import InMemoryClientMetricsAdmin
from kct.kafka.port import ClientMetricsAdmin


def resource(spec: dict[str, Any], uid: str = "uid-1") -> SubscriptionResource:
    return SubscriptionResource("team-a", "checkout", uid, 1, spec, {}, {}, "2026-01-02T00:00:00Z")


def admin_of(kafka: InMemoryClientMetricsAdmin) -> Any:
    def admin_for(connection: KafkaConnection | None, namespace: str) -> ClientMetricsAdmin:
        return kafka

    return admin_for


def test_parse_spec_names_the_field_and_asks_for_no_retry() -> None:
    with pytest.raises(StopReconcile) as stopped:
        parse_spec(resource({"metrics": ["a."], "intervalMs": "often"}))
    assert stopped.value.reason is Reason.INVALID_SPEC and stopped.value.retry_scale is None
    assert "spec.intervalMs" in stopped.value.message and "nothing was sent to Kafka" in stopped.value.message


def test_a_younger_claimant_stops_with_a_conflict_naming_the_owner() -> None:
    """Given an older claim on the same name by another resource, Then this one stops with Conflict."""
    older = Claim("2026-01-01T00:00:00Z", "team-b", "checkout", "uid-0")
    mine = resource({}).claim()
    check_ownership(resource({}), [mine])  # alone: no problem
    with pytest.raises(StopReconcile) as stopped:
        check_ownership(resource({}), [mine, older])
    assert stopped.value.reason is Reason.CONFLICT and "team-b/checkout" in stopped.value.message


def test_sync_configs_alters_only_what_differs_and_reports_it() -> None:
    kafka = InMemoryClientMetricsAdmin()
    spec = parse_spec(resource({"metrics": ["a."], "intervalMs": 1000}))
    desired = desired_configs(spec)
    first = sync_configs(spec, desired, admin_of(kafka), "team-a", "checkout")
    assert first.changed and first.actual == {} and kafka.resources["checkout"] == desired
    second = sync_configs(spec, desired, admin_of(kafka), "team-a", "checkout")
    assert not second.changed and second.actual == desired


def test_sync_configs_retries_an_outage_quietly_and_a_refusal_not_at_all() -> None:
    spec = parse_spec(resource({"metrics": ["a."], "intervalMs": 1000}))
    down = InMemoryClientMetricsAdmin(unreachable=True)
    with pytest.raises(StopReconcile) as outage:
        sync_configs(spec, desired_configs(spec), admin_of(down), "team-a", "checkout")
    assert outage.value.reason is Reason.KAFKA_UNREACHABLE and outage.value.retry_scale == 1.0
    assert not outage.value.warn
    refusing = InMemoryClientMetricsAdmin(reject_next="interval.ms too small")
    with pytest.raises(StopReconcile) as refused:
        sync_configs(spec, desired_configs(spec), admin_of(refusing), "team-a", "checkout")
    assert refused.value.reason is Reason.KAFKA_REJECTED and refused.value.retry_scale is None and refused.value.warn


def test_sync_configs_announces_a_missing_connection_secret_and_retries_it_slowly() -> None:
    """Given spec.kafka's Secret missing, Then KafkaConnectionInvalid naming spec.kafka, with a Warning (a human
    must act; it is posted once per new problem) and a slow retry, as the TelemetryReceiver controller does."""
    spec = parse_spec(resource({"metrics": ["a."], "intervalMs": 1000}))

    def admin_for(connection: KafkaConnection | None, namespace: str) -> ClientMetricsAdmin:
        raise SecretMissing("secretRef: Secret team-a/kafka not found")

    with pytest.raises(StopReconcile) as stopped:
        sync_configs(spec, desired_configs(spec), admin_for, "team-a", "checkout")
    assert stopped.value.reason is Reason.KAFKA_CONNECTION_INVALID and stopped.value.also is None
    assert stopped.value.message == "spec.kafka: secretRef: Secret team-a/kafka not found"
    assert stopped.value.warn and stopped.value.retry_scale == 5.0
