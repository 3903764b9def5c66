"""`make demo`, shortened: the whole system on the node stack with real pods and real clients (a few minutes).

Runs dev/demo/demo.py as a user would (the operator installed with Helm, the TelemetryReceiver's pods, the
spark-operator running the receiver's SparkApplication as driver and executor pods, Kafka clients as pods and on
the host, narrowing, aggregates read from the claim's volume, report), with 20 s of traffic instead of 60, and Kafka
secured (`--kafka-sasl`: the receiver and the subscription name the broker's SASL_SSL listener with a Secret, so
the operator's admin, the receiver pods' producers and the Spark pods' Kafka source all connect through SASL_SSL),
on the session's node stack (the `node_stack` fixture: started if needed, kept for the rest of the session). Needs
`make images` and `make spark-operator` (the make targets that run pytest build them first).

The demo's own verdicts (its summary, its exit code) are not what is checked: the demo leaves its resources in
place, and the test reads the outcomes from the data, as a user checking it would: the API server (the
resources' status, the pods on the node), the receiver's topic (who pushed, and when, around the narrowing),
the receiver pods' own counters, and the Parquet the executor wrote (copied by the demo under its --out
folder). Then the test removes what the demo left, as `--remove-resources` would have.
"""

from __future__ import annotations

import calendar
import contextlib
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aggregation_support import read_table
from helpers import eventually
from node_support import NODE_ENV, RECEIVER_TLS, NodeStack, env_file, in_node
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from preconditions import missing_precondition

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "dev" / "demo" / "demo.py"
IMAGES = REPO / "dev" / "images" / "images.py"
sys.path.insert(0, str(DEMO.parent))
import demo  # noqa: E402  (dev/demo is not a package: its names, not its verdicts)
import prometheus_view  # noqa: E402
import spark_on_node  # noqa: E402  (dev/stack, put on the path by demo)
from client_pods import CLIENT_SOFTWARE, selector  # noqa: E402
from clients import DEMO_CLIENTS  # noqa: E402

# The shipped dashboards' panels (dashboard uid, title) that the demo cannot feed, and why. Every other panel,
# its variables at All, must return series from the node's Prometheus once the demo ran.
DEMO_FEEDS_NOT: dict[tuple[str, str], str] = {
    ("kct-pipeline", "Refusals by reason"): "every push of the demo is accepted: no refusal is counted",
    ("kct-pipeline", "Rate-limited and throttled"):
        "the demo's clients stay under every rate limit and quota, so no push is throttled",
    ("kct-pipeline", "Connections closed"):
        "closes are counted for timeouts and the connection cap, which the brokers' plugins never reach",
    ("kct-pipeline", "Kafka errors"): "selects error_type!=\"\": a healthy broker acknowledges every record",
    ("kct-pipeline", "Kafka admin errors"): "the operator's admin calls succeed against a healthy broker",
    ("kct-pipeline", "Export windows failed, last run"): "the export to the node's Prometheus does not fail",
}
APPLICATION = "telemetry-aggregation"  # the SparkApplication the operator renders for TelemetryReceiver telemetry
INTERVAL_S = 5  # examples/demo/subscription.yaml: intervalMs 5000
# After the narrowing reaches the broker a client learns it at its next push (one interval, one more in flight).
SETTLE_S = 2 * INTERVAL_S + 2

# Runs in the node's network namespace (pod addresses answer there): the pods' kct_receiver_pushes_total, summed.
_PUSHES = RECEIVER_TLS + """
import sys, urllib.request
total = 0.0
for ip in sys.argv[1:]:
    for line in urllib.request.urlopen(f"https://{ip}:4318/metrics", timeout=5).read().decode().splitlines():
        if line.startswith("kct_receiver_pushes_total"):
            total += float(line.rsplit(" ", 1)[1])
print(total)
"""


def _job_image() -> str:
    """The `kct-spark` image for these sources, as `make images` built it."""
    proc = subprocess.run([sys.executable, str(IMAGES), "plan", "kct-spark"], capture_output=True, text=True,
                          timeout=120, check=False)
    archive, _, reference = proc.stdout.strip().rpartition("\n")[2].partition("\t")
    if proc.returncode != 0 or not Path(archive).is_file():
        missing_precondition("no kct-spark image for these sources: run `make images`")
    return reference


def _get(stack: NodeStack, *args: str) -> Any:
    return stack.get(*args, "-n", demo.NAMESPACE)


