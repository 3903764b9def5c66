"""The attributed bench's pods (bench/k8s_attribution.py): addresses, owner chains, least RBAC, the
Collector's processor, and the check that a record carries its own pod's attributes."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import yaml
from script_loader import load_script

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def k8s() -> ModuleType:
    return load_script(REPO / "bench" / "k8s_attribution.py")


def test_pod_addresses_are_unique_and_never_network_or_broadcast(k8s: ModuleType) -> None:
    """Given 10,000 pods, Then each has its own address, none ending in .0 or .255; past the range: refused."""
    addresses = [k8s.pod_address(i) for i in range(10_000)]
    assert len(set(addresses)) == 10_000
    assert addresses[0] == "10.42.0.1" and addresses[250] == "10.42.1.1"
    assert not any(a.endswith((".0", ".255")) for a in addresses)
    with pytest.raises(ValueError):
        k8s.pod_address(256 * 250)


def test_pod_is_owned_by_its_replicaset_which_is_owned_by_its_deployment(k8s: ModuleType) -> None:
    """Given a Deployment's uid, Then its ReplicaSet names it as controller, and a pod names that ReplicaSet,
    on the bench node, with labels the ReplicaSet selects."""
    rs = k8s.replicaset_manifest("app-007", "uid-d")
    pod = k8s.pod_manifest(42, "app-007", "uid-rs")
    assert rs["metadata"]["ownerReferences"] == [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "app-007",
                                                  "uid": "uid-d", "controller": True, "blockOwnerDeletion": True}]
    owner = pod["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "ReplicaSet", rs["metadata"]["name"], "uid-rs", True)
    assert pod["metadata"]["name"].startswith(rs["metadata"]["name"] + "-")
    assert rs["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert pod["spec"]["nodeName"] == k8s.NODE
    assert k8s.pod_status("10.42.0.43")["status"]["podIP"] == "10.42.0.43"


def test_rbac_is_read_only_on_pods_replicasets_and_jobs_in_one_namespace(k8s: ModuleType) -> None:
    """Then the bench's service account may only get/list/watch pods, replicasets and jobs, in its namespace."""
    objects = {obj["kind"]: obj for _, obj in k8s.rbac_manifests()}
    rules = objects["Role"]["rules"]
    assert {(r["apiGroups"][0], tuple(r["resources"])) for r in rules} == {
        ("", ("pods",)), ("apps", ("replicasets",)), ("batch", ("jobs",))}
    assert all(r["verbs"] == ["get", "list", "watch"] for r in rules)
    assert objects["RoleBinding"]["subjects"][0]["name"] == objects["ServiceAccount"]["metadata"]["name"]


def test_collector_processor_associates_by_the_pushed_address_and_extracts_the_same_names(k8s: ModuleType) -> None:
    """Then the Collector's k8s_attributes reads the pod from k8s.pod.ip and extracts exactly ATTRIBUTES."""
    config = yaml.safe_load("processors:\n" + k8s.collector_processor())["processors"]["k8s_attributes"]
    assert config["extract"]["metadata"] == list(k8s.ATTRIBUTES)
    assert config["pod_association"] == [{"sources": [{"from": "resource_attribute", "name": "k8s.pod.ip"}]}]
    assert config["filter"] == {"namespace": k8s.NAMESPACE}


def test_mismatches_flags_another_pods_attributes_and_unknown_addresses(k8s: ModuleType) -> None:
    """Given two pods, When a record carries its own pod's attributes, Then no mismatch; another pod's uid, a
    missing deployment or an unknown address: each reported."""
    a = k8s.BenchPod("app-000-bench-00000", "uid-a", "app-000", "10.42.0.1")
    b = k8s.BenchPod("app-001-bench-00001", "uid-b", "app-001", "10.42.0.2")
    by_address = {a.address: a, b.address: b}
    good = {"k8s.pod.ip": a.address, **a.attributes()}
    assert k8s.mismatches(by_address, [good]) == []
    wrong_uid = {**good, "k8s.pod.uid": "uid-b"}
    no_deployment = {k: v for k, v in good.items() if k != "k8s.deployment.name"}
    unknown = {**good, "k8s.pod.ip": "10.0.0.7"}
    assert len(k8s.mismatches(by_address, [wrong_uid, no_deployment, unknown])) == 3
