"""Reconciling ClientMetricsSubscriptions against the in-memory admin (no kopf, no Kafka)."""

from __future__ import annotations

from typing import Any

import pytest

from kct.api.status import ClientMetricsSubscriptionStatus
from kct.api.subscription import KafkaConnection
from kct.controller.kafka_clients import AdminPool
from kct.controller.kernel import ConnectionProblem, Outcome
from kct.controller.subscription import (
    SubscriptionResource,
    delete_subscription,
    reconcile_subscription,
)
from kct.kafka.fake import InMemoryClientMetricsAdmin
from kct.kafka.port import ClientMetricsAdmin


def resource(
    name: str = "checkout",
    spec: dict[str, Any] | None = None,
    *,
    uid: str = "uid-1",
    created: str = "2026-01-01T00:00:00Z",
    generation: int = 1,
    status: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
) -> SubscriptionResource:
    return SubscriptionResource(
        namespace="team-a",
        name=name,
        uid=uid,
        generation=generation,
        creation_timestamp=created,
        spec=spec if spec is not None else {"metrics": ["org.apache.kafka.producer."], "intervalMs": 60000},
        annotations=annotations or {},
        status=status or {},
    )


@pytest.fixture
def kafka() -> InMemoryClientMetricsAdmin:
    return InMemoryClientMetricsAdmin()


def factory(admin: ClientMetricsAdmin) -> Any:
    def admin_for(connection: KafkaConnection | None, namespace: str) -> ClientMetricsAdmin:
        return admin

    return admin_for


def run(res: SubscriptionResource, kafka: InMemoryClientMetricsAdmin, **kwargs: Any) -> Outcome:
    claims = kwargs.pop("claims", [res.claim()])
    outcome = reconcile_subscription(res, claims, factory(kafka), **kwargs)
    # What the controller writes must fit the CRD's status schema (extra fields would be pruned silently).
    ClientMetricsSubscriptionStatus.model_validate(outcome.status)
    return outcome


def condition(outcome: Outcome, type_: str = "Ready") -> dict[str, Any]:
    return next(c for c in outcome.status["conditions"] if c["type"] == type_)


def test_create_applies_spec_and_reports_ready(kafka: InMemoryClientMetricsAdmin) -> None:
    """Given a new resource, When reconciled, Then the broker has its configs and Ready=True."""
    outcome = run(resource(spec={"metrics": ["a.", "b."], "intervalMs": 1000, "match": {"clientId": "app-.*"}}), kafka)
    assert kafka.resources == {
        "checkout": {"metrics": "a.,b.", "interval.ms": "1000", "match": "client_id=app-.*"}
    }
    assert condition(outcome)["status"] == "True"
    assert condition(outcome)["reason"] == "Reconciled"
    assert outcome.status["observedGeneration"] == 1
    assert outcome.status["appliedConfigs"] == kafka.resources["checkout"]
    assert outcome.status["subscriptionName"] == "checkout"
    assert outcome.retry_after is None and outcome.events == ()


def test_update_removes_match_when_dropped(kafka: InMemoryClientMetricsAdmin) -> None:
    """Given an applied subscription with selectors, When the selectors are removed from the spec,
    Then the broker's match config is deleted and the rest updated."""
    run(resource(spec={"metrics": ["a."], "match": {"clientId": "x"}}), kafka)
    run(resource(spec={"metrics": ["b."]}, generation=2), kafka)
    assert kafka.resources["checkout"] == {"metrics": "b.", "interval.ms": "300000"}
    assert kafka.calls[-1] == ("checkout", {"metrics": "b."}, ("match",))


def test_in_sync_sends_nothing(kafka: InMemoryClientMetricsAdmin) -> None:
    """Given the broker already equal to the spec, When reconciled, Then no alter is sent."""
    run(resource(), kafka)
    calls = len(kafka.calls)
    outcome = run(resource(), kafka, resync=True)
    assert len(kafka.calls) == calls
    assert "already in effect" in condition(outcome)["message"]


def test_subscription_name_overrides_metadata_name(kafka: InMemoryClientMetricsAdmin) -> None:
    """Given spec.subscriptionName, When reconciled, Then that CLIENT_METRICS resource is written."""
    run(resource(spec={"metrics": ["*"], "subscriptionName": "Legacy_Sub"}), kafka)
    assert list(kafka.resources) == ["Legacy_Sub"]


