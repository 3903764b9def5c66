"""Matched clients on every ClientMetricsSubscription: the census of what the receivers' registries hold
(merge across replicas, retention across a registry restart, bounds), `status.clients` and the
`ClientsMatched` condition (written only when changed, a Warning after the period, Ready untouched), and the
two kopf timers over an in-memory source and an injected clock."""

from __future__ import annotations

import datetime as dt
from typing import Any

import kopf
import pytest

from kct.api.client_census import MIN_RETENTION_MS, ClientCensus, summarize
from kct.api.matching import broker_selectors, match_client
from kct.api.status import ClientMetricsSubscriptionStatus
from kct.controller.clients_handlers import ClientsHandlers
from kct.controller.kernel import OperatorConfig
from kct.controller.receiver_clients import ReceiverRef, read_receiver
from kct.controller.receiver_clients_fake import FakeReceiverClients
from kct.controller.resource import ResourceView
from kct.controller.subscription_clients import ClientsPolicy, clients_outcome

T0 = dt.datetime(2026, 11, 29, 12, 0, 0, tzinfo=dt.UTC)
T0_MS = int(T0.timestamp() * 1000)
POLICY = ClientsPolicy(warn_after_s=300, push_time_step_s=60)


def _client(instance: str, last_ms: int, *, client_id: str = "checkout-1", software: str = "apache-kafka-java",
            version: str = "3.9.0", interval_ms: int = 1_000, pushes: int = 10, namespace: str = "shop",
            deployment: str | None = None, statefulset: str | None = None) -> dict[str, Any]:
    attributes: dict[str, str] = {}
    if deployment or statefulset:
        attributes["k8s.namespace.name"] = namespace
    if deployment:
        attributes["k8s.deployment.name"] = deployment
    if statefulset:
        attributes["k8s.statefulset.name"] = statefulset
    return {"client_instance_id": instance,
            "labels": {"client_id": client_id, "client_software_name": software, "client_software_version": version,
                       "principal": "User:shop"},
            "attributes": attributes, "first_push_ms": last_ms - interval_ms * (pushes - 1), "last_push_ms": last_ms,
            "pushes": pushes, "metrics": {}}


def _doc(now_ms: int, *clients: dict[str, Any], receiver: str = "telemetry-receiver-0") -> dict[str, Any]:
    return {"receiver": receiver, "now_ms": now_ms, "clients": list(clients), "tracked": len(clients), "evicted": 0,
            "expired": 0}


def _subscription(match: dict[str, str] | None, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"apiVersion": "telemetry.kct.dev/v1alpha1", "kind": "ClientMetricsSubscription",
            "metadata": {"namespace": "kafka", "name": "producers", "uid": "u-1", "generation": 1},
            "spec": {"metrics": ["org.apache.kafka.producer."], "intervalMs": 1000, "match": match or {}},
            "status": status or {}}


def _ready() -> dict[str, Any]:
    return {"type": "Ready", "status": "True", "reason": "Reconciled", "message": "applied",
            "lastTransitionTime": "2026-11-29T11:00:00Z", "observedGeneration": 1}


# --- the census -------------------------------------------------------------------------------------------


def test_matching_over_many_clients_counts_what_the_broker_rule_matches() -> None:
    """Given 1,200 clients of 13 software names over 17 Deployments, When a subscription matching a client id
    pattern is summarised, Then `matched` is the count the broker's rule gives client by client, and the
    software and workload lists are bounded to 10, most clients first."""
    census = ClientCensus()
    clients = [_client(f"id-{i:04d}", T0_MS - 500, client_id=f"{'checkout' if i % 3 else 'billing'}-{i}",
                       software=f"sw-{i % 13:02d}", deployment=f"app-{i % 17:02d}") for i in range(1200)]
    census.absorb(_doc(T0_MS, *clients), T0_MS)
    selectors = broker_selectors({"clientId": "checkout-.*"})

    summary = summarize(census.live(T0_MS), selectors)

    expected = sum(match_client(selectors, {**c["labels"], "client_instance_id": c["client_instance_id"]}).matched
                   for c in clients)
    assert summary.matched == expected == 800
    assert len(summary.by_software) == 10 and summary.software_left_out == 3
    assert len(summary.top_workloads) == 10 and summary.workloads_left_out == 7
    counts = [count for _, _, count in summary.by_software]
    assert counts == sorted(counts, reverse=True)
    assert summary.top_workloads[0][0].startswith("shop/deployment/app-")
    assert summary.last_push_ms == T0_MS - 500


