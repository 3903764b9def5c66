"""The pod index and the attributor: who held an address at push time, owners, and the rules."""

from __future__ import annotations

import json
from typing import Any

import pytest
from attribution_bodies import owned, pod

from kct.attribution.attributor import Attributor
from kct.attribution.config import AttributionConfig
from kct.attribution.index import canonical_address

T0 = 1_700_000_000_000  # epoch ms; pods below are created at T0 unless said otherwise
S = 1000


def config(**fields: Any) -> AttributionConfig:
    """Parsed as the receiver reads its YAML (JSON semantics: lists fill tuples)."""
    return AttributionConfig.model_validate_json(json.dumps(fields))


def attrs(attributor: Attributor, ip: str | None, at_ms: int) -> dict[str, str]:
    return dict(attributor.attribute(ip, "", "", at_ms).attributes)


def test_a_pod_s_push_gets_its_pod_namespace_node_and_deployment() -> None:
    # Given a Deployment's ReplicaSet and its pod
    attributor = Attributor(config())
    index = attributor.index
    index.upsert_owner("ReplicaSet", owned("ReplicaSet", "orders-7d9f", ("Deployment", "orders")))
    index.upsert_pod(
        pod("orders-7d9f-abcde", "10.1.0.5", created_ms=T0, owner=("ReplicaSet", "orders-7d9f"),
            labels={"app.kubernetes.io/name": "orders-svc"}),
        T0,
    )
    # When a push comes from its address
    found = attributor.attribute("10.1.0.5", "User:orders", "orders-1", T0 + 10 * S)
    # Then it is the pod's, with the semantic-convention names
    assert found.outcome == "pod"
    assert dict(found.attributes) == {
        "k8s.namespace.name": "shop",
        "k8s.pod.name": "orders-7d9f-abcde",
        "k8s.pod.uid": "uid-orders-7d9f-abcde",
        "k8s.node.name": "node-1",
        "k8s.replicaset.name": "orders-7d9f",
        "k8s.deployment.name": "orders",
        "service.name": "orders-svc",
    }


@pytest.mark.parametrize(
    ("owner", "owners", "expected"),
    [
        (("StatefulSet", "db"), [], {"k8s.statefulset.name": "db"}),
        (("DaemonSet", "agent"), [], {"k8s.daemonset.name": "agent"}),
        (("Job", "report-2890"), [("Job", "report-2890", ("CronJob", "report"))],
         {"k8s.job.name": "report-2890", "k8s.cronjob.name": "report"}),
        (("Job", "once"), [("Job", "once", None)], {"k8s.job.name": "once"}),
        # A ReplicaSet not owned by a Deployment (or not seen yet): no Deployment is invented
        (("ReplicaSet", "bare"), [("ReplicaSet", "bare", None)], {"k8s.replicaset.name": "bare"}),
        (("ReplicaSet", "unseen-1"), [], {"k8s.replicaset.name": "unseen-1"}),
        (None, [], {}),
    ],
)
def test_owner_chains_resolve_from_metadata(
    owner: tuple[str, str] | None, owners: list[tuple[str, str, tuple[str, str] | None]], expected: dict[str, str]
) -> None:
    attributor = Attributor(config())
    for kind, name, its_owner in owners:
        attributor.index.upsert_owner(kind, owned(kind, name, its_owner))
    attributor.index.upsert_pod(pod("p", "10.1.0.9", created_ms=T0, owner=owner), T0)
    found = attrs(attributor, "10.1.0.9", T0 + S)
    workload = {k: v for k, v in found.items() if k not in {"k8s.namespace.name", "k8s.pod.name", "k8s.pod.uid",
                                                             "k8s.node.name"}}
    assert workload == expected


def test_a_reused_address_belongs_to_the_pod_that_held_it_at_push_time() -> None:
    # Given pod A held 10.1.0.7 until it was deleted at T0+60s, and pod B got the address at T0+65s
    attributor = Attributor(config(deletedPodGraceSeconds=30, clockSkewSeconds=0))
    index = attributor.index
    index.upsert_pod(pod("a", "10.1.0.7", created_ms=T0), T0)
    index.delete_pod(pod("a", "10.1.0.7"), T0 + 60 * S)
    index.upsert_pod(pod("b", "10.1.0.7", created_ms=T0 + 65 * S), T0 + 66 * S)
    # Then a push before A's deletion is A's, a late one of A's (in the grace, before B) still A's,
    # and one after B's creation is B's
    assert attrs(attributor, "10.1.0.7", T0 + 30 * S)["k8s.pod.name"] == "a"
    assert attrs(attributor, "10.1.0.7", T0 + 62 * S)["k8s.pod.name"] == "a"
    assert attrs(attributor, "10.1.0.7", T0 + 70 * S)["k8s.pod.name"] == "b"