def test_drift_is_reverted_and_recorded(kafka: InMemoryClientMetricsAdmin) -> None:
    """Given an applied subscription altered behind the operator's back, When the resync runs, Then the
    configs are restored, driftReverted counts it and a Warning event says what was found."""
    first = run(resource(), kafka)
    kafka.resources["checkout"]["interval.ms"] = "999"
    outcome = run(resource(status=first.status), kafka, resync=True)
    assert kafka.resources["checkout"]["interval.ms"] == "60000"
    assert outcome.status["driftReverted"] == 1
    assert [e.reason for e in outcome.events] == ["DriftReverted"]
    assert "'interval.ms': '999'" in outcome.events[0].message


def test_deleted_behind_our_back_is_recreated(kafka: InMemoryClientMetricsAdmin) -> None:
    """Given an applied subscription deleted with kafka-configs.sh, When resynced, Then it is back."""
    first = run(resource(), kafka)
    kafka.delete_subscription("checkout")
    outcome = run(resource(status=first.status), kafka, resync=True)
    assert "checkout" in kafka.resources and outcome.status["driftReverted"] == 1


def test_invalid_regex_sends_nothing(kafka: InMemoryClientMetricsAdmin) -> None:
    """Given a match regex RE2 refuses, When reconciled, Then Ready=False/InvalidSpec names field, value
    and reason, and nothing reaches Kafka."""
    outcome = run(resource(spec={"metrics": ["*"], "match": {"clientId": "app-(.*"}}), kafka)
    ready = condition(outcome)
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert ready["message"].startswith(
        "spec.match.clientId: 'app-(.*' is not a valid RE2 regular expression: missing ): app-(.*"
    )
    assert kafka.calls == [] and kafka.resources == {}
    assert outcome.retry_after is None


def test_problem_event_posted_once(kafka: InMemoryClientMetricsAdmin) -> None:
    """Given an invalid spec already reported, When resynced, Then no second Warning event is posted."""
    bad = resource(spec={"metrics": ["*"], "match": {"clientId": "app-(.*"}})
    first = run(bad, kafka)
    again = run(resource(spec=dict(bad.spec), status=first.status), kafka, resync=True)
    assert [e.reason for e in first.events] == ["InvalidSpec"] and again.events == ()


def test_later_claimant_gets_conflict(kafka: InMemoryClientMetricsAdmin) -> None:
    """Given two resources claiming one subscription name, When both reconcile, Then the older owns it
    and the later gets Ready=False/Conflict naming the owner, without touching the broker."""
    older = resource("shared", uid="old", created="2026-01-01T00:00:00Z", spec={"metrics": ["a."]})
    later = SubscriptionResource(
        namespace="team-b", name="other", uid="new", generation=1, creation_timestamp="2026-01-02T00:00:00Z",
        spec={"metrics": ["b."], "subscriptionName": "shared"}, annotations={}, status={},
    )
    claims = [later.claim(), older.claim()]
    run(older, kafka, claims=claims)
    outcome = run(later, kafka, claims=claims)
    assert kafka.resources["shared"]["metrics"] == "a."
    ready = condition(outcome)
    assert (ready["status"], ready["reason"]) == ("False", "Conflict")
    assert "team-a/shared" in ready["message"]


def test_conflict_loser_takes_over_when_owner_is_gone(kafka: InMemoryClientMetricsAdmin) -> None:
    """Given the owner deleted (claims hold only the later resource), When it resyncs, Then it applies."""
    later = resource("other", uid="new", spec={"metrics": ["b."], "subscriptionName": "shared"})
    outcome = run(later, kafka, claims=[later.claim()], resync=True)
    assert condition(outcome)["status"] == "True" and kafka.resources["shared"]["metrics"] == "b."


def test_interval_above_broker_cap_warns(kafka: InMemoryClientMetricsAdmin) -> None:
    """Given intervalMs above 300000, When reconciled, Then it is applied and IntervalCapped=True."""
    outcome = run(resource(spec={"metrics": ["*"], "intervalMs": 600000}), kafka)
    capped = condition(outcome, "IntervalCapped")
    assert (capped["status"], capped["reason"]) == ("True", "IntervalAboveBrokerCap")
    assert "600000" in capped["message"] and condition(outcome)["status"] == "True"
    assert condition(run(resource(), kafka), "IntervalCapped")["status"] == "False"


