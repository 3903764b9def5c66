"""KIP-714 client libraries against one broker: what each pushes, through the real receiver and aggregation.

Not a test module: tests/e2e/test_client_matrix_e2e.py asserts on what `run_client_matrix` records. One
KRaft broker of the newest release of kafka_versions.MATRIX, with our plugin pointed at a `kct receiver`
process that writes to a topic on that broker (tests/e2e/plugin_versions_support.py starts both); every
library of dev/stack/kafka_clients.CLIENTS runs as a process of its own, all at once, each with a
CLIENT_METRICS subscription of its own (all metrics, every second) matching only its client ids:

    librdkafka <v>: tests/e2e/clients/librdkafka_client.py in confluent-kafka <v>'s virtualenv, a producer
                    and a consumer
    java <v>:       tests/e2e/java/TelemetryProducer.java on kafka-clients <v> (the cached broker's jars)

Each library writes to a data topic of its own, so the records it produced are that topic's end offset. The
receiver's topic is read back until every client has three pushes; the clients stop producing and flush, a
Java producer stays open until a push counts every record it produced (its terminating push is best effort),
and the topic is read until the librdkafka terminating pushes are in. Each record's OTLP payload is decoded
here (opentelemetry-proto, independently of the product's decoders). Then the product's batch aggregation
(`kct aggregate`, local Spark) runs over the topic and its client_metrics rows are kept.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aggregation_support import read_table, run_aggregation, write_config
from helpers import free_port
from plugin_versions_support import (
    MATRIX,
    REPO,
    TOKEN,
    KafkaRelease,
    compile_java_producer,
    create_topic,
    kafka_broker,
    receiver,
    running_broker,
    subscribe,
)
from telemetry_probe import get_telemetry_subscription
from waiting import eventually

sys.path.insert(0, str(REPO / "dev" / "stack"))
from kafka_clients import CLIENTS, ClientLibrary, python_of  # dev/stack is not a package

__all__ = ["BROKER", "CLIENTS", "INTERVAL_MS", "LIVE_PUSHES", "NO_TERMINATING_PUSH", "RECORDS_SENT",
           "TERMINATING_PUSH_BEST_EFFORT", "ClientLibrary", "ClientMatrixRun", "ClientRun",
           "MetricSeen", "missing_libraries", "run_client_matrix"]

BROKER: KafkaRelease = MATRIX[-1]
# 2 s: half the pushes of the version matrix's 1 s for the same number of windows per client, on 2 shared cores.
INTERVAL_MS = 2000
LIVE_PUSHES = 3  # non-terminating pushes per client at the receiver before the clients are stopped
PUSH_TIMEOUT_S = 60.0
# Kafka 3.7/3.8's Java producer closes its metrics reporters before it asks the telemetry reporter for the
# terminating push, so it sends none (KAFKA-17731, fixed in 3.9.1 and 4.0).
NO_TERMINATING_PUSH: frozenset[str] = frozenset({"java-3.7.2"})
# Since then the Java client sends it only if its I/O thread runs once more while closing (best effort), so
# the test waits for the librdkafka ones only.
TERMINATING_PUSH_BEST_EFFORT: frozenset[str] = frozenset({"java"})
RECORDS_SENT = "org.apache.kafka.producer.record.send.total"  # a Java producer's count of records sent
_LIBRDKAFKA_CLIENT = Path(__file__).with_name("clients") / "librdkafka_client.py"
_TEMPORALITY = {1: "delta", 2: "cumulative"}


@dataclass
class MetricSeen:
    """One metric as a client pushed it: its OTLP type, its sums' temporality, and each sum point as
    (attributes, start time, time, value), in push order."""

    name: str
    kind: str  # gauge, sum, histogram, ...
    temporality: str | None = None
    sum_points: list[tuple[str, int, int, float]] = field(default_factory=list)

    def expected_delta(self) -> float:
        """What the client counted while it ran, from its own points: a delta sum's points add up; a
        cumulative sum's last point per series is its total (every series here started with its client)."""
        if self.temporality == "delta":
            return sum(p[3] for p in self.sum_points)
        last: dict[str, float] = {}
        for attrs, _start, _time, value in self.sum_points:
            last[attrs] = value
        return sum(last.values())