def test_b_s_add_seen_before_a_s_delete_still_splits_at_b_s_creation() -> None:
    # Given the watch delivers B's creation before A's deletion (events of two pods are not ordered by address)
    attributor = Attributor(config(clockSkewSeconds=0))
    index = attributor.index
    index.upsert_pod(pod("a", "10.1.0.8", created_ms=T0), T0)
    index.upsert_pod(pod("b", "10.1.0.8", created_ms=T0 + 100 * S), T0 + 101 * S)
    index.delete_pod(pod("a", "10.1.0.8"), T0 + 102 * S)
    assert attrs(attributor, "10.1.0.8", T0 + 50 * S)["k8s.pod.name"] == "a"
    assert attrs(attributor, "10.1.0.8", T0 + 101 * S)["k8s.pod.name"] == "b"


def test_a_deleted_pod_is_forgotten_after_the_grace() -> None:
    attributor = Attributor(config(deletedPodGraceSeconds=10))
    index = attributor.index
    index.upsert_pod(pod("a", "10.1.0.6", created_ms=T0), T0)
    index.delete_pod(pod("a", "10.1.0.6"), T0 + 20 * S)
    assert attributor.attribute("10.1.0.6", None, None, T0 + 25 * S).outcome == "pod"
    assert attributor.attribute("10.1.0.6", None, None, T0 + 31 * S).outcome == "unattributed"
    index.sweep(T0 + 31 * S)
    assert len(index) == 0


def test_a_finished_pod_released_its_address() -> None:
    attributor = Attributor(config(deletedPodGraceSeconds=0))
    attributor.index.upsert_pod(pod("job-x", "10.1.0.4", created_ms=T0, phase="Succeeded"), T0 + 50 * S)
    assert attributor.attribute("10.1.0.4", None, None, T0 + 51 * S).outcome == "unattributed"


def test_a_host_network_address_is_ambiguous_not_guessed() -> None:
    # Given a hostNetwork pod on the node whose address is 192.168.1.10 (and a second one there)
    attributor = Attributor(config())
    attributor.index.upsert_pod(pod("agent-1", "192.168.1.10", created_ms=T0, host_network=True,
                                    owner=("DaemonSet", "agent")), T0)
    attributor.index.upsert_pod(pod("exporter", "192.168.1.10", created_ms=T0, host_network=True), T0)
    # When a push comes from the node's address, then nothing is added: ambiguous
    found = attributor.attribute("192.168.1.10", "User:agent", "agent", T0 + S)
    assert (found.outcome, found.attributes) == ("ambiguous", ())


def test_an_address_outside_the_cluster_or_behind_snat_is_unattributed() -> None:
    attributor = Attributor(config())
    attributor.index.upsert_pod(pod("a", "10.1.0.5", created_ms=T0), T0)
    for address in ("203.0.113.7", "10.1.0.99", None, ""):
        found = attributor.attribute(address, "User:x", "x", T0 + S)
        assert (found.outcome, found.attributes) == ("unattributed", ())


def test_a_push_before_the_pod_existed_is_not_its() -> None:
    attributor = Attributor(config(clockSkewSeconds=2))
    attributor.index.upsert_pod(pod("a", "10.1.0.5", created_ms=T0), T0)
    assert attributor.attribute("10.1.0.5", None, None, T0 - 1 * S).outcome == "pod"  # within the skew
    assert attributor.attribute("10.1.0.5", None, None, T0 - 3 * S).outcome == "unattributed"


def test_ipv6_spellings_meet() -> None:
    attributor = Attributor(config())
    attributor.index.upsert_pod(pod("a", "fd00::1:5", created_ms=T0), T0)
    assert attributor.attribute("fd00:0:0:0:0:0:1:5", None, None, T0 + S).outcome == "pod"
    assert canonical_address("::ffff:10.0.0.1") == "10.0.0.1"
    assert canonical_address("10.0.0.1") == "10.0.0.1"


def test_a_pod_moving_address_ends_its_old_one() -> None:
    attributor = Attributor(config(deletedPodGraceSeconds=0))
    attributor.index.upsert_pod(pod("a", "10.1.0.5", created_ms=T0), T0)
    attributor.index.upsert_pod(pod("a", "10.1.0.6", created_ms=T0), T0 + 10 * S)
    assert attributor.attribute("10.1.0.5", None, None, T0 + 11 * S).outcome == "unattributed"
    assert attributor.attribute("10.1.0.6", None, None, T0 + 11 * S).outcome == "pod"


RULES = [
    {"principal": "User:orders", "clientId": "orders-*", "attributes": {"k8s.deployment.name": "orders-both"}},
    {"principal": "User:orders", "attributes": {"k8s.deployment.name": "orders-principal"}},
    {"clientId": "legacy-*", "attributes": {"k8s.namespace.name": "legacy", "k8s.deployment.name": "legacy"}},
]


