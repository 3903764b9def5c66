"""A three-node KRaft cluster with the plugin on every broker, one real receiver, and what its topic holds.

Not a test module: tests/e2e/test_kafka_cluster_e2e.py asserts on it. Everything runs as loopback processes
on free ports (dev/stack/kafka_cluster.py for the nodes, jars cached by `make stack-install`): the newest
release of the version matrix, each broker's plugin pointed at one `kct receiver`, which writes to a topic
of three partitions with three replicas on the same cluster (min.insync.replicas 2, `acks=all`).

- `ClusterUnderTest`: the cluster, the receiver, the topic and a `PushLog` reading it from the start.
- `PushLog`: every record of the receiver's topic as a `Push` (client id, broker id, the receiver's produce
  time, the metric names in the OTLP payload), read by a thread as the topic fills.
- `receiver_statuses`: the receiver's answers to pushes by HTTP status, from its /metrics.
- `plugin_closes`: what the plugin of a stopped broker logged it forwarded and dropped.
- `gaps_s`: the largest gap between a client's consecutive pushes; `duplicates`: a push stored twice.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers import free_port, receiver_process
from waiting import eventually

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev" / "stack"))
import kafka_broker  # noqa: E402  (dev/stack is not a package)
import kafka_cluster  # noqa: E402
from kafka_versions import MATRIX  # noqa: E402

__all__ = ["RELEASE", "ClusterUnderTest", "Push", "PushLog", "cluster_under_test", "duplicates", "gaps_s",
           "plugin_closes", "receiver_statuses"]

RELEASE = MATRIX[-1]  # the newest release the plugin supports
NODES = 3
# Small heap and the C1 compiler only (as the version matrix's brokers): a node starts in about half the time,
# and each restart of the rolling restart is a JVM start on two cores shared with everything else here.
QUICK_JVM = ("-Xms64m", "-Xmx256m", "-XX:TieredStopAtLevel=1")
PARTITIONS = 3
_TOKEN = "cluster-token"
_ROUTE_200 = re.compile(r'^http_server_request_duration_seconds_count\{(?P<labels>[^}]*)\} (?P<value>\S+)$')


@dataclass(frozen=True)
class Push:
    """One record of the receiver's topic: one client push the plugin of broker `broker_id` forwarded."""

    client_id: str
    broker_id: str
    timestamp_ms: int  # the receiver's produce time (CreateTime): when the push was answered, near enough
    terminating: bool
    metrics: frozenset[str]
    digest: str  # of the record's value: the same push stored twice has the same digest


@dataclass
class PushLog:
    """The receiver's topic, read from offset 0 of every partition by a thread of its own."""

    bootstrap: str
    topic: str
    pushes: list[Push] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="push-log", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"{self.topic}-reader",
                             "enable.metrics.push": False, "enable.auto.commit": False})
        consumer.assign([TopicPartition(self.topic, p, 0) for p in range(PARTITIONS)])
        try:
            while not self._stop.is_set():
                for msg in consumer.consume(500, 0.2):
                    if msg.error() is None:
                        push = _push(msg)
                        with self._lock:
                            self.pushes.append(push)
        finally:
            consumer.close()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def snapshot(self, prefix: str = "") -> list[Push]:
        with self._lock:
            return [p for p in self.pushes if p.client_id.startswith(prefix)]


def _push(msg: Any) -> Push:
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    headers = {k: v.decode() for k, v in msg.headers() or []}
    request = ExportMetricsServiceRequest.FromString(msg.value())
    names = frozenset(m.name for rm in request.resource_metrics for sm in rm.scope_metrics for m in sm.metrics)
    return Push(headers.get("client_id", ""), headers.get("broker_id", ""), int(msg.timestamp()[1]),
                headers.get("terminating") == "true", names, hashlib.sha256(msg.value()).hexdigest())


def gaps_s(pushes: Iterable[Push]) -> dict[str, tuple[float, int]]:
    """Per client: the largest time between two consecutive pushes (seconds; 0 with a single push) and the
    receiver's time (ms) of the push that opened it."""
    times: dict[str, list[int]] = {}
    for push in pushes:
        times.setdefault(push.client_id, []).append(push.timestamp_ms)
    out = {}
    for client, stamps in times.items():
        stamps.sort()
        gap, opened = max(((b - a, a) for a, b in itertools.pairwise(stamps)), default=(0, stamps[0]))
        out[client] = (gap / 1000, opened)
    return out