@dataclass
class ClientRun:
    """One client (a library's producer or consumer): its records in the receiver's topic and what they held."""

    library: ClientLibrary
    role: str
    client_id: str
    headers: list[dict[str, str]] = field(default_factory=list)
    keys: list[bytes] = field(default_factory=list)
    written_ms: list[int] = field(default_factory=list)  # each record's timestamp (the receiver's produce time)
    pushed_ns: list[int] = field(default_factory=list)  # each push's newest data point time (the client's clock)
    metrics: dict[str, MetricSeen] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.library.name}-{self.role}"

    def counted(self, metric: str) -> float:
        """What the pushes so far say of a counter (MetricSeen.expected_delta); 0 before it appears."""
        seen = self.metrics.get(metric)
        return seen.expected_delta() if seen is not None else 0.0

    def live_pushes(self) -> int:
        return sum(h.get("terminating") == "false" for h in self.headers)

    def terminated(self) -> bool:
        return any(h.get("terminating") == "true" for h in self.headers)

    def add(self, headers: dict[str, str], key: bytes, value: bytes, written_ms: int) -> None:
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

        self.written_ms.append(written_ms)
        self.headers.append(headers)
        self.keys.append(key)
        request = ExportMetricsServiceRequest.FromString(value)
        newest = 0
        for resource in request.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    newest = max(newest, self._add_metric(metric))
        self.pushed_ns.append(newest)

    def terminating_push_is_newest(self) -> bool:
        """Whether the terminating push carries the newest data (the topic's order may differ: a push the
        receiver paced is sent again after the next one)."""
        flags = [h.get("terminating") == "true" for h in self.headers]
        return flags.count(True) == 1 and self.pushed_ns[flags.index(True)] == max(self.pushed_ns)

    def _add_metric(self, metric: Any) -> int:
        """Record one metric of a push; returns its newest data point's time."""
        kind = metric.WhichOneof("data") or "none"
        seen = self.metrics.setdefault(metric.name, MetricSeen(metric.name, kind))
        points = getattr(metric, kind).data_points if kind != "none" else []
        newest = max((int(p.time_unix_nano) for p in points), default=0)
        if kind != "sum":
            return newest
        seen.temporality = _TEMPORALITY.get(metric.sum.aggregation_temporality, "unspecified")
        for point in metric.sum.data_points:
            attrs = ",".join(sorted(f"{a.key}={a.value}" for a in point.attributes))
            value = point.as_double if point.WhichOneof("value") == "as_double" else float(point.as_int)
            seen.sum_points.append((attrs, point.start_time_unix_nano, point.time_unix_nano, value))
        return newest


@dataclass
class ClientMatrixRun:
    broker: KafkaRelease
    clients: dict[str, ClientRun] = field(default_factory=dict)  # by ClientRun.key
    exit_codes: dict[str, int | None] = field(default_factory=dict)  # by library name
    reports: dict[str, dict[str, Any]] = field(default_factory=dict)  # the librdkafka clients' result files
    produced: dict[str, int] = field(default_factory=dict)  # records in each library's data topic
    broker_asks_delta: bool = False  # DeltaTemporality in the broker's GetTelemetrySubscriptions answer
    topic_records: int = 0
    accepted_pushes: float = 0.0  # the receiver's 200s to POST /v1/metrics
    other_statuses: dict[str, float] = field(default_factory=dict)
    plugin: dict[str, float] = field(default_factory=dict)  # the plugin's own counters (JMX), after the pushes
    client_metrics: list[dict[str, Any]] = field(default_factory=list)  # the aggregation's rows
    ready_s: float = 0.0
    pushes_s: float = 0.0
    aggregation_s: float = 0.0
    wall_s: float = 0.0


def missing_libraries() -> list[str]:
    """The libraries of CLIENTS that `make stack-install` has not cached."""
    missing = []
    for library in CLIENTS:
        ready = (python_of(library).exists() and (python_of(library).parents[1] / ".complete").exists()
                 if library.kind == "librdkafka" else (kafka_broker.libs_dir(library.version) / ".complete").exists())
        if not ready:
            missing.append(library.name)
    if not (kafka_broker.libs_dir(BROKER.version) / ".complete").exists():
        missing.append(f"Kafka {BROKER.version} (the broker)")
    return missing


def _roles(library: ClientLibrary) -> tuple[str, ...]:
    return ("producer", "consumer") if library.kind == "librdkafka" else ("producer",)