@pytest.mark.parametrize(
    ("failure", "reason"), [("unreachable", "KafkaUnreachable"), ("unauthorized", "KafkaNotAuthorized")]
)
def test_kafka_failures_retry_with_backoff(kafka: InMemoryClientMetricsAdmin, failure: str, reason: str) -> None:
    """Given Kafka unreachable or refusing us, When reconciled, Then Ready=False names the cause and a
    retry is asked for, later each time up to the maximum."""
    setattr(kafka, failure, True)
    delays = [run(resource(), kafka, retry=r, backoff_max=60).retry_after or 0.0 for r in range(8)]
    outcome = run(resource(), kafka)
    assert condition(outcome)["reason"] == reason
    assert all(d > 0 for d in delays)
    assert delays == sorted(delays) and delays[-1] == 60


def test_recovers_when_kafka_returns(kafka: InMemoryClientMetricsAdmin) -> None:
    """Given a reconcile that failed because Kafka was down, When Kafka is back, Then Ready=True again
    and the KafkaUnreachable transition time is replaced."""
    kafka.unreachable = True
    failed = run(resource(), kafka)
    kafka.unreachable = False
    outcome = run(resource(status=failed.status), kafka)
    assert condition(outcome)["status"] == "True" and "checkout" in kafka.resources


def test_broker_rejection_is_a_spec_problem(kafka: InMemoryClientMetricsAdmin) -> None:
    """Given the broker refuses the configs, When reconciled, Then Ready=False/KafkaRejected, no retry."""
    kafka.reject_next = "InvalidConfigurationError: bad regex"
    outcome = run(resource(), kafka)
    assert condition(outcome)["reason"] == "KafkaRejected" and outcome.retry_after is None


def test_paused_leaves_broker_alone(kafka: InMemoryClientMetricsAdmin) -> None:
    """Given the pause annotation, When reconciled, Then nothing is sent and ReconciliationPaused=True."""
    outcome = run(resource(annotations={"telemetry.kct.dev/paused": "true"}), kafka)
    assert kafka.calls == []
    assert condition(outcome, "ReconciliationPaused")["status"] == "True"
    resumed = run(resource(status=outcome.status), kafka)
    assert all(c["type"] != "ReconciliationPaused" for c in resumed.status["conditions"])


def test_no_default_cluster_is_a_condition() -> None:
    """Given no spec.kafka and no KAFKA_BOOTSTRAP_SERVERS, When reconciled, Then Ready=False says so."""
    outcome = reconcile_subscription(resource(), [], AdminPool(None))
    ClientMetricsSubscriptionStatus.model_validate(outcome.status)
    assert condition(outcome)["reason"] == "KafkaConnectionInvalid"
    assert "KAFKA_BOOTSTRAP_SERVERS" in condition(outcome)["message"]


def test_delete_removes_every_config(kafka: InMemoryClientMetricsAdmin) -> None:
    """Given an applied subscription, When its resource is deleted, Then the broker has no such resource."""
    res = resource()
    run(res, kafka)
    outcome = delete_subscription(res, [res.claim()], factory(kafka))
    assert kafka.resources == {} and outcome.retry_after is None


def test_delete_by_non_owner_keeps_subscription(kafka: InMemoryClientMetricsAdmin) -> None:
    """Given an owner and a later claimant, When the later one is deleted, Then the broker keeps the
    subscription; When the owner is deleted, Then it goes (the survivor recreates it at its resync)."""
    owner = resource()
    run(owner, kafka)
    later_spec = {"metrics": ["*"], "subscriptionName": "checkout"}
    later = resource("other", later_spec, uid="uid-2", created="2026-02-01T00:00:00Z")
    delete_subscription(later, [owner.claim(), later.claim()], factory(kafka))
    assert "checkout" in kafka.resources
    delete_subscription(owner, [owner.claim(), later.claim()], factory(kafka))
    assert kafka.resources == {}
    outcome = run(later, kafka, claims=[later.claim()], resync=True)
    assert condition(outcome)["status"] == "True" and kafka.resources["checkout"]["metrics"] == "*"


def test_delete_retries_while_kafka_is_down(kafka: InMemoryClientMetricsAdmin) -> None:
    """Given Kafka unreachable, When deleting, Then a retry is asked for (the finalizer stays)."""
    kafka.unreachable = True
    res = resource()
    assert delete_subscription(res, [res.claim()], factory(kafka)).retry_after is not None


class _Secrets:
    def __init__(self) -> None:
        self.version = "1"

    def read(self, namespace: str, name: str) -> tuple[str, dict[str, str]]:
        if name != "kafka-client":
            raise LookupError(f"Secret {namespace}/{name} not found")
        return self.version, {"security.protocol": "SASL_SSL"}