def test_a_client_seen_by_two_replicas_counts_once_and_its_newest_push_wins() -> None:
    """Given one client in the registries of two receiver replicas (it reconnected), When both answers are
    absorbed, Then it counts once, with the labels of its newest push."""
    census = ClientCensus()
    census.absorb(_doc(T0_MS, _client("a", T0_MS - 1_000, client_id="new-name"), receiver="r-0"), T0_MS)
    census.absorb(_doc(T0_MS, _client("a", T0_MS - 20_000, client_id="old-name"), receiver="r-1"), T0_MS)

    live = census.live(T0_MS)

    assert [(c["client_instance_id"], c["labels"]["client_id"]) for c in live] == [("a", "new-name")]


def test_a_restarted_replica_does_not_drop_its_clients_before_their_retention() -> None:
    """Given a client pushing every 30 s (retention 90 s), When its replica restarts and answers an empty
    registry, Then the client still counts 80 s after its last push, and is gone 100 s after it."""
    census = ClientCensus()
    census.absorb(_doc(T0_MS, _client("slow", T0_MS, interval_ms=30_000, pushes=5)), T0_MS)
    census.absorb(_doc(T0_MS + 10_000), T0_MS + 10_000)  # the restarted replica knows nobody yet

    assert [c["client_instance_id"] for c in census.live(T0_MS + 80_000)] == ["slow"]
    assert census.live(T0_MS + 100_000) == []


def test_a_fast_client_is_kept_at_least_a_minute() -> None:
    """Given a client pushing every second, When no push arrives, Then it counts for 60 s, not 3 s."""
    census = ClientCensus()
    census.absorb(_doc(T0_MS, _client("fast", T0_MS, interval_ms=1_000)), T0_MS)

    assert len(census.live(T0_MS + MIN_RETENTION_MS)) == 1
    assert census.live(T0_MS + MIN_RETENTION_MS + 1) == []


def test_the_receivers_clock_is_not_ours() -> None:
    """Given a receiver whose clock runs 10 minutes ahead, When its answer is absorbed, Then its clients' ages
    are taken from its own `now_ms`, so a client that pushed a second ago counts."""
    census = ClientCensus()
    ahead = T0_MS + 600_000
    census.absorb(_doc(ahead, _client("a", ahead - 1_000)), T0_MS)

    assert [c["last_push_ms"] for c in census.live(T0_MS)] == [T0_MS - 1_000]


def test_the_census_is_bounded_and_counts_what_it_left_out() -> None:
    """Given a census of at most 5 clients, When 8 are absorbed, Then the 5 newest stay and 3 are counted."""
    census = ClientCensus(max_clients=5)
    census.absorb(_doc(T0_MS, *(_client(f"c{i}", T0_MS - 1_000 * i) for i in range(8))), T0_MS)

    assert sorted(c["client_instance_id"] for c in census.live(T0_MS)) == ["c0", "c1", "c2", "c3", "c4"]
    assert census.left_out == census.full_and_left_out == 3
    census.live(T0_MS + 10 * MIN_RETENTION_MS)  # all expired: no longer full
    assert census.left_out == 3 and census.full_and_left_out == 0


# --- reading the replicas ---------------------------------------------------------------------------------