@pytest.mark.parametrize(
    ("address", "principal", "client_id", "outcome", "deployment"),
    [
        # 1. a pod that held the address wins over every rule
        ("10.1.0.5", "User:orders", "orders-1", "pod", "from-pod"),
        # 2. not a pod's address: the first matching rule, in list order
        ("203.0.113.7", "User:orders", "orders-1", "rule", "orders-both"),
        ("203.0.113.7", "User:orders", "billing-1", "rule", "orders-principal"),
        ("203.0.113.7", "User:anyone", "legacy-7", "rule", "legacy"),
        # a hostNetwork address with a rule naming the client: the rule
        ("192.168.1.10", "User:orders", "x", "rule", "orders-principal"),
        # 3. no rule: ambiguous (hostNetwork) or unattributed
        ("192.168.1.10", "User:other", "x", "ambiguous", None),
        ("203.0.113.7", "User:other", "x", "unattributed", None),
        # `*` matches a run of characters, the rest literally (no regex from the spec)
        ("203.0.113.7", "User:other", "legacy.7", "unattributed", None),
        ("203.0.113.7", "User:orders2", "x", "unattributed", None),
    ],
)
def test_rule_precedence(
    address: str, principal: str, client_id: str, outcome: str, deployment: str | None
) -> None:
    attributor = Attributor(config(rules=RULES))
    attributor.index.upsert_owner("ReplicaSet", owned("ReplicaSet", "rs", ("Deployment", "from-pod")))
    attributor.index.upsert_pod(pod("p", "10.1.0.5", created_ms=T0, owner=("ReplicaSet", "rs")), T0)
    attributor.index.upsert_pod(pod("h", "192.168.1.10", created_ms=T0, host_network=True), T0)
    found = attributor.attribute(address, principal, client_id, T0 + S)
    assert found.outcome == outcome
    assert dict(found.attributes).get("k8s.deployment.name") == deployment


def test_a_rule_must_name_principal_or_client_id() -> None:
    with pytest.raises(ValueError, match="needs `principal`, `clientId` or both"):
        config(rules=[{"attributes": {"k8s.deployment.name": "x"}}])


def test_selected_annotations_and_labels() -> None:
    attributor = Attributor(config(
        labels=[{"key": "team", "attribute": "kct.team"}],
        annotations=[{"key": "example.com/owner", "attribute": "kct.owner"}],
    ))
    attributor.index.upsert_pod(
        pod("p", "10.1.0.5", created_ms=T0, labels={"team": "payments", "app.kubernetes.io/name": "ignored"},
            annotations={"example.com/owner": "alice"}),
        T0,
    )
    found = attrs(attributor, "10.1.0.5", T0 + S)
    assert (found["kct.team"], found["kct.owner"]) == ("payments", "alice")
    assert "service.name" not in found  # the default label selection was replaced


def test_relist_ends_the_pods_it_no_longer_lists() -> None:
    attributor = Attributor(config(deletedPodGraceSeconds=0))
    index = attributor.index
    index.replace_pods([pod("a", "10.1.0.5", created_ms=T0), pod("b", "10.1.0.6", created_ms=T0)], T0)
    index.replace_pods([pod("b", "10.1.0.6", created_ms=T0)], T0 + 10 * S)
    assert attributor.attribute("10.1.0.5", None, None, T0 + 11 * S).outcome == "unattributed"
    assert attributor.attribute("10.1.0.6", None, None, T0 + 11 * S).outcome == "pod"


def test_a_relist_of_one_namespace_leaves_the_others_pods_alone() -> None:
    attributor = Attributor(config(deletedPodGraceSeconds=0))
    index = attributor.index
    index.replace_pods([pod("a", "10.1.0.5", namespace="one", created_ms=T0)], T0, "one")
    index.replace_pods([pod("b", "10.1.0.6", namespace="two", created_ms=T0)], T0, "two")
    index.replace_pods([], T0 + 10 * S, "one")
    assert attributor.attribute("10.1.0.5", None, None, T0 + 11 * S).outcome == "unattributed"
    assert attributor.attribute("10.1.0.6", None, None, T0 + 11 * S).outcome == "pod"


def test_a_node_running_many_host_network_pods_stays_ambiguous_until_the_last_goes() -> None:
    attributor = Attributor(config(deletedPodGraceSeconds=0))
    index = attributor.index
    for i in range(8):
        index.upsert_pod(pod(f"ds-{i}", "192.168.1.10", created_ms=T0 + i * S, host_network=True), T0 + 10 * S)
    for i in range(1, 8):
        index.delete_pod(pod(f"ds-{i}", "192.168.1.10"), T0 + 20 * S)
    assert attributor.attribute("192.168.1.10", None, None, T0 + 21 * S).outcome == "ambiguous"
    index.delete_pod(pod("ds-0", "192.168.1.10"), T0 + 22 * S)
    assert attributor.attribute("192.168.1.10", None, None, T0 + 23 * S).outcome == "unattributed"
