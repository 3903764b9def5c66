"""The demo's client workloads as attributed pushes, for the tests that check the export in a real Prometheus.

`make demo` runs a producer Deployment (confluent-kafka-python, on librdkafka) and a consumer StatefulSet (the
Java client) in namespace kct-telemetry, named by dev/demo/client_pods.py. Here they are pods of the same
objects (rendered by that builder, two replicas each so that every workload merges more than one client), and
their pushes are attributed as the receiver attributes them: the pods and the ReplicaSet go into
kct.attribution's PodIndex, the Attributor finds each push's pod from its source address, and
`with_resource_attributes` writes the attributes onto the push's resource (what the receiver's pipeline does
before the record reaches Kafka). So the aggregates carry the workload columns the demo's would.

The metrics are the ones the shipped dashboards draw (producer: send, error and retry rates, queue time,
request latency, throttling; consumer: consumption rate, fetch latency, throttling, request latency), each
client with values of its own so that a per-workload merge (sum, max, mean) is told apart from any one client,
plus a cumulative counter and a delta counter per client, the two kinds of sums the export treats differently.
The producers here send the Java client's producer set (librdkafka sends queue time, latency and throttling but
no record rates; in the demo those come from the Java StatefulSet's forwarding producer): this module checks
what the export and the dashboards make of the metrics, and tests/e2e/test_demo_e2e.py checks the panels
against what the demo's real clients send.
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from kct.aggregation.synthetic import PREFIX, SyntheticClient, TelemetryRecord, build_request
from kct.attribution.attributor import Attributor
from kct.attribution.config import AttributionConfig
from kct.attribution.resource_bytes import with_resource_attributes
from kct.otlp import labels as L

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "dev" / "demo"))
import client_pods

__all__ = ["CUMULATIVE", "DELTA", "NAMESPACE", "PUSHES", "Client", "Workload", "demo_pushes", "push_metrics",
           "workloads"]

S: Final = 1_000_000_000
NAMESPACE: Final = "kct-telemetry"  # dev/demo/demo.py's NAMESPACE
CLIENT_PODS: Final = "demo-shop"  # dev/demo/demo.py's CLIENT_PODS
PUSHES: Final = 12  # every 10 s: two one-minute windows, ended before the test runs
REPLICAS: Final = 2
JAVA_VERSION: Final = "3.9.0"
# The demo's pods as dev/demo/client_pods.py renders them (images and bootstrap do not matter here).
PODS: Final = client_pods.ClientPods(namespace=NAMESPACE, name=CLIENT_PODS, bootstrap="unused:9092",
                                     topic="demo-orders", librdkafka_image="unused", java_image="unused",
                                     producer_replicas=REPLICAS, consumer_replicas=REPLICAS)
CUMULATIVE = {"producer": "producer.record.send.total", "consumer": "consumer.fetch.manager.records.consumed.total"}
DELTA = {"producer": "producer.record.retry.total", "consumer": "consumer.fetch.manager.fetch.total"}


@dataclass(frozen=True)
class Client:
    pod: str
    address: str
    synthetic: SyntheticClient  # its instance id, client id (the pod's name, as the demo's clients set it), software


@dataclass(frozen=True)
class Workload:
    role: str  # producer | consumer: which metrics its clients push
    kind: str  # as the export labels it (k8s_workload_kind)
    name: str
    software: str
    clients: tuple[Client, ...]

    @property
    def client_ids(self) -> tuple[str, ...]:
        return tuple(c.synthetic.client_id for c in self.clients)


def _confluent_kafka_version() -> str:
    """What confluent-kafka-python reports as its KIP-511 version: its own and librdkafka's."""
    import confluent_kafka

    return f"{confluent_kafka.version()[0]}-rdkafka-{confluent_kafka.libversion()[0]}"


def workloads(started_ns: int) -> tuple[Workload, ...]:
    """The demo's producer Deployment and consumer StatefulSet, REPLICAS pods each."""
    software = client_pods.CLIENT_SOFTWARE
    producers = tuple(
        Client(f"{client_pods.producer_name(PODS)}-5d8c7b9f4-{suffix}", f"10.244.0.{11 + i}",
               SyntheticClient(f"{client_pods.producer_name(PODS)}-5d8c7b9f4-{suffix}", started_ns=started_ns,
                               software_name=software["producer"], software_version=_confluent_kafka_version(),
                               seed=1 + i))
        for i, suffix in enumerate(("x7kq2", "m4zt9")[:REPLICAS]))
    consumers = tuple(
        Client(f"{client_pods.consumer_name(PODS)}-{i}", f"10.244.0.{21 + i}",
               SyntheticClient(f"{client_pods.consumer_name(PODS)}-{i}", started_ns=started_ns,
                               software_name=software["consumer"], software_version=JAVA_VERSION, seed=11 + i))
        for i in range(REPLICAS))
    return (Workload("producer", "deployment", client_pods.producer_name(PODS), software["producer"], producers),
            Workload("consumer", "statefulset", client_pods.consumer_name(PODS), software["consumer"], consumers))


def _owner(kind: str, name: str) -> list[dict[str, Any]]:
    return [{"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": f"uid-{name}", "controller": True}]