def test_every_ready_replica_is_asked_with_the_receivers_token_and_a_failing_one_is_reported() -> None:
    """Given a receiver with two ready pods, one of which fails, When it is read, Then both are asked with the
    token of its Secret, the answer of the one is kept and the other's failure is named."""
    source = FakeReceiverClients()
    receiver = ReceiverRef.from_body({"metadata": {"namespace": "kafka", "name": "telemetry"}, "spec": {}})
    source.pods["kafka/telemetry"] = ["telemetry-receiver-a", "telemetry-receiver-b"]
    source.tokens["kafka/telemetry"] = "s3cret"
    source.answers[("kafka/telemetry", "telemetry-receiver-a")] = _doc(T0_MS, _client("a", T0_MS))

    read = read_receiver(source, receiver)

    assert receiver.token_secret == ("telemetry-token", "token")
    assert [pod for _, pod, token in source.asked if token == "s3cret"] == ["telemetry-receiver-a",
                                                                            "telemetry-receiver-b"]
    assert len(read.documents) == 1
    assert len(read.problems) == 1 and "telemetry-receiver-b" in read.problems[0]


# --- status.clients and ClientsMatched --------------------------------------------------------------------


def _outcome(match: dict[str, str] | None, clients: list[dict[str, Any]] | None, status: dict[str, Any],
             now: dt.datetime) -> Any:
    view = ResourceView.from_body(_subscription(match, status))
    return clients_outcome(view, clients, 0, POLICY, now)  # type: ignore[arg-type]


def test_status_clients_are_written_in_the_crds_shape_and_ready_is_untouched() -> None:
    """Given a Ready subscription and two matching clients, When its clients are counted, Then status.clients
    validates against the CRD's model, ClientsMatched=True is added and Ready is left as it was."""
    clients = [_client("a", T0_MS - 2_000, deployment="checkout"), _client("b", T0_MS - 1_000, software="librdkafka",
                                                                           version="2.6.0")]
    outcome = _outcome({"clientId": "checkout-.*"}, clients, {"conditions": [_ready()]}, T0)

    ClientMetricsSubscriptionStatus.model_validate(outcome.status)
    assert outcome.status["clients"] == {
        "matched": 2,
        "bySoftware": [{"name": "apache-kafka-java", "version": "3.9.0", "count": 1},
                       {"name": "librdkafka", "version": "2.6.0", "count": 1}],
        "topWorkloads": [{"workload": "shop/deployment/checkout", "count": 1}],
        "lastPushTime": "2026-11-29T11:59:59Z",
    }
    conditions = {c["type"]: c for c in outcome.status["conditions"]}
    assert conditions["Ready"] == _ready()
    assert (conditions["ClientsMatched"]["status"], conditions["ClientsMatched"]["reason"]) == ("True",
                                                                                                 "ClientsMatched")
    assert outcome.events == ()


def test_nothing_is_written_when_nothing_changed() -> None:
    """Given the status a first count wrote, When the same clients are counted again (a push 30 s later
    moves only lastPushTime, by less than the step), Then the patch is empty."""
    first = _outcome(None, [_client("a", T0_MS - 1_000)], {}, T0)
    later = T0 + dt.timedelta(seconds=30)

    again = _outcome(None, [_client("a", T0_MS + 29_000)], first.status, later)
    moved = _outcome(None, [_client("a", T0_MS + 59_000)], first.status, T0 + dt.timedelta(seconds=60))

    assert again.status == {} and again.events == ()
    assert set(moved.status) == {"clients"}  # a minute on, lastPushTime alone is worth a write