def _running_on(pod: dict[str, Any], node: str, image: str) -> bool:
    return bool(pod["status"].get("phase") == "Running" and pod["spec"].get("nodeName") == node
                and pod["spec"]["containers"][0]["image"] == image
                and not pod["metadata"].get("deletionTimestamp"))


def _records(bootstrap: str, topic: str) -> list[tuple[dict[str, str], dict[str, str]]]:
    """The headers and the resource attributes of every record in `topic`, read from the start to the end it had
    when asked."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kct-e2e-demo-check",
                         "enable.auto.commit": False, "enable.metrics.push": False})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        left, out = {p for p, end in ends.items() if end > 0}, []
        deadline = time.monotonic() + 120
        while left and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None or msg.error():
                continue
            request = ExportMetricsServiceRequest.FromString(msg.value())
            resource = {a.key: a.value.string_value for rm in request.resource_metrics for a in rm.resource.attributes}
            out.append(({k: v.decode() for k, v in msg.headers() or []}, resource))
            if (msg.offset() or 0) + 1 >= ends[msg.partition() or 0]:
                left.discard(msg.partition() or 0)
        assert not left, f"partitions {sorted(left)} of {topic} not read to their end"
        return out
    finally:
        consumer.close()


def _patched_at(subscription: dict[str, Any]) -> float:
    """When `kubectl patch` last changed the subscription's spec (its managedFields entry; one-second resolution)."""
    (entry,) = [e for e in subscription["metadata"]["managedFields"] if e["manager"] == "kubectl-patch"]
    return _epoch(entry["time"])


def _applied_at(stack: NodeStack, after: float) -> float:
    """When the operator finished reconciling the subscription's first spec change at or after `after` (so the
    configs were on the broker): kopf's line for it in the operator pod's log, with kubelet's timestamp."""
    marker = f"[{demo.NAMESPACE}/{demo.SUBSCRIPTION}] Updating is processed"
    log = stack.kubectl("logs", "-n", demo.RELEASE_NAMESPACE, "-l", f"app.kubernetes.io/instance={demo.RELEASE}",
                        "--timestamps", "--tail=-1")
    times = [_epoch(line.split(" ", 1)[0]) for line in log.splitlines() if marker in line]
    later = [t for t in times if t >= after]
    assert later, f"no {marker!r} in the operator's log after the patch (at {times})"
    return min(later)


def _epoch(rfc3339: str) -> float:
    """Seconds since the epoch of an RFC 3339 UTC time, with or without (nanosecond) fractions."""
    whole, _, fraction = rfc3339.rstrip("Z").partition(".")
    return calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) + float(f"0.{fraction or 0}")


def _assert_every_fed_panel_has_series(prometheus: str, since: float) -> None:
    """The node's Prometheus, fed by the aggregation's export and by scraping the receivers and the operator:
    every panel of the shipped dashboards that the demo can feed (not in DEMO_FEEDS_NOT), its variables at All,
    draws series over the demo's run, as the dashboard would with its time range on the run (a range query from
    `since`: after the narrowing the pods stop pushing and their series go stale, so an instant query at the end
    shows only the chosen client); none errors."""
    queries = prometheus_view.panels()
    assert set(DEMO_FEEDS_NOT) <= set(queries), "a DEMO_FEEDS_NOT panel is gone"

    def drawn(promql: str) -> bool:
        return any(s.points for s in prometheus_view.panel_series(prometheus, promql, since, time.time(), step=15))

    def empty_panels() -> list[tuple[str, str]]:
        return [key for key, promqls in queries.items() if key not in DEMO_FEEDS_NOT
                and not all(drawn(promql) for promql in promqls)]

    with contextlib.suppress(pytest.fail.Exception):
        eventually(lambda: not empty_panels(), timeout=180, interval=5, what="every fed dashboard panel's series")
    assert not empty_panels(), {key: queries[key] for key in empty_panels()}
    for key in DEMO_FEEDS_NOT:
        for promql in queries[key]:
            drawn(promql)  # runs without error, data or not