def _attributor(given: tuple[Workload, ...], created: str) -> Attributor:
    """The receiver's attribution with the demo's pods (their template's labels) and ReplicaSet indexed."""
    templates = {obj["metadata"]["name"]: obj["spec"]["template"]["metadata"]["labels"]
                 for obj in client_pods.render_client_pods(PODS) if obj["kind"] in ("Deployment", "StatefulSet")}
    attributor = Attributor(AttributionConfig())
    for workload in given:
        controller = ("StatefulSet", workload.name)
        if workload.kind == "deployment":
            replicaset = f"{workload.name}-5d8c7b9f4"
            attributor.index.upsert_owner("ReplicaSet", {"metadata": {
                "namespace": NAMESPACE, "name": replicaset, "ownerReferences": _owner("Deployment", workload.name)}})
            controller = ("ReplicaSet", replicaset)
        for client in workload.clients:
            attributor.index.upsert_pod({
                "metadata": {"namespace": NAMESPACE, "name": client.pod, "uid": f"uid-{client.pod}",
                             "creationTimestamp": created, "labels": templates[workload.name],
                             "ownerReferences": _owner(*controller)},
                "spec": {"nodeName": "kct-node"},
                "status": {"podIP": client.address, "phase": "Running"}}, now_ms=0)
    return attributor


def _gauge(name: str, now_ns: int, value: float, unit: str = "", **attributes: str) -> dict[str, Any]:
    return {"name": PREFIX + name, "type": "gauge", "unit": unit,
            "points": [{"time": now_ns, "value": float(value), "attributes": attributes}]}


def _sum(name: str, now_ns: int, start_ns: int, value: float, temporality: str) -> dict[str, Any]:
    return {"name": PREFIX + name, "type": "sum", "temporality": temporality, "monotonic": True,
            "points": [{"time": now_ns, "start": start_ns, "value": float(value)}]}


def push_metrics(role: str, now_ns: int, k: int, c: int) -> list[dict[str, Any]]:
    """Push `k` of client `c` (0, 1, ...) of a `role` workload: values that differ by client and by push."""
    if role == "producer":
        return [
            _gauge("producer.record.send.rate", now_ns, 120.0 + k + 10 * c),
            _gauge("producer.record.error.rate", now_ns, 0.2 + 0.1 * c),  # under the error-rate alert's 1/s
            _gauge("producer.record.retry.rate", now_ns, 1.5),
            _gauge("producer.record.queue.time.max", now_ns, 40.0 + k + 7 * c, "ms"),
            _gauge("producer.record.queue.time.avg", now_ns, 12.0 + 3 * c, "ms"),
            _gauge("producer.node.request.latency.max", now_ns, 90.0 + k + c, "ms", **{"node.id": "1"}),
            _gauge("producer.node.request.latency.avg", now_ns, 30.0 + c, "ms", **{"node.id": "1"}),
            _gauge("producer.produce.throttle.time.max", now_ns, 5.0 + c, "ms"),
        ]
    return [
        _gauge("consumer.fetch.manager.records.consumed.rate", now_ns, 80.0 + k + 5 * c),
        _gauge("consumer.fetch.manager.fetch.latency.max", now_ns, 500.0 + 20 * c, "ms"),
        _gauge("consumer.fetch.manager.fetch.throttle.time.max", now_ns, 2.0 + c, "ms"),
        _gauge("consumer.node.request.latency.max", now_ns, 70.0 + k + c, "ms", **{"node.id": "1"}),
        _gauge("consumer.node.request.latency.avg", now_ns, 20.0 + c, "ms", **{"node.id": "1"}),
    ]


def demo_pushes(end_ns: int | None = None) -> tuple[tuple[Workload, ...], list[tuple[dt.datetime, TelemetryRecord]]]:
    """Every client pushing every 10 s for PUSHES pushes that end at `end_ns` (default: the last minute boundary
    but one, so every window has ended), attributed as the receiver attributes them; with the broker's headers
    as the plugin adds them (the source address: the pod's). The records in push order, with their times."""
    end = end_ns if end_ns is not None else (time.time_ns() // (60 * S) - 1) * 60 * S
    begin = end - PUSHES * 10 * S
    given = workloads(begin)
    attributor = _attributor(given, dt.datetime.fromtimestamp(begin / S - 60, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    totals: dict[str, float] = {}
    pushes = []
    for k in range(PUSHES):
        now_ns = begin + k * 10 * S + S
        for workload in given:
            for c, client in enumerate(workload.clients):
                instance = client.synthetic.instance_id
                totals[instance] = totals.get(instance, 0.0) + 100.0 * (c + 1) + k
                metrics = [*push_metrics(workload.role, now_ns, k, c),
                           _sum(CUMULATIVE[workload.role], now_ns, begin, totals[instance], "cumulative"),
                           _sum(DELTA[workload.role], now_ns, now_ns - 10 * S, 3.0 + c + k % 3, "delta")]
                headers = [(name, client.address.encode() if name == L.CLIENT_SOURCE_ADDRESS.name else value)
                           for name, value in client.synthetic.push(now_ns).headers]
                found = attributor.attribute(client.address, client.synthetic.principal,
                                             client.synthetic.client_id, now_ns // 1_000_000)
                assert found.outcome == "pod", (client.pod, found)
                value = with_resource_attributes(build_request({}, metrics), found.attributes)
                pushes.append((dt.datetime.fromtimestamp(now_ns / S, tz=dt.UTC),
                               TelemetryRecord(instance.encode(), value, headers)))
    return given, pushes