def test_a_subscription_matching_nothing_warns_once_after_the_period() -> None:
    """Given a subscription that matches none of the live clients, When it is counted over time (injected
    clock), Then ClientsMatched is Unknown/AwaitingClients until the period has passed, False/NoMatchingClients
    with one Warning event after it, and nothing is written or posted on the next ticks."""
    clients = [_client("a", T0_MS)]
    status: dict[str, Any] = {"conditions": [_ready()]}
    timeline = []
    for seconds in (0, 30, 299, 300, 330):
        now = T0 + dt.timedelta(seconds=seconds)
        outcome = _outcome({"clientId": "billing-.*"}, clients, status, now)
        status = {**status, **outcome.status}
        found = {c["type"]: c for c in status["conditions"]}["ClientsMatched"]
        timeline.append((seconds, found["status"], found["reason"], [e.reason for e in outcome.events],
                         bool(outcome.status)))

    assert timeline == [
        (0, "Unknown", "AwaitingClients", [], True),
        (30, "Unknown", "AwaitingClients", [], False),
        (299, "Unknown", "AwaitingClients", [], False),
        (300, "False", "NoMatchingClients", ["NoMatchingClients"], True),
        (330, "False", "NoMatchingClients", [], False),
    ]
    assert status["clients"]["matched"] == 0
    assert {c["type"]: c for c in status["conditions"]}["Ready"] == _ready()


def test_a_match_ends_the_warning_and_a_new_wait_starts_from_scratch() -> None:
    """Given NoMatchingClients, When a matching client appears and then goes away, Then ClientsMatched turns
    True, and the next wait starts when the matches stopped (no Warning before the full period)."""
    billing = {"clientId": "billing-.*"}
    status: dict[str, Any] = {}
    for seconds in (0, 300):
        status = {**status, **_outcome(billing, [], status, T0 + dt.timedelta(seconds=seconds)).status}
    assert {c["type"]: c for c in status["conditions"]}["ClientsMatched"]["reason"] == "NoMatchingClients"
    client = [_client("b", T0_MS + 400_000, client_id="billing-1")]
    status = {**status, **_outcome(billing, client, status, T0 + dt.timedelta(seconds=400)).status}
    assert {c["type"]: c for c in status["conditions"]}["ClientsMatched"]["status"] == "True"

    gone = _outcome(billing, [], status, T0 + dt.timedelta(seconds=500))
    status = {**status, **gone.status}
    soon = _outcome(billing, [], status, T0 + dt.timedelta(seconds=700))

    assert {c["type"]: c for c in status["conditions"]}["ClientsMatched"]["reason"] == "AwaitingClients"
    assert soon.events == () and soon.status == {}


def test_silent_receivers_make_the_count_unknown_not_zero() -> None:
    """Given a subscription with 3 matched clients, When no receiver answered lately, Then status.clients is
    left as it was and ClientsMatched says Unknown/ReceiversSilent (no Warning)."""
    first = _outcome(None, [_client(f"c{i}", T0_MS) for i in range(3)], {}, T0)

    silent = _outcome(None, None, first.status, T0 + dt.timedelta(seconds=600))

    assert "clients" not in silent.status and silent.events == ()
    found = {c["type"]: c for c in silent.status["conditions"]}["ClientsMatched"]
    assert (found["status"], found["reason"]) == ("Unknown", "ReceiversSilent")


# --- the kopf timers --------------------------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> dt.datetime:
        return self.now


def _receiver(name: str, namespace: str) -> kopf.Body:
    return kopf.Body({"metadata": {"namespace": namespace, "name": name},
                      "spec": {"receiver": {"auth": {"enabled": False}}}})