@pytest.fixture
def demo_removed_afterwards(node_stack: NodeStack) -> Iterator[None]:
    """What `--remove-resources` does at the end of a demo, once the test has read what the demo left."""
    yield
    node_stack.kubectl("delete", "deployments,statefulsets,services,configmaps", "-l", selector(demo.CLIENT_PODS),
                       "-n", demo.NAMESPACE, "--wait=false", check=False)
    node_stack.kubectl("delete", "clientmetricssubscriptions,telemetryreceivers", "--all", "-n", demo.NAMESPACE,
                       "--wait", "--timeout=90s", check=False, timeout=120)  # kubectl's own 90 s, then ours
    access = spark_on_node.NodeAccess.from_env_file()
    spark_on_node.uninstall(access, spark_on_node.install_record(access, demo.NAMESPACE, spark_on_node.RELEASE))
    subprocess.run([*spark_on_node.helm(access), "uninstall", demo.RELEASE, "-n", demo.RELEASE_NAMESPACE, "--wait"],
                   capture_output=True, timeout=300, check=False)


@pytest.mark.timeout(1560)
def test_demo_shows_every_client_aggregated_and_narrowing_stops_the_others(
        node_stack: NodeStack, tmp_path: Path, demo_removed_afterwards: None) -> None:
    """Given the node stack with our runtime image,
    When the demo installs the operator and the spark-operator with Helm, applies the examples, runs 20 s of
    traffic, narrows the subscription to one client and waits for the aggregation on the node,
    (through the broker's SASL_SSL listener, from a Secret),
    Then the API server shows the TelemetryReceiver Ready=True with its pods running our image on the node, the
    SparkApplication RUNNING with a driver and an executor pod of our kct-spark image on the node and the
    receiver's status.aggregation RUNNING, and the narrowed match applied; the receiver pods counted the pushes
    and the topic holds a push from every demo client, after the narrowing only from the chosen one; the
    Parquet has rows with data points for every demo client; every push of the client pods (a Deployment on
    librdkafka, a StatefulSet on the Java client) is attributed to its own pod and workload, the host clients'
    to none; every dashboard panel the demo can feed returns series from the node's Prometheus; and the HTML
    report has inline SVG plots, the Spark pods and the client workloads."""
    if node_stack.kct_image is None:
        missing_precondition("the node stack has no runtime image: run `make images` before `make node-up`")
    job_image = _job_image()
    out = tmp_path / "demo"
    started = time.time()
    proc = subprocess.run(
        [sys.executable, str(DEMO), "--duration", "20", "--narrow-window", "12", "--keep-stack", "--kafka-sasl",
         "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=1500, check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]  # the demo ran to its end (its checks are not ours)
    node = node_stack.node_name

    # The API server: the receiver and its pods, the SparkApplication and its pods, the subscription.
    eventually(lambda: {c["type"]: c["status"] for c in _get(node_stack, "telemetryreceiver", demo.RECEIVER)
                        ["status"]["conditions"]}.get("Ready") == "True",
               timeout=60, interval=2, what="TelemetryReceiver telemetry Ready=True")
    receiver_pods = _get(node_stack, "pods", "-l", demo.RECEIVER_PODS)["items"]
    assert receiver_pods and all(_running_on(p, node, node_stack.kct_image) for p in receiver_pods), \
        [(p["metadata"]["name"], p["status"].get("phase"), p["spec"].get("nodeName")) for p in receiver_pods]
    (application,) = _get(node_stack, "sparkapplications")["items"]
    assert application["metadata"]["name"] == APPLICATION
    assert application["status"]["applicationState"]["state"] == "RUNNING", application["status"]
    spark_pods = {p["metadata"]["labels"]["spark-role"]: p for p in _get(node_stack, "pods", "-l", demo.SPARK_PODS)
                  ["items"] if _running_on(p, node, job_image)}
    assert set(spark_pods) == {"driver", "executor"}, spark_pods.keys()
    aggregation = _get(node_stack, "telemetryreceiver", demo.RECEIVER)["status"]["aggregation"]
    assert (aggregation["application"], aggregation["state"]) == (f"SparkApplication/{APPLICATION}", "RUNNING")
    subscription = _get(node_stack, "clientmetricssubscription", demo.SUBSCRIPTION)
    assert subscription["status"]["appliedConfigs"]["match"] == f"client_id={demo.NARROW_TO}"
    # Every Kafka client above went through SASL_SSL: the resources name that listener and the Secret, and the
    # pods mount it (the PLAINTEXT pod listener is named nowhere).
    secured = {"bootstrapServers": env_file(NODE_ENV)["KCT_NODE_KAFKA_POD_SASL_SSL_BOOTSTRAP"],
               "secretRef": {"name": demo.KAFKA_SECRET}}
    receiver_spec = _get(node_stack, "telemetryreceiver", demo.RECEIVER)["spec"]
    assert (receiver_spec["kafka"], subscription["spec"]["kafka"]) == (secured, secured)
    assert {"name": "kafka-client", "secret": {"secretName": demo.KAFKA_SECRET}} in application["spec"]["volumes"]
    assert all(any(v.get("secret", {}).get("secretName") == demo.KAFKA_SECRET for v in p["spec"]["volumes"])
               for p in [*receiver_pods, *spark_pods.values()])

    # The receiver pods' own counters, and the topic they wrote.
    counted = float(in_node(node_stack, _PUSHES, *(p["status"]["podIP"] for p in receiver_pods)))
    topic = _get(node_stack, "telemetryreceiver", demo.RECEIVER)["status"]["topic"]["name"]
    records = _records(node_stack.kafka_bootstrap, topic)
    assert counted > 0 and records, (counted, len(records))  # pods that restarted count from 0 again
    pushed_at: dict[str, list[float]] = defaultdict(list)
    for headers, _ in records:
        pushed_at[headers.get("client_id", "")].append(int(headers["kct.received_ms"]) / 1000)
    patched = _patched_at(_get(node_stack, "clientmetricssubscription", demo.SUBSCRIPTION, "--show-managed-fields"))
    narrowed = _applied_at(node_stack, patched) + SETTLE_S
    for client in DEMO_CLIENTS:
        times = pushed_at[client.client_id]
        assert times and min(times) < patched, f"{client.client_id}: no push before the narrowing"
        later = [t for t in times if t >= narrowed]
        if client.client_id == demo.NARROW_TO:
            assert later, f"{client.client_id} (the chosen client) stopped pushing after the narrowing"
        else:
            assert not later, f"{client.client_id} kept pushing after the narrowing: {len(later)} pushes"

    # The receiver's attribution: every push from a client pod names that pod (its client.id is its pod's name),
    # with its uid while it runs, and its Deployment or StatefulSet; both client software names pushed.
    client_pods = {p["metadata"]["name"]: p
                   for p in _get(node_stack, "pods", "-l", selector(demo.CLIENT_PODS))["items"]}
    owners = {f"{demo.CLIENT_PODS}-producer": "k8s.deployment.name",
              f"{demo.CLIENT_PODS}-consumer": "k8s.statefulset.name"}
    from_pods = [(h, r) for h, r in records if h.get("client_id", "").startswith(f"{demo.CLIENT_PODS}-")]
    for headers, resource in from_pods:
        name = headers["client_id"]
        (workload,) = [w for w in owners if name.startswith(f"{w}-")]
        assert (resource.get("k8s.namespace.name"), resource.get("k8s.pod.name"), resource.get(owners[workload])) == (
            demo.NAMESPACE, name, workload), (name, resource)
        if name in client_pods:
            assert resource.get("k8s.pod.uid") == client_pods[name]["metadata"]["uid"], (name, resource)
    assert {r.get(key) for _, r in from_pods for key in owners.values()} >= set(owners), "a workload never pushed"
    assert {h.get("client_software_name") for h, _ in from_pods} == set(CLIENT_SOFTWARE.values())
    assert not [h["client_id"] for h, r in records if h.get("client_id") in {c.client_id for c in DEMO_CLIENTS}
                and "k8s.pod.name" in r]  # the host's clients are no pod's: unattributed

    # The Parquet the executor wrote to the claim, as the demo copied it.
    points: dict[str, int] = defaultdict(int)
    for row in read_table(out / "aggregates", "client_metrics"):
        points[str(row["client_id"])] += int(row["points"] or 0)
    assert not [c.client_id for c in DEMO_CLIENTS if points[c.client_id] <= 0], dict(points)

    _assert_every_fed_panel_has_series(env_file(NODE_ENV)["KCT_NODE_PROMETHEUS_URL"], since=started)

    report = (out / "report.html").read_text()
    assert report.count("<svg") >= 3
    assert all(pod["metadata"]["name"] in report for pod in spark_pods.values())
    assert "<script" not in report
    assert all(f"{kind} {demo.NAMESPACE}/{workload}" in report
               for workload, kind in zip(owners, ("Deployment", "StatefulSet"), strict=True))

