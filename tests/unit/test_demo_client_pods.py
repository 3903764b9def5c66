"""dev/demo/client_pods.py (the Kafka client pods of the demo and the node e2e tests) and the workload columns
of dev/demo/report.py. The pods themselves push in tests/e2e/test_node_e2e.py and test_demo_e2e.py."""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

from preconditions import require_module

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "dev" / "demo"))
import client_pods
import report
from client_pods import ClientPods, render_client_pods

PODS = ClientPods(namespace="shop", name="demo-shop", bootstrap="10.250.0.2:19094", topic="orders",
                  librdkafka_image="kct.dev/kct:1", java_image="kct.dev/kct-spark:1")


def _by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objects}


def test_the_objects_validate_against_the_kubernetes_schemas() -> None:
    """Given the client pods' objects, then each is valid for Kubernetes 1.36 (strict: unknown fields fail)."""
    kubernetes_validate: Any = require_module("kubernetes_validate", "it holds the Kubernetes schemas (a test extra)")
    for obj in render_client_pods(PODS):
        kubernetes_validate.validate(obj, "1.36.0", strict=True)


def test_a_librdkafka_deployment_and_a_java_statefulset_each_with_the_pods_name_as_client_id() -> None:
    """Given two producers and one consumer, then the producer Deployment runs the librdkafka script on our runtime
    image with two replicas, the consumer StatefulSet the Java source on the kct-spark image, both in the
    namespace, with the pod's name as client.id, their code from the ConfigMap, and selectors on their own name."""
    objects = render_client_pods(PODS)
    kinds = _by_kind(objects)

    assert sorted(kinds) == ["ConfigMap", "Deployment", "Service", "StatefulSet"]
    assert {o["metadata"]["namespace"] for o in objects} == {"shop"}
    deployment, statefulset = kinds["Deployment"], kinds["StatefulSet"]
    assert (deployment["metadata"]["name"], deployment["spec"]["replicas"]) == ("demo-shop-producer", 2)
    assert (statefulset["metadata"]["name"], statefulset["spec"]["replicas"]) == ("demo-shop-consumer", 1)
    assert statefulset["spec"]["serviceName"] == kinds["Service"]["metadata"]["name"] == "demo-shop-consumer"
    producer = deployment["spec"]["template"]["spec"]["containers"][0]
    consumer = statefulset["spec"]["template"]["spec"]["containers"][0]
    assert producer["image"] == "kct.dev/kct:1" and consumer["image"] == "kct.dev/kct-spark:1"
    assert producer["command"][:3] == ["python", "/etc/kct-clients/librdkafka_client.py", "producer"]
    assert consumer["command"][:5] == ["java", "-Xmx96m", "-XX:TieredStopAtLevel=1", "-cp", "/opt/spark/jars/*"]
    assert consumer["command"][5:] == ["/etc/kct-clients/Client.java", "consumer", "10.250.0.2:19094", "orders",
                                       "$(POD_NAME)", "demo-shop-consumer"]
    for container in (producer, consumer):
        assert "$(POD_NAME)" in container["command"]
        assert container["env"] == [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    for workload in (deployment, statefulset):
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert workload["spec"]["selector"]["matchLabels"] == labels
        assert labels["app.kubernetes.io/name"] == workload["metadata"]["name"]
    assert sorted(kinds["ConfigMap"]["data"]) == ["Client.java", "librdkafka_client.py"]
    ast.parse(kinds["ConfigMap"]["data"]["librdkafka_client.py"])
    assert all(client_pods.selector("demo-shop").split("=") == ["app.kubernetes.io/part-of", "demo-shop"]
               and o["metadata"]["labels"]["app.kubernetes.io/part-of"] == "demo-shop" for o in objects)


def _push(client_id: str, workload: str = "", pod: str = "", software: str = "librdkafka") -> report.Push:
    return report.Push(received_ms=0, client_instance_id="i", client_id=client_id, software_name=software,
                       software_version="2", principal="User:ANONYMOUS", source="10.244.0.5:4000", data_points=1,
                       terminating=False, workload=workload, pod=pod)


def test_workload_of_names_the_outermost_owner_and_nothing_for_an_unattributed_push() -> None:
    """Given resource attributes of a Deployment's pod (with its ReplicaSet), a StatefulSet's, a CronJob's (with
    its Job), a bare pod's and none, then the workload is the Deployment, the StatefulSet, the CronJob, the Pod,
    and "" (unattributed)."""
    assert report.workload_of({"k8s.namespace.name": "shop", "k8s.pod.name": "orders-7d-x",
                               "k8s.replicaset.name": "orders-7d", "k8s.deployment.name": "orders"}) == \
        "Deployment shop/orders"
    assert report.workload_of({"k8s.namespace.name": "shop", "k8s.statefulset.name": "ledger"}) == \
        "StatefulSet shop/ledger"
    assert report.workload_of({"k8s.namespace.name": "ops", "k8s.job.name": "n-1", "k8s.cronjob.name": "n"}) == \
        "CronJob ops/n"
    assert report.workload_of({"k8s.namespace.name": "ops", "k8s.pod.name": "debug"}) == "Pod ops/debug"
    assert report.workload_of({"client_id": "c"}) == ""


def test_workload_rows_group_pushes_by_workload_with_the_unattributed_last() -> None:
    """Given pushes from two pods of a Deployment, one of a StatefulSet and four host clients, then there is one
    row per workload with its pod count, software and pushes, and the host clients' row last."""
    deployment, statefulset = "Deployment shop/orders", "StatefulSet shop/ledger"
    pushes = [_push("orders-a", deployment, "shop/orders-a"), _push("orders-a", deployment, "shop/orders-a"),
              _push("orders-b", deployment, "shop/orders-b"), _push("ledger-0", statefulset, "shop/ledger-0", "java"),
              *[_push(f"host-{n}") for n in range(4)]]

    assert report.workload_rows(pushes) == [
        (deployment, 2, "librdkafka", "orders-a, orders-b", 3),
        (statefulset, 1, "java", "ledger-0", 1),
        ("- (not attributed: outside the cluster)", 0, "librdkafka", "4 client ids", 4),
    ]