async def test_the_timers_count_clients_across_receivers_and_replicas_and_survive_a_restart() -> None:
    """Given two receivers in two namespaces, one with two replicas sharing a client, When their timers read
    them and the subscription's timer runs, Then it counts each client once; after one replica restarts
    empty, the next ticks still count them (within retention) and write nothing."""
    source = FakeReceiverClients()
    clock = _Clock()
    handlers = ClientsHandlers(OperatorConfig(clients_interval_seconds=10, no_clients_warning_seconds=300),
                               source=lambda: source, clock=clock)
    source.pods = {"a/telemetry": ["t-0", "t-1"], "b/telemetry": ["t-0"]}
    source.answers = {
        ("a/telemetry", "t-0"): _doc(T0_MS, _client("x", T0_MS - 1_000), _client("y", T0_MS - 2_000)),
        ("a/telemetry", "t-1"): _doc(T0_MS, _client("x", T0_MS - 9_000), _client("z", T0_MS - 3_000)),
        ("b/telemetry", "t-0"): _doc(T0_MS, _client("w", T0_MS - 500, client_id="billing-1")),
    }
    for namespace in ("a", "b"):
        await handlers.read_clients(body=_receiver("telemetry", namespace))
    body = _subscription({"clientId": "checkout-.*"}, {"conditions": [_ready()]})
    patch = kopf.Patch()
    await handlers.matched_clients(body=kopf.Body(body), patch=patch)
    assert patch["status"]["clients"]["matched"] == 3
    body["status"].update(patch["status"])

    clock.now = T0 + dt.timedelta(seconds=20)
    now_ms = T0_MS + 20_000
    source.answers[("a/telemetry", "t-0")] = _doc(now_ms)  # restarted: an empty registry
    source.answers[("a/telemetry", "t-1")] = _doc(now_ms)
    await handlers.read_clients(body=_receiver("telemetry", "a"))
    later = kopf.Patch()
    await handlers.matched_clients(body=kopf.Body(body), patch=later)

    assert dict(later) == {}


async def test_no_answer_from_any_receiver_for_three_intervals_is_unknown() -> None:
    """Given a receiver that answered once, When it stops answering for more than three intervals, Then the
    subscription's ClientsMatched turns Unknown/ReceiversSilent instead of counting zero."""
    source = FakeReceiverClients()
    clock = _Clock()
    handlers = ClientsHandlers(OperatorConfig(clients_interval_seconds=10), source=lambda: source, clock=clock)
    source.pods = {"a/telemetry": ["t-0"]}
    source.answers = {("a/telemetry", "t-0"): _doc(T0_MS, _client("x", T0_MS))}
    await handlers.read_clients(body=_receiver("telemetry", "a"))
    source.answers.clear()
    clock.now = T0 + dt.timedelta(seconds=31)
    await handlers.read_clients(body=_receiver("telemetry", "a"))
    patch = kopf.Patch()

    await handlers.matched_clients(body=kopf.Body(_subscription(None)), patch=patch)

    assert "clients" not in patch["status"]
    assert patch["status"]["conditions"][0]["reason"] == "ReceiversSilent"


@pytest.mark.parametrize("auth, expected", [
    ({"enabled": False}, None),
    ({"tokenSecretRef": {"name": "broker-token", "key": "t"}}, ("broker-token", "t")),
    ({}, ("telemetry-token", "token")),
])
def test_the_read_token_comes_from_spec_receiver_auth(auth: dict[str, Any], expected: Any) -> None:
    body = {"metadata": {"namespace": "kafka", "name": "telemetry"}, "spec": {"receiver": {"auth": auth}}}
    assert ReceiverRef.from_body(body).token_secret == expected


def test_kubectl_kct_clients_for_a_subscription_lists_what_its_status_counts() -> None:
    """Given a receiver holding a live matching client, a matching client idle for 2 minutes (past its
    retention) and a client that does not match, When `kubectl kct clients --subscription` runs and the
    subscription's status is computed from the same registry, Then both name the same single client."""
    import io
    import json

    from kct.kubectl.command import main
    from kct.kubectl.fake import FakeCluster

    registry = _doc(T0_MS, _client("live", T0_MS - 2_000), _client("idle", T0_MS - 120_000, pushes=1),
                    _client("other", T0_MS - 1_000, client_id="billing-1"))
    cluster = FakeCluster()
    cluster.add("telemetryreceivers", {"metadata": {"namespace": "kafka", "name": "telemetry"},
                                       "spec": {"receiver": {"auth": {"enabled": False}}}})
    cluster.endpoints[("kafka", "telemetry-receiver")] = ["telemetry-receiver-0"]
    cluster.answers[("kafka", "pods", "telemetry-receiver-0", 4318)] = registry
    cluster.add("clientmetricssubscriptions", _subscription({"clientId": "checkout-.*"}))
    out = io.StringIO()

    code = main(["clients", "-n", "kafka", "--subscription", "producers", "-o", "json"],
                make_cluster=lambda _args: cluster, out=out, now_ms=lambda: T0_MS)
    census = ClientCensus()
    census.absorb(registry, T0_MS)
    status = _outcome({"clientId": "checkout-.*"}, census.live(T0_MS), {}, T0).status

    assert code == 0
    assert [row["client_instance_id"] for row in json.loads(out.getvalue())] == ["live"]
    assert status["clients"]["matched"] == 1


