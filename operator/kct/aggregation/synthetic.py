"""Realistic KIP-714 pushes, built in Python: for tests, the end-to-end check and the benchmark.

A `SyntheticClient` behaves like a librdkafka producer that pushes the standard metrics (KIP-714 "Client
metrics and metric labels") every interval: cumulative sums (connection creations, records sent), gauges
(record queue time avg/max, queue bytes) and a cumulative request-latency histogram. `record()` returns the
Kafka record the receiver would write: key = client instance id, value = ExportMetricsServiceRequest bytes,
headers = broker-added labels (names from `kct.otlp.labels`).
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from typing import Any

from kct.otlp import labels as L

__all__ = ["LATENCY_BOUNDS", "PREFIX", "SyntheticClient", "TelemetryRecord", "build_request"]

PREFIX = "org.apache.kafka."
LATENCY_BOUNDS: tuple[float, ...] = (1.0, 5.0, 10.0, 50.0, 100.0, 500.0, 1000.0, 5000.0)


@dataclass(frozen=True)
class TelemetryRecord:
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]


def _kv(key: str, value: str | int | float | bool) -> Any:
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    if isinstance(value, float):
        return KeyValue(key=key, value=AnyValue(double_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


def build_request(resource: dict[str, str], metrics: list[dict[str, Any]]) -> bytes:
    """ExportMetricsServiceRequest bytes from plain dicts.

    Each metric: {name, type: gauge|sum|histogram, temporality: delta|cumulative, monotonic, unit,
    points: [{time, start, value | (count, sum, buckets, bounds), attributes}]} with times in ns.
    """
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.proto.metrics.v1 import metrics_pb2 as M

    temporality = {"delta": M.AGGREGATION_TEMPORALITY_DELTA, "cumulative": M.AGGREGATION_TEMPORALITY_CUMULATIVE}
    request = ExportMetricsServiceRequest()
    rm = request.resource_metrics.add()
    rm.resource.attributes.extend(_kv(k, v) for k, v in resource.items())
    sm = rm.scope_metrics.add()
    sm.scope.name = "kct.synthetic"
    for spec in metrics:
        m = sm.metrics.add()
        m.name = spec["name"]
        m.unit = spec.get("unit", "")
        kind = spec["type"]
        for p in spec["points"]:
            attrs = [_kv(k, v) for k, v in p.get("attributes", {}).items()]
            if kind == "gauge":
                dp = m.gauge.data_points.add()
            elif kind == "sum":
                m.sum.aggregation_temporality = temporality[spec.get("temporality", "cumulative")]
                m.sum.is_monotonic = spec.get("monotonic", True)
                dp = m.sum.data_points.add()
            else:
                m.histogram.aggregation_temporality = temporality[spec.get("temporality", "cumulative")]
                hp = m.histogram.data_points.add()
                hp.attributes.extend(attrs)
                hp.time_unix_nano = p["time"]
                hp.start_time_unix_nano = p.get("start", 0)
                hp.count = p["count"]
                hp.sum = p["sum"]
                hp.bucket_counts.extend(p["buckets"])
                hp.explicit_bounds.extend(p["bounds"])
                continue
            dp.attributes.extend(attrs)
            dp.time_unix_nano = p["time"]
            dp.start_time_unix_nano = p.get("start", 0)
            if isinstance(p["value"], int):
                dp.as_int = p["value"]
            else:
                dp.as_double = p["value"]
    return bytes(request.SerializeToString())


@dataclass
class SyntheticClient:
    """A producer pushing the standard KIP-714 producer metrics; state advances with each push."""

    client_id: str
    started_ns: int
    software_name: str = "librdkafka"
    software_version: str = "2.12.1"
    principal: str = "User:ANONYMOUS"
    broker_id: str = "1"
    brokers: int = 3
    instance_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    seed: int = 0
    # Per-partition series (topic/partition attributes), 2 points each: 46 make a ~100-point push.
    partitions: int = 0
    # Fixed producer.record.queue.time.max (ms) instead of a random 50..500, to trip threshold rules.
    queue_time_max_ms: float | None = None
    records_sent: int = 0
    connections: int = 0
    latency_buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BOUNDS) + 1))
    latency_sum: float = 0.0
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed or hash(self.instance_id))
        self.partition_sent = [0] * self.partitions

    def push(self, now_ns: int, *, terminating: bool = False, reason: str = "") -> TelemetryRecord:
        rng = self.rng
        self.records_sent += rng.randint(100, 10_000)
        self.connections += 1 if rng.random() < 0.1 else 0
        for _ in range(rng.randint(5, 50)):
            latency = rng.expovariate(1 / 40.0)
            self.latency_sum += latency
            index = next((i for i, b in enumerate(LATENCY_BOUNDS) if latency <= b), len(LATENCY_BOUNDS))
            self.latency_buckets[index] += 1
        start = self.started_ns
        metrics: list[dict[str, Any]] = [
            {"name": PREFIX + "producer.connection.creation.total", "type": "sum",
             "points": [{"time": now_ns, "start": start, "value": self.connections + self.brokers}]},
            {"name": PREFIX + "producer.record.sent.total", "type": "sum",
             "points": [{"time": now_ns, "start": start, "value": self.records_sent}]},
            {"name": PREFIX + "producer.record.queue.time.avg", "type": "gauge", "unit": "ms",
             "points": [{"time": now_ns, "value": rng.uniform(1.0, 50.0)}]},
            {"name": PREFIX + "producer.record.queue.time.max", "type": "gauge", "unit": "ms",
             "points": [{"time": now_ns, "value": self.queue_time_max_ms if self.queue_time_max_ms is not None
                         else rng.uniform(50.0, 500.0)}]},
            {"name": PREFIX + "producer.node.request.latency.avg", "type": "gauge", "unit": "ms",
             "points": [{"time": now_ns, "value": rng.uniform(1.0, 20.0), "attributes": {"node_id": str(b)}}
                        for b in range(1, self.brokers + 1)]},
            {"name": PREFIX + "client.request.rtt", "type": "histogram", "unit": "ms",
             "points": [{"time": now_ns, "start": start, "count": sum(self.latency_buckets),
                         "sum": self.latency_sum, "buckets": list(self.latency_buckets),
                         "bounds": list(LATENCY_BOUNDS)}]},
        ]
        if self.partitions:
            for i in range(self.partitions):
                self.partition_sent[i] += rng.randint(0, 200)
            attrs = [{"topic": "orders", "partition": str(i)} for i in range(self.partitions)]
            metrics.append({"name": PREFIX + "producer.partition.queue.bytes", "type": "gauge", "unit": "By",
                            "points": [{"time": now_ns, "value": rng.randint(0, 1 << 20), "attributes": a}
                                       for a in attrs]})
            metrics.append({"name": PREFIX + "producer.partition.record.sent.total", "type": "sum",
                            "points": [{"time": now_ns, "start": start, "value": self.partition_sent[i],
                                        "attributes": a} for i, a in enumerate(attrs)]})
        if terminating:
            metrics.append({"name": PREFIX + "client.terminating", "type": "gauge",
                            "points": [{"time": now_ns, "value": 1, "attributes": {"reason": reason}}]})
        value = build_request({"client_rack": "rack-a"}, metrics)
        headers = [
            (L.CLIENT_INSTANCE_ID.name, self.instance_id.encode()),
            (L.CLIENT_ID.name, self.client_id.encode()),
            (L.CLIENT_SOFTWARE_NAME.name, self.software_name.encode()),
            (L.CLIENT_SOFTWARE_VERSION.name, self.software_version.encode()),
            (L.CLIENT_SOURCE_ADDRESS.name, b"10.0.0.7"),
            (L.CLIENT_SOURCE_PORT.name, b"40000"),
            (L.PRINCIPAL.name, self.principal.encode()),
            (L.BROKER_ID.name, self.broker_id.encode()),
            (L.TERMINATING.name, b"true" if terminating else b"false"),
            (L.PUSH_INTERVAL_MS.name, b"10000"),
        ]
        return TelemetryRecord(self.instance_id.encode(), value, headers)
