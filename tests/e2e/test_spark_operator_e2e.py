"""The aggregation on Kubernetes for real: a TelemetryReceiver with `aggregation` on the node stack -> the
operator (installed with helm/kct) renders its SparkApplication -> the Kubeflow spark-operator (v2.4.0, built
from its Go module, installed with its own chart, CRDs and RBAC; controller and webhook) submits it -> a driver
and an executor pod run our `spark` image -> the job reads the receiver's topic and writes Parquet to a
PersistentVolume -> the TelemetryReceiver's status shows the application's state.

The volume is a static hostPath PersistentVolume under build/node-stack/volumes/ (storage class
`kct-local`, no provisioner: `kubernetes.io/no-provisioner`), bound to the claim the TelemetryReceiver names;
the test reads the Parquet the pods wrote from the host side of that folder.

The input is synthetic KIP-714 pushes produced into the receiver's topic as soon as the operator created it
(the receiver and broker plugin have their own tests). The time from `kubectl apply` to the first Parquet
file, and the image sizes, are printed (`-s` shows them), never asserted.

Needs `make images` (the kct and kct-spark images) and `make spark-operator` (binary, chart, image); the make
targets that run pytest build them first.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aggregation_support import produce, read_table
from helpers import eventually
from node_support import REPO, NodeStack, Release, telemetry_receiver

from kct.aggregation.synthetic import SyntheticClient

sys.path.insert(0, str(REPO / "dev" / "stack"))
import spark_on_node as spark_node  # (dev/stack is not a package)

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

S = 1_000_000_000
SINK = "/data/aggregates"


@dataclass(frozen=True)
class SparkOnNode:
    stack: NodeStack
    installed: spark_node.Installed  # the spark-operator's release, the job namespace and its volume

    @property
    def job_image(self) -> str:
        return self.installed.job_image

    @property
    def namespace(self) -> str:  # where the TelemetryReceiver and its Spark pods run
        return self.installed.namespace

    @property
    def service_account(self) -> str:  # the driver's, created by the spark-operator's chart in `namespace`
        return self.installed.service_account

    @property
    def volume(self) -> Path:  # host side of the PersistentVolume bound to the claim
        return self.installed.volume


@pytest.fixture(scope="module")
def spark_on_node(node_stack: NodeStack, operator_release: Release) -> Iterator[SparkOnNode]:
    """Images in the node's containerd, a job namespace with its volume, the spark-operator's chart installed
    for that namespace (with the kct operator of `operator_release` running): dev/stack/spark_on_node.py, as
    `make demo` installs it."""
    access = spark_node.NodeAccess(kubeconfig=node_stack.kubeconfig, node_exec=Path(node_stack.node_exec[0]))
    namespace = f"kct-spark-{uuid.uuid4().hex[:6]}"
    node_stack.kubectl("create", "namespace", namespace)
    release_namespace = f"spark-operator-{uuid.uuid4().hex[:6]}"
    installed = spark_node.install_record(access, namespace, release_namespace)
    try:
        try:
            installed = spark_node.install(access, namespace, release_namespace=release_namespace)
        except spark_node.SparkOnNodeError as error:
            pytest.fail(f"installing the spark-operator on the node: {error} (`make pytest` builds the images)")
        for reference, size in installed.archive_mb.items():
            took = installed.import_seconds.get(reference)
            print(f"\n[spark-e2e] image {reference}: {size} MB (docker-archive)"
                  + (f", imported in {took:.0f} s" if took is not None else ""))
        yield SparkOnNode(stack=node_stack, installed=installed)
    finally:
        node_stack.kubectl("delete", "telemetryreceiver", "--all", "-n", namespace, "--wait=true", "--timeout=120s",
                           check=False)
        spark_node.uninstall(access, installed)
        for name in (namespace, release_namespace):
            node_stack.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _receiver(spark: SparkOnNode, topic: str) -> dict[str, Any]:
    stack = spark.stack
    assert stack.kct_image is not None
    receiver = telemetry_receiver(spark.namespace, stack.kct_image, stack.kafka_pod_bootstrap, topic)
    receiver["spec"]["aggregation"] = {
        "image": spark.job_image, "imagePullPolicy": "Never",
        "sinkPath": SINK, "sinkClaimName": spark.installed.claim,
        # Windows close as soon as later points arrive, so Parquet appears within a few micro-batches.
        "window": {"sizeSeconds": 60, "watermarkSeconds": 0},
        "triggerSeconds": 5,
        "driver": {"cores": 1, "memory": "1g", "serviceAccount": spark.service_account},
        "executor": {"instances": 1, "cores": 1, "memory": "1g"},
        # The node has 2 CPUs for everything: the pods ask for a fraction of the cores Spark schedules on.
        "sparkConf": {"spark.kubernetes.driver.request.cores": "250m",
                      "spark.kubernetes.executor.request.cores": "250m"},
    }
    return receiver


def _topic_exists(bootstrap: str, topic: str) -> bool:
    from confluent_kafka.admin import AdminClient

    return topic in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics


def _pods(stack: NodeStack, namespace: str, role: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = stack.get("pods", "-n", namespace, "-l", f"spark-role={role}")["items"]
    return items


def _parquet_files(folder: Path) -> list[Path]:
    """The tables' files (not the checkpoints' nor a micro-batch's staging: readers skip `_` folders)."""
    return sorted(p for p in folder.rglob("*.parquet")
                  if not any(part.startswith("_") for part in p.relative_to(folder).parts))