def test_kct_operator_registers_both_timers_with_the_configured_interval() -> None:
    """Given the operator's one entry point, When its handlers are registered with a 7 s clients interval,
    Then a timer reads every TelemetryReceiver and one counts on every ClientMetricsSubscription, each 7 s."""
    from kct.controller.runner import register_handlers

    registry = kopf.OperatorRegistry()
    register_handlers(registry, OperatorConfig(clients_interval_seconds=7))

    timers = {t.id: (t.interval, str(t.selector)) for t in registry._spawning.get_all_handlers()
              if t.id in {"read-clients", "matched-clients"}}
    assert timers["read-clients"][0] == 7 and "telemetryreceivers" in timers["read-clients"][1]
    assert timers["matched-clients"][0] == 7 and "clientmetricssubscriptions" in timers["matched-clients"][1]


async def test_without_any_telemetry_receiver_nothing_is_written() -> None:
    """Given an operator that watches no TelemetryReceiver (the receivers run elsewhere), When a subscription's
    timer runs, Then it writes no status.clients and no condition (nothing is known, nothing is claimed)."""
    handlers = ClientsHandlers(OperatorConfig(), source=FakeReceiverClients, clock=_Clock())
    patch = kopf.Patch()

    await handlers.matched_clients(body=kopf.Body(_subscription(None, {"conditions": [_ready()]})), patch=patch)

    assert dict(patch) == {}


def test_the_counting_verdict_is_the_broker_rule_of_kubectl_kct_why() -> None:
    """Given selectors with anchoring traps, an invalid regex and labels a client lacks, When `matches` (the
    cached verdict the status counts with) is asked twice, Then it equals `match_client(...).matched` (what
    `kubectl kct why` shows) every time."""
    from kct.api.matching import matches

    selector_sets = [{}, {"client_id": "checkout"}, {"client_id": "checkout.*"}, {"client_id": "(unclosed"},
                     {"client_id": ".*", "client_software_name": "apache-kafka-java"},
                     {"client_instance_id": "id-1.*"}, {"client_rack": "rack-a"}]
    clients = [{"client_id": "checkout", "client_software_name": "apache-kafka-java", "client_instance_id": "id-1"},
               {"client_id": "checkout-2", "client_software_name": "librdkafka", "client_instance_id": "id-22"},
               {"client_id": "xcheckout", "client_instance_id": "id-3"}]
    for _ in range(2):
        for selectors in selector_sets:
            for labels in clients:
                assert matches(selectors, labels) == match_client(selectors, labels).matched, (selectors, labels)


def test_fields_that_went_away_are_removed_by_the_merge_patch() -> None:
    """Given status.clients with a lastPushTime and leftOut, When no client matches any more and the census
    is no longer full, Then the patch nulls both (a merge patch would otherwise keep them)."""
    previous = {"clients": {"matched": 2, "bySoftware": [], "topWorkloads": [], "lastPushTime": "2026-11-29T11:00:00Z",
                            "leftOut": 4}}

    outcome = _outcome({"clientId": "billing-.*"}, [_client("a", T0_MS)], previous, T0)

    assert outcome.status["clients"] == {"matched": 0, "bySoftware": [], "topWorkloads": [], "lastPushTime": None,
                                         "leftOut": None}