class _Clients:
    """The client processes, one per library. Each produces until its stop file exists; a librdkafka process
    then closes by itself, a Java one flushes, says so in `<stop>.flushed` and closes when its close file exists."""

    def __init__(self, root: Path, bootstrap: str, prefix: str, java_classes: Path) -> None:
        self.root = root
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        for library in CLIENTS:
            name = library.name
            topic, client_prefix = f"{prefix}-{name}-data", f"{prefix}-{name}"
            if library.kind == "librdkafka":
                argv = [str(python_of(library)), str(_LIBRDKAFKA_CLIENT), bootstrap, topic, client_prefix,
                        str(self._file(name, "stop")), str(self._file(name, "json"))]
            else:
                classpath = f"{java_classes}:{kafka_broker.libs_dir(library.version) / '*'}"
                argv = ["java", "-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", classpath, "TelemetryProducer",
                        bootstrap, topic, f"{client_prefix}-producer", str(self._file(name, "stop")),
                        str(self._file(name, "close"))]
            with self._file(name, "log").open("wb") as out:
                self.processes[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

    def _file(self, name: str, suffix: str) -> Path:
        return self.root / f"{name}.{suffix}"

    def stop_producing(self) -> None:
        for name in self.processes:
            self._file(name, "stop").touch()

    def flushed(self, library: ClientLibrary) -> bool:
        return self._file(library.name, "stop.flushed").exists() or self.processes[library.name].poll() is not None

    def close(self) -> dict[str, int | None]:
        for name in self.processes:
            self._file(name, "close").touch()
        with contextlib.suppress(pytest.fail.Exception):
            eventually(lambda: all(p.poll() is not None for p in self.processes.values()), timeout=60,
                       interval=0.2, what="every client process closed")
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
        return {name: p.returncode for name, p in self.processes.items()}

    def report(self, library: ClientLibrary) -> dict[str, Any]:
        path = self._file(library.name, "json")
        return dict(json.loads(path.read_text())) if path.exists() else {}

    def log_tail(self, name: str) -> str:
        return self._file(name, "log").read_text(errors="replace")[-2000:]


class _TopicReader:
    """The receiver's topic, read as it fills: each record under the client its `client_id` header names."""

    def __init__(self, bootstrap: str, topic: str, clients: dict[str, ClientRun]) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.by_id = {c.client_id: c for c in clients.values()}
        self.records = 0
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader",
                                  "enable.metrics.push": False, "enable.auto.commit": False})
        self.partition = TopicPartition(topic, 0, 0)
        self.consumer.assign([self.partition])

    def read_for(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            msg = self.consumer.poll(0.1)
            if msg is None or msg.error() is not None:
                continue
            self.records += 1
            headers = {k: v.decode() for k, v in msg.headers() or []}
            client = self.by_id.get(headers.get("client_id", ""))
            if client is not None:
                client.add(headers, msg.key() or b"", msg.value() or b"", msg.timestamp()[1])

    def end_offset(self) -> int:
        _low, high = self.consumer.get_watermark_offsets(self.partition, timeout=10)
        return int(high)

    def close(self) -> None:
        self.consumer.close()


def _until(reader: _TopicReader, done: Any, what: str, timeout: float = PUSH_TIMEOUT_S) -> None:
    try:
        eventually(lambda: (reader.read_for(0.3), done())[1], timeout=timeout, interval=0.0, what=what)
    except pytest.fail.Exception as timed_out:
        seen = {c.key: f"{c.live_pushes()} pushes{', terminated' if c.terminated() else ''}"
                for c in reader.by_id.values()}
        raise AssertionError(f"{timed_out}; by client: {seen}") from None


def _receiver_statuses(port: int) -> dict[str, float]:
    """The receiver's POST /v1/metrics responses by status code, from its own /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    statuses: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (sample.name == "http_server_request_duration_seconds_count"
                    and sample.labels.get("http_route") == "/v1/metrics"):
                code = sample.labels["http_response_status_code"]
                statuses[code] = statuses.get(code, 0.0) + sample.value
    return statuses


def _end_offset(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-count", "enable.metrics.push": False})
    try:
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return int(high)
    finally:
        consumer.close()


@contextlib.contextmanager
def _phase(run: ClientMatrixRun, name: str) -> Iterator[None]:
    started = time.monotonic()
    yield
    setattr(run, f"{name}_s", time.monotonic() - started)


def run_client_matrix(root: Path, spark_out: Path) -> ClientMatrixRun:
    kafka_broker.install(BROKER.version)  # rebuilds the plugin jar when its sources changed; the jars are cached
    started = time.monotonic()
    run = ClientMatrixRun(BROKER)
    java_classes = compile_java_producer(root / "java-classes", MATRIX[0])
    prefix = f"kct-clients-{uuid.uuid4().hex[:6]}"
    for library in CLIENTS:
        for role in _roles(library):
            client = ClientRun(library, role, f"{prefix}-{library.name}-{role}")
            run.clients[client.key] = client
    receiver_port = free_port()
    token_file = root / "token"
    token_file.write_text(TOKEN + "\n")
    endpoint = f"http://127.0.0.1:{receiver_port}/v1/metrics"
    with running_broker(root, BROKER, endpoint, BROKER.plugin_class, token_file) as bootstrap:
        run.ready_s = time.monotonic() - started
        telemetry_topic = f"{prefix}-telemetry"
        create_topic(bootstrap, telemetry_topic)
        for library in CLIENTS:  # one subscription per library, matching its clients only
            subscribe(bootstrap, f"{prefix}-{library.name}", {
                "metrics": "*", "interval.ms": str(INTERVAL_MS), "match": f"client_id={prefix}-{library.name}-.*"})
        served = get_telemetry_subscription(bootstrap, f"{prefix}-{CLIENTS[0].name}-probe")
        run.broker_asks_delta = served.delta_temporality
        with _phase(run, "pushes"), receiver(root, bootstrap, telemetry_topic, receiver_port):
            _push(run, root, bootstrap, prefix, java_classes, telemetry_topic, receiver_port)
        run.plugin = kafka_broker.plugin_counters(root)
        with _phase(run, "aggregation"):
            config = write_config(root / "job.yaml", telemetry_topic, spark_out, mode="batch")
            run_aggregation(bootstrap, config, timeout=300)
            run.client_metrics = read_table(spark_out, "client_metrics")
    run.wall_s = time.monotonic() - started
    return run


def _push(run: ClientMatrixRun, root: Path, bootstrap: str, prefix: str, java_classes: Path, topic: str,
          receiver_port: int) -> None:
    """Clients run until each has LIVE_PUSHES pushes in the topic, then stop producing. Each library's data
    topic is counted once it has flushed; a Java producer stays open until a push counts every record it
    produced (its terminating push is best effort), the librdkafka ones close at once. The topic is read
    until the librdkafka terminating pushes and every record are in, and the receiver's 200s are counted."""
    reader = _TopicReader(bootstrap, topic, run.clients)
    clients = _Clients(root, bootstrap, prefix, java_classes)
    try:
        _until(reader, lambda: all(c.live_pushes() >= LIVE_PUSHES for c in run.clients.values()),
               f"{LIVE_PUSHES} pushes of every client in the receiver's topic")
        clients.stop_producing()
        eventually(lambda: all(clients.flushed(lib) for lib in CLIENTS), timeout=30, interval=0.2,
                   what="every client done producing")
        for library in CLIENTS:
            run.produced[library.name] = _end_offset(bootstrap, f"{prefix}-{library.name}-data")
        java = [c for c in run.clients.values() if c.library.kind == "java"]
        _until(reader, lambda: all(c.counted(RECORDS_SENT) >= run.produced[c.library.name] for c in java),
               "a push of each Java producer counting every record it produced", timeout=30)
    finally:
        run.exit_codes = clients.close()
    failed = {name: clients.log_tail(name) for name, code in run.exit_codes.items() if code != 0}
    assert not failed, f"client processes failed: {failed}"
    run.reports = {lib.name: clients.report(lib) for lib in CLIENTS if lib.kind == "librdkafka"}
    closing = [c for c in run.clients.values() if c.library.kind not in TERMINATING_PUSH_BEST_EFFORT]
    _until(reader, lambda: all(c.terminated() for c in closing), "the terminating pushes in the receiver's topic",
           timeout=30)
    _until(reader, lambda: reader.records >= reader.end_offset(), "every record of the topic read", timeout=30)
    run.topic_records = reader.records
    reader.close()

    def counted() -> dict[str, float]:
        statuses = _receiver_statuses(receiver_port)
        return statuses if statuses.get("200", 0.0) >= run.topic_records else {}

    # The response is counted as it is sent, a moment after the record it acknowledges is in the topic.
    with contextlib.suppress(pytest.fail.Exception):
        eventually(counted, timeout=10, interval=0.2, what="the receiver's 200s counted")
    statuses = _receiver_statuses(receiver_port)
    run.accepted_pushes = statuses.pop("200", 0.0)
    run.other_statuses = statuses