def test_admin_pool_caches_per_cluster_and_secret_version() -> None:
    """Given the pool, When asked twice for one cluster, Then one admin; a rotated Secret gets a new one
    and the old one is closed; a missing Secret is a ConnectionProblem."""
    built: list[tuple[str, dict[str, str]]] = []
    admins: list[InMemoryClientMetricsAdmin] = []

    def construct(bootstrap: str, properties: Any) -> ClientMetricsAdmin:
        built.append((bootstrap, dict(properties)))
        admins.append(InMemoryClientMetricsAdmin())
        return admins[-1]

    secrets = _Secrets()
    pool = AdminPool("default:9092", secrets=secrets, construct=construct)
    connection = KafkaConnection.model_validate({"bootstrapServers": "k:9093", "secretRef": {"name": "kafka-client"}})
    assert pool(connection, "ns") is pool(connection, "ns")
    assert pool(None, "ns") is pool(None, "other")
    secrets.version = "2"
    pool(connection, "ns")
    assert built == [
        ("k:9093", {"security.protocol": "SASL_SSL"}),
        ("default:9092", {}),
        ("k:9093", {"security.protocol": "SASL_SSL"}),
    ]
    assert admins[0].closed
    missing = KafkaConnection.model_validate({"bootstrapServers": "k:9093", "secretRef": {"name": "nope"}})
    with pytest.raises(ConnectionProblem, match="not found"):
        pool(missing, "ns")


class _DeletableSecrets(_Secrets):
    def __init__(self) -> None:
        super().__init__()
        self.deleted = False

    def read(self, namespace: str, name: str) -> tuple[str, dict[str, str]]:
        if self.deleted:
            raise LookupError(f"Secret {namespace}/{name} not found")
        return super().read(namespace, name)


WITH_SECRET = {"metrics": ["*"], "intervalMs": 60000,
               "kafka": {"bootstrapServers": "k:9093", "secretRef": {"name": "kafka-client"}}}


def test_delete_after_its_secret_uses_the_client_built_from_it(kafka: InMemoryClientMetricsAdmin) -> None:
    """Given a subscription applied with a Kafka Secret, When the Secret is deleted first and then the
    resource (a namespace deletion), Then the configs are still removed, with the client built from the
    Secret's last data, and the finalizer is released."""
    secrets = _DeletableSecrets()
    pool = AdminPool(None, secrets=secrets, construct=lambda bootstrap, properties: kafka)
    res = resource(spec=WITH_SECRET)
    assert condition(reconcile_subscription(res, [res.claim()], pool))["status"] == "True"
    secrets.deleted = True
    with pytest.raises(ConnectionProblem, match="not found"):  # a live resource still reports it
        pool(KafkaConnection.model_validate(WITH_SECRET["kafka"]), "team-a")
    outcome = delete_subscription(res, [res.claim()], pool)
    assert kafka.resources == {} and outcome.retry_after is None and outcome.error is None


def test_delete_without_any_way_to_connect_releases_and_names_the_leftover(kafka: InMemoryClientMetricsAdmin) -> None:
    """Given a resource whose Secret is gone and that this operator never connected with (e.g. restarted
    since), When it is deleted, Then the finalizer is released (no retry, so its namespace can go) and a
    Warning names the CLIENT_METRICS left on the broker and how to remove it."""
    secrets = _DeletableSecrets()
    secrets.deleted = True
    kafka.alter_subscription("checkout", {"metrics": "*", "interval.ms": "60000"}, [])
    pool = AdminPool(None, secrets=secrets, construct=lambda bootstrap, properties: kafka)
    res = resource(spec=WITH_SECRET)
    outcome = delete_subscription(res, [res.claim()], pool)
    assert outcome.retry_after is None
    assert outcome.error is not None and "'checkout' is left on the broker" in outcome.error
    (event,) = outcome.events
    assert (event.type, event.reason) == ("Warning", "CleanupAbandoned")
    assert "--delete-config metrics,interval.ms,match" in event.message
    assert "checkout" in kafka.resources  # nothing could reach it: it is named, not silently dropped


def test_delete_while_kafka_is_down_still_retries_with_the_last_client(kafka: InMemoryClientMetricsAdmin) -> None:
    """Given the Secret gone but a client built from it, When Kafka is unreachable at deletion, Then a retry is
    asked for (the finalizer stays until the broker can be told)."""
    secrets = _DeletableSecrets()
    pool = AdminPool(None, secrets=secrets, construct=lambda bootstrap, properties: kafka)
    res = resource(spec=WITH_SECRET)
    reconcile_subscription(res, [res.claim()], pool)
    secrets.deleted = True
    kafka.unreachable = True
    assert delete_subscription(res, [res.claim()], pool).retry_after is not None
