"""dev/stack/spark_on_node.py: the objects that put the spark-operator on the node stack for one job namespace.

Pure builders only; tests/e2e/test_spark_operator_e2e.py and the demo's e2e test install them for real."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "dev" / "stack"))
import spark_on_node


def test_the_networkpolicy_grant_binds_the_controllers_service_account_in_the_job_namespace() -> None:
    """Given a release in its own namespace, then the Role allows NetworkPolicies in the job namespace only,
    bound to the chart's controller ServiceAccount (`<release>-controller`) in the release's namespace."""
    role, binding = spark_on_node.networkpolicy_grant("jobs", "spark-operator", "spark-system")
    assert (role["kind"], role["metadata"]["namespace"]) == ("Role", "jobs")
    (rule,) = role["rules"]
    assert (rule["apiGroups"], rule["resources"]) == (["networking.k8s.io"], ["networkpolicies"])
    assert {"create", "patch", "delete"} <= set(rule["verbs"])
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "spark-operator-controller",
                                    "namespace": "spark-system"}]


def test_the_volume_is_a_hostpath_prebound_to_the_claim_with_no_provisioner() -> None:
    """Given a job namespace and a node folder, then the PersistentVolume is that folder, storage class
    kct-local without a provisioner, pre-bound to the claim `aggregates` of the namespace, which names it back;
    both ReadWriteMany (driver and executors mount it at once)."""
    storage_class, volume, claim = spark_on_node.host_path_volume("jobs", Path("/srv/node/volumes/jobs"))
    assert storage_class["provisioner"] == "kubernetes.io/no-provisioner"
    assert volume["spec"]["hostPath"] == {"path": "/srv/node/volumes/jobs", "type": "Directory"}
    assert volume["spec"]["claimRef"] == {"namespace": "jobs", "name": spark_on_node.CLAIM}
    assert claim["metadata"] == {"name": spark_on_node.CLAIM, "namespace": "jobs"}
    assert claim["spec"]["volumeName"] == volume["metadata"]["name"]
    for obj in (volume, claim):
        assert obj["spec"]["storageClassName"] == storage_class["metadata"]["name"] == spark_on_node.STORAGE_CLASS
        assert obj["spec"]["accessModes"] == ["ReadWriteMany"]


def test_the_chart_runs_our_image_never_pulled_for_one_job_namespace_with_cpu_requests() -> None:
    """Given our build of the operator's image, then the chart's values split it into registry, repository and
    tag (the chart joins them), never pull it, watch the one job namespace, and give controller and webhook a
    CPU request (not BestEffort next to the Spark pods)."""
    argv = spark_on_node.helm_values("kct.dev/spark-operator:0123abcd", "jobs")
    values = dict(arg.split("=", 1) for arg in argv[1::2])
    assert set(argv[::2]) == {"--set"}
    assert {k: v for k, v in values.items() if ".resources." not in k} == {
        "image.registry": "kct.dev", "image.repository": "spark-operator", "image.tag": "0123abcd",
        "image.pullPolicy": "Never", "spark.jobNamespaces[0]": "jobs"}
    assert values["controller.resources.requests.cpu"] and values["webhook.resources.requests.cpu"]