def duplicates(pushes: Iterable[Push]) -> int:
    """Records beyond the first of each distinct push (client and payload)."""
    seen: set[tuple[str, str]] = set()
    extra = 0
    for push in pushes:
        key = (push.client_id, push.digest)
        extra += key in seen
        seen.add(key)
    return extra


_CLOSED = re.compile(r"kct telemetry forwarder closed: (.*) \(dev\.kct")


def plugin_closes(log: Path) -> list[dict[str, int]]:
    """The counts the plugin logged each time its broker closed it, oldest first (a broker's log is appended
    to across restarts); none for a broker killed with SIGKILL."""
    if not log.exists():
        return []
    return [{k: int(v) for k, v in re.findall(r"([\w-]+)=(\d+)", found[1])}
            for found in _CLOSED.finditer(log.read_text(errors="replace"))]


def receiver_statuses(port: int) -> dict[str, float]:
    """The receiver's answers to POST /v1/metrics by status code, from its own /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        found = _ROUTE_200.match(line)
        if found is None:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', found["labels"]))
        if labels.get("http_route") == "/v1/metrics":
            code = labels.get("http_response_status_code", "?")
            out[code] = out.get(code, 0.0) + float(found["value"])
    return out


@dataclass
class ClusterUnderTest:
    cluster: kafka_cluster.Cluster
    receiver_port: int
    topic: str
    log: PushLog
    started_s: float  # wall time to a whole cluster and a ready receiver

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    def topic_records(self) -> int:
        """Records in the receiver's topic: the sum of its partitions' high watermarks (an idempotent,
        non-transactional producer writes no gaps and no control records)."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"{self.topic}-count",
                             "enable.metrics.push": False})
        try:
            return sum(consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10)[1]
                       for p in range(PARTITIONS))
        finally:
            consumer.close()


def _create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, num_partitions=PARTITIONS, replication_factor=NODES, config={"min.insync.replicas": "2"})
    for future in admin.create_topics([new]).values():
        future.result(timeout=60)


@contextlib.contextmanager
def _receiver(workdir: Path, bootstrap: str, topic: str, port: int) -> Iterator[subprocess.Popen[bytes]]:
    """`kct receiver` writing to `topic` on the cluster (all three nodes as bootstrap), expecting the plugin's
    token; its Kafka and push-rate settings are the defaults users get. Stopped with SIGTERM on exit."""
    config = {
        "listen": {"host": "127.0.0.1", "port": port},
        "auth": {"bearerTokenEnv": "KCT_RECEIVER_TOKEN"},
        "kafka": {"bootstrapServers": bootstrap, "topic": topic, "readinessIntervalMs": 500},
        "logging": {"level": "INFO", "format": "json"},
    }
    with receiver_process(config, workdir, dict(os.environ, KCT_RECEIVER_TOKEN=_TOKEN)) as process:
        yield process


@contextlib.contextmanager
def cluster_under_test(workdir: Path) -> Iterator[ClusterUnderTest]:
    """Three nodes of RELEASE with the plugin, whole; the receiver ready; its topic being read."""
    started = time.monotonic()
    receiver_port = free_port()
    token_file = workdir / "token"
    token_file.write_text(_TOKEN + "\n")
    nodes = tuple(kafka_cluster.Node(i, free_port(), free_port()) for i in range(1, NODES + 1))
    cluster = kafka_cluster.Cluster(workdir, nodes, f"http://127.0.0.1:{receiver_port}/v1/metrics",
                                    kafka_broker.new_cluster_id(), version=RELEASE.version, token_file=token_file,
                                    jvm=QUICK_JVM)
    try:
        kafka_cluster.start(cluster)
        eventually(lambda: kafka_cluster.rejoined(cluster), timeout=180, interval=0.5,
                   what=f"three Kafka {RELEASE.version} nodes listing each other (logs: {workdir / 'logs'})")
        topic = f"kct-cluster-telemetry-{receiver_port}"
        _create_topic(cluster.bootstrap, topic)
        with _receiver(workdir, cluster.bootstrap, topic, receiver_port):
            log = PushLog(cluster.bootstrap, topic)
            log.start()
            try:
                yield ClusterUnderTest(cluster, receiver_port, topic, log, time.monotonic() - started)
            finally:
                log.stop()
    finally:
        kafka_cluster.down(cluster)