def _aggregation_status(stack: NodeStack, namespace: str) -> dict[str, Any]:
    status: dict[str, Any] = stack.get("telemetryreceiver", "telemetry", "-n", namespace).get("status", {})
    return status


def _diagnostics(spark: SparkOnNode) -> str:
    stack = spark.stack
    parts = [stack.kubectl("get", "pods,sparkapplications", "-n", spark.namespace, "-o", "wide", check=False),
             stack.kubectl("get", "sparkapplications", "-n", spark.namespace, "-o", "yaml", check=False)[-3000:]]
    for role in ("driver", "executor"):
        for pod in _pods(stack, spark.namespace, role):
            name = pod["metadata"]["name"]
            parts.append(f"--- {name}\n" + stack.kubectl("logs", name, "-n", spark.namespace, "--tail=60",
                                                         check=False))
    return "\n".join(parts)


@pytest.mark.timeout(1500)
def test_a_receiver_with_aggregation_runs_its_spark_application_to_parquet(spark_on_node: SparkOnNode) -> None:
    """Given the spark-operator and a claim on the node, when a TelemetryReceiver with aggregation is applied
    and pushes land in its topic, then the spark-operator runs a driver and an executor pod of our image, the
    job writes Parquet to the claim's volume with every client's series, and the receiver's status shows
    the application RUNNING."""
    spark, stack = spark_on_node, spark_on_node.stack
    topic = f"kct-spark-e2e-{uuid.uuid4().hex[:6]}"
    applied = time.monotonic()
    stack.kubectl("apply", "-f", "-", stdin=json.dumps(_receiver(spark, topic)))

    eventually(lambda: _topic_exists(stack.kafka_bootstrap, topic), timeout=240, interval=1,
               what=f"the operator to create the topic {topic}")
    now = (time.time_ns() // (60 * S)) * 60 * S
    clients = [SyntheticClient(f"spark-e2e-{i}", started_ns=now - 400 * S, seed=i + 1, partitions=2)
               for i in range(3)]
    records = [c.push(now - 300 * S + k * 10 * S, terminating=k == 29 and c is clients[0],
                      reason="Producer closed by application") for k in range(30) for c in clients]
    produce(stack.kafka_bootstrap, topic, records)

    try:
        eventually(lambda: _parquet_files(spark.volume), timeout=900, interval=2,
                   what="the first Parquet file on the volume")
        first_parquet = time.monotonic() - applied
        eventually(lambda: {r["client_instance_id"] for r in read_table(spark.volume, "client_metrics")}
                   == {c.instance_id for c in clients}, timeout=300, interval=3,
                   what="client_metrics rows of every client")
        drivers = eventually(lambda: [p for p in _pods(stack, spark.namespace, "driver")
                                      if p["status"].get("phase") == "Running"], timeout=60,
                             what="a running driver pod")
        executors = eventually(lambda: [p for p in _pods(stack, spark.namespace, "executor")
                                        if p["status"].get("phase") == "Running"], timeout=60,
                               what="a running executor pod")
    except BaseException:
        print(_diagnostics(spark))
        raise
    assert {c["image"] for p in drivers + executors for c in p["spec"]["containers"]} == {spark.job_image}
    assert {p["spec"]["nodeName"] for p in drivers + executors} == {stack.node_name}
    print(f"\n[spark-e2e] kubectl apply -> first Parquet file: {first_parquet:.0f} s "
          f"({len(_parquet_files(spark.volume))} files now)")

    status = eventually(lambda: (s := _aggregation_status(stack, spark.namespace)).get("aggregation", {})
                        .get("state") == "RUNNING" and s, timeout=180, interval=3,
                        what="status.aggregation.state RUNNING on the TelemetryReceiver")
    (application,) = stack.get("sparkapplications", "-n", spark.namespace)["items"]
    assert status["aggregation"]["application"] == f"SparkApplication/{application['metadata']['name']}"
    condition = next(c for c in status["conditions"] if c["type"] == "AggregationReady")
    assert condition["status"] == "True" and condition["message"].endswith("RUNNING")


def _produce_pushes(spark: SparkOnNode, topic: str, clients: list[SyntheticClient], start_ns: int) -> None:
    records = [c.push(start_ns + k * 10 * S) for k in range(30) for c in clients]
    produce(spark.stack.kafka_bootstrap, topic, records)


@pytest.mark.timeout(1200)
def test_a_rules_change_restarts_the_application_with_the_new_config(spark_on_node: SparkOnNode) -> None:
    """Given the running application of the test before, when a threshold rule is added to the receiver's
    aggregation, then the spark-operator replaces the driver (the rendered config hash changed), the
    application runs again, and the new driver applies the new rule: alerts named after it appear."""
    spark, stack = spark_on_node, spark_on_node.stack
    receiver = stack.get("telemetryreceiver", "telemetry", "-n", spark.namespace)
    topic = receiver["spec"]["topic"]["name"]
    before = {p["metadata"]["uid"] for p in _pods(stack, spark.namespace, "driver")}
    assert before, "the test before leaves a running driver"
    rule = {"name": "queue-time-seen", "metric": "org.apache.kafka.producer.record.queue.time.max",
            "field": "max", "op": ">=", "threshold": 0, "forSeconds": 0}
    changed = time.monotonic()
    stack.kubectl("patch", "telemetryreceiver", "telemetry", "-n", spark.namespace, "--type=merge",
                  "-p", json.dumps({"spec": {"aggregation": {"rules": [rule]}}}))
    try:
        eventually(lambda: [p for p in _pods(stack, spark.namespace, "driver")
                            if p["metadata"]["uid"] not in before and p["status"].get("phase") == "Running"],
                   timeout=300, interval=2, what="a new driver pod running")
        restarted = time.monotonic() - changed
        # Pushes after the restart: their windows close in the new driver's micro-batches.
        now = (time.time_ns() // (60 * S)) * 60 * S
        clients = [SyntheticClient(f"spark-e2e-after-{i}", started_ns=now - 60 * S, seed=i + 7, partitions=2)
                   for i in range(2)]
        _produce_pushes(spark, topic, clients, now)
        # The restarted driver first finalizes windows of the earlier pushes (from its checkpoint), then these.
        eventually(lambda: {c.instance_id for c in clients} <= {
            a["client_instance_id"] for a in read_table(spark.volume, "alerts") if a["rule"] == rule["name"]},
                   timeout=600, interval=3, what=f"alerts of the new rule {rule['name']} for the new clients")
    except BaseException:
        print(_diagnostics(spark))
        raise
    (application,) = stack.get("sparkapplications", "-n", spark.namespace)["items"]
    assert application["status"]["applicationState"]["state"] == "RUNNING"
    print(f"\n[spark-e2e] rules change -> new driver running: {restarted:.0f} s")


def _scheduled_runs(stack: NodeStack, namespace: str, owner: str) -> list[dict[str, Any]]:
    runs = stack.get("sparkapplications", "-n", namespace)["items"]
    return [r for r in runs if any(ref.get("name") == owner for ref in r["metadata"].get("ownerReferences", []))]


@pytest.mark.timeout(1200)
def test_scheduled_mode_runs_the_scheduled_application_to_completion(spark_on_node: SparkOnNode) -> None:
    """Given the receiver of the tests before, when its aggregation switches to `mode: scheduled` (every
    minute), then the streaming application and its pods go, the spark-operator starts runs of the
    ScheduledSparkApplication, a run drains the topic from the streaming job's checkpoint and COMPLETES with
    the pushes produced meanwhile in client_metrics, and the receiver's status shows the schedule and its
    last run."""
    spark, stack = spark_on_node, spark_on_node.stack
    receiver = stack.get("telemetryreceiver", "telemetry", "-n", spark.namespace)
    topic = receiver["spec"]["topic"]["name"]
    stack.kubectl("patch", "telemetryreceiver", "telemetry", "-n", spark.namespace, "--type=merge", "-p",
                  json.dumps({"spec": {"aggregation": {"mode": "scheduled", "schedule": "* * * * *"}}}))
    now = (time.time_ns() // (60 * S)) * 60 * S
    clients = [SyntheticClient(f"spark-e2e-scheduled-{i}", started_ns=now - 60 * S, seed=i + 11, partitions=2)
               for i in range(2)]
    _produce_pushes(spark, topic, clients, now + 600 * S)
    try:
        (scheduled,) = eventually(lambda: stack.get("scheduledsparkapplications", "-n", spark.namespace)["items"],
                                  timeout=180, interval=2, what="the ScheduledSparkApplication")
        name = scheduled["metadata"]["name"]
        # The streaming application had the same name; the runs are named <name>-<time>.
        eventually(lambda: not [a for a in stack.get("sparkapplications", "-n", spark.namespace)["items"]
                                if a["metadata"]["name"] == name] and
                   f"{name}-driver" not in {p["metadata"]["name"] for p in _pods(stack, spark.namespace, "driver")},
                   timeout=180, interval=2, what="the streaming application and its driver to be gone")
        completed = eventually(lambda: [r for r in _scheduled_runs(stack, spark.namespace, name)
                                        if r.get("status", {}).get("applicationState", {}).get("state")
                                        == "COMPLETED"], timeout=600, interval=3,
                               what="a run of the ScheduledSparkApplication to complete")
        rows = {r["client_instance_id"] for r in read_table(spark.volume, "client_metrics")}
        assert {c.instance_id for c in clients} <= rows
        status = eventually(lambda: (s := _aggregation_status(stack, spark.namespace).get("aggregation", {}))
                            .get("lastRun") and s, timeout=180, interval=3,
                            what="status.aggregation.lastRun on the TelemetryReceiver")
    except BaseException:
        print(_diagnostics(spark))
        raise
    assert status["application"] == f"ScheduledSparkApplication/{name}"
    assert status["state"] == "Scheduled"
    assert status["lastRun"].startswith(f"{name}-")
    print(f"\n[spark-e2e] scheduled run {completed[0]['metadata']['name']} COMPLETED")
