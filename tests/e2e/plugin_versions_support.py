"""The broker plugin on every Kafka release it supports: one broker per release, real clients, the real receiver.

Not a test module: tests/e2e/test_plugin_versions_e2e.py asserts on what `run_release` and
`run_wrong_class` record. Each run is self-contained: a KRaft broker of the release (dev/stack/kafka_broker.py,
jars cached by `make stack-install`) on free loopback ports in a directory of its own, with the plugin
pointed at a `kct receiver` process that writes to a topic on that same broker. `MatrixRunner` runs them
two at a time (a 2-core machine) in the order the tests ask, so a test waits only for its own broker while
the next one starts.

    run_release: broker with the release's plugin class -> CLIENT_METRICS subscription through
                 kct.kafka (the operator's admin port) -> a librdkafka producer and consumer (confluent-kafka)
                 and a Java producer (the release's own kafka-clients) push every second -> plugin ->
                 receiver -> topic, read back: pushes per client and the broker labels on them.
    run_wrong_class: the 4.2+ class on a broker without KIP-1217: the broker must stop at start-up.
    run_load: a class on a broker, no clients: does it load (the 3.7+ class on 4.2+ brokers).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from helpers import free_port, stop_process, wait_for_client_metrics
from waiting import eventually

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev" / "stack"))
import _proc  # noqa: E402  (dev/stack is not a package)
import kafka_broker  # noqa: E402
from kafka_versions import EXPORTER_CLASS, MATRIX, RECEIVER_CLASS, KafkaRelease  # noqa: E402

__all__ = ["EXPORTER_CLASS", "JAVA_CLIENT", "MATRIX", "RECEIVER_CLASS", "REPO", "TOKEN", "ClientPushes",
           "KafkaRelease", "LoadRun", "MatrixRunner", "ReleaseRun", "WrongClassRun", "compile_java_producer",
           "create_topic", "kafka_broker", "receiver", "run_load", "run_release", "run_wrong_class", "running_broker",
           "subscribe"]

# Small heap and the C1 compiler only: a broker that serves a handful of clients for seconds starts in
# about half the time (C2's compile threads compete for the 2 cores during start-up).
QUICK_JVM = ("-Xms64m", "-Xmx256m", "-XX:TieredStopAtLevel=1")
READY_TIMEOUT_S = 120.0
INTERVAL_MS = 1000
PUSHES_WANTED = 2  # non-terminating pushes per client at the receiver before the clients close
JAVA_CLIENT = "java"
_BROKER = "kafka"
TOKEN = "matrix-token"
_JAVA_PRODUCER = Path(__file__).with_name("java") / "TelemetryProducer.java"


@dataclass
class ClientPushes:
    """What the receiver's topic holds of one client: its records' headers, in order."""

    client_id: str
    records: list[dict[str, str]] = field(default_factory=list)

    def labels_on_every_push(self) -> set[str]:
        if not self.records:
            return set()
        return set.intersection(*(set(r) for r in self.records))


@dataclass
class LoadRun:
    """A broker of one release started with one plugin class: what its log says it loaded."""

    release: KafkaRelease
    plugin_class: str
    broker_log: Path
    apis: set[int] = field(default_factory=set)
    class_configured: bool = False
    forwarder_started: bool = False
    wall_s: float = 0.0


@dataclass
class ReleaseRun(LoadRun):
    """A LoadRun whose clients pushed through the plugin to the receiver."""

    clients: dict[str, ClientPushes] = field(default_factory=dict)  # by client kind
    consumed: int = 0
    keys_match_instance_ids: bool = False
    ready_s: float = 0.0
    error: str | None = None


@dataclass
class WrongClassRun:
    release: KafkaRelease
    broker_log: Path
    exited: bool = False
    log_text: str = ""
    wall_s: float = 0.0


def _fresh_dir(root: Path, name: str) -> Path:
    path = root / name
    path.mkdir(parents=True, exist_ok=False)
    return path


def _broker_started(state: Path, port: int, log: Path, deadline: float) -> None:
    """Wait until the broker answers; fail naming the release's log tail if it died or took too long."""

    def answers_or_died() -> bool:
        return kafka_broker.answers(kafka_broker.HOST, port) or not _proc.is_running(state, _BROKER)

    with contextlib.suppress(pytest.fail.Exception):
        eventually(answers_or_died, timeout=max(0.0, deadline - time.monotonic()), interval=0.2,
                   what=f"the broker on port {port} answering")
    if kafka_broker.answers(kafka_broker.HOST, port):
        return
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:]) if log.exists() else "(no log)"
    raise AssertionError(f"broker on port {port} not ready (alive: {_proc.is_running(state, _BROKER)}):\n{tail}")


@contextlib.contextmanager
def _broker(state: Path, release: KafkaRelease, endpoint: str, plugin_class: str,
            token_file: Path | None, plugin_tls: kafka_broker.PluginTls | None = None) -> Iterator[tuple[str, Path]]:
    port, controller_port = free_port(), free_port()
    log = kafka_broker.start(state, endpoint, token_file=token_file, name=_BROKER, port=port,
                             controller_port=controller_port, version=release.version,
                             plugin_class=plugin_class, jvm=QUICK_JVM, plugin_tls=plugin_tls)
    try:
        yield f"{kafka_broker.HOST}:{port}", log
    finally:
        _proc.stop_daemon(state, _BROKER, timeout=30)


@contextlib.contextmanager
def running_broker(workdir: Path, release: KafkaRelease, endpoint: str, plugin_class: str,
                   token_file: Path | None, plugin_tls: kafka_broker.PluginTls | None = None) -> Iterator[str]:
    """A broker of `release` with `plugin_class`, answering when its bootstrap address is yielded; stopped
    on exit (for tests that need one broker, as tests/e2e/test_client_matrix_e2e.py). `plugin_tls`: the
    plugin's CA and client certificate files (tests/e2e/test_plugin_mtls_e2e.py)."""
    started = time.monotonic()
    with _broker(workdir, release, endpoint, plugin_class, token_file, plugin_tls) as (bootstrap, log):
        _broker_started(workdir, _host_port(bootstrap)[1], log, started + READY_TIMEOUT_S)
        yield bootstrap


@contextlib.contextmanager
def receiver(workdir: Path, bootstrap: str, topic: str, port: int) -> Iterator[subprocess.Popen[bytes]]:
    """`kct receiver` writing to `topic`, expecting the plugin's token; stopped (SIGTERM) on exit."""
    config = {
        "listen": {"host": "127.0.0.1", "port": port},
        "auth": {"bearerTokenEnv": "KCT_RECEIVER_TOKEN"},
        "kafka": {"bootstrapServersEnv": "KAFKA_BOOTSTRAP_SERVERS", "topic": topic, "deliveryTimeoutMs": 5000,
                  "readinessIntervalMs": 500, "readinessTimeoutMs": 1000},
        "logging": {"level": "INFO", "format": "json"},
    }
    path = workdir / "receiver.json"
    path.write_text(json.dumps(config))
    log = workdir / "receiver.log"
    env = dict(os.environ, KCT_RECEIVER_TOKEN=TOKEN, KAFKA_BOOTSTRAP_SERVERS=bootstrap,
               PYTHONPATH=str(REPO / "operator"))
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "kct.cli", "receiver", "--config", str(path)],
                                   env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        def ready_or_died() -> bool:
            return process.poll() is not None or _status(f"http://127.0.0.1:{port}/readyz") == 200

        with contextlib.suppress(pytest.fail.Exception):
            eventually(ready_or_died, timeout=60, interval=0.2, what="the receiver ready")
        if process.poll() is not None or _status(f"http://127.0.0.1:{port}/readyz") != 200:
            raise AssertionError(f"receiver not ready:\n{log.read_text()[-3000:]}")
        yield process
    finally:
        stop_process(process)


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


def subscribe(bootstrap: str, name: str, configs: dict[str, str]) -> None:
    """Through the operator's admin port (kct.kafka), as a ClientMetricsSubscription would."""
    from kct.kafka.kafka_python import KafkaPythonClientMetricsAdmin

    admin = KafkaPythonClientMetricsAdmin(bootstrap)
    try:
        admin.alter_subscription(name, configs, ())
    finally:
        admin.close()
    wait_for_client_metrics(bootstrap, name, configs)


class _JavaProducer:
    """The release's own kafka-clients (from the broker's libs) producing until told to stop; it pushes
    telemetry by default (enable.metrics.push, KIP-714) and sends a terminating push when closed."""

    def __init__(self, release: KafkaRelease, classes: Path, bootstrap: str, topic: str, client_id: str,
                 workdir: Path) -> None:
        self.stop_file = workdir / "java-producer.stop"
        self.log = workdir / "java-producer.log"
        classpath = f"{classes}:{kafka_broker.libs_dir(release.version) / '*'}"
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                ["java", "-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", classpath, "TelemetryProducer",
                 bootstrap, topic, client_id, str(self.stop_file)],
                stdout=out, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        self.stop_file.touch()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


def compile_java_producer(out: Path, release: KafkaRelease) -> Path:
    """javac TelemetryProducer.java against the oldest release's kafka-clients (its API is in every later one)."""
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(["javac", "-nowarn", "--release", "17", "-d", str(out), "-cp",
                    str(kafka_broker.libs_dir(release.version) / "*"), str(_JAVA_PRODUCER)],
                   check=True, capture_output=True, timeout=180)
    return out


def run_release(release: KafkaRelease, root: Path, java_classes: Path | None) -> ReleaseRun:
    started = time.monotonic()
    workdir = _fresh_dir(root, f"kafka-{release.version}")
    run_id = uuid.uuid4().hex[:6]
    receiver_port = free_port()
    token_file = workdir / "token"
    token_file.write_text(TOKEN + "\n")
    endpoint = f"http://127.0.0.1:{receiver_port}/v1/metrics"
    plugin_class = release.plugin_class
    with _broker(workdir, release, endpoint, plugin_class, token_file) as (bootstrap, log):
        run = ReleaseRun(release, plugin_class, log)
        _broker_started(workdir, int(bootstrap.rpartition(":")[2]), log, started + READY_TIMEOUT_S)
        run.ready_s = time.monotonic() - started
        run.apis = set(kafka_broker.api_versions(*_host_port(bootstrap)))
        prefix = f"kct-matrix-{run_id}"
        subscribe(bootstrap, prefix, {"metrics": "*", "interval.ms": str(INTERVAL_MS),
                                      "match": f"client_id={prefix}-.*"})
        telemetry_topic = f"{prefix}-telemetry"
        create_topic(bootstrap, telemetry_topic)
        with receiver(workdir, bootstrap, telemetry_topic, receiver_port):
            _push_and_collect(run, release, bootstrap, prefix, telemetry_topic, java_classes, workdir)
        text = log.read_text(errors="replace")
        run.class_configured = f"metric.reporters = [{plugin_class}]" in text
        run.forwarder_started = "kct telemetry forwarder started" in text
    run.wall_s = time.monotonic() - started
    return run


def _host_port(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.rpartition(":")
    return host, int(port)


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).values():
        future.result(timeout=30)


class _TopicReader:
    """The receiver's topic, read as it fills: each record's headers under the client it names."""

    def __init__(self, bootstrap: str, topic: str, clients: dict[str, ClientPushes]) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.clients = clients
        self.keys_match: list[bool] = []
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader",
                                  "enable.metrics.push": False, "enable.auto.commit": False})
        self.consumer.assign([TopicPartition(topic, 0, 0)])

    def read(self, timeout: float) -> bool:
        msg = self.consumer.poll(timeout)
        if msg is None or msg.error() is not None:
            return False
        headers = {k: v.decode() for k, v in msg.headers() or []}
        client = self.clients.get(headers.get("client_id", ""))
        if client is not None:
            client.records.append(headers)
            self.keys_match.append(msg.key() == headers.get("client_instance_id", "").encode())
        return True

    def enough(self) -> bool:
        return all(sum(r.get("terminating") == "false" for r in c.records) >= PUSHES_WANTED
                   for c in self.clients.values())

    def drain(self, quiet_s: float) -> None:
        """Read until nothing new came for `quiet_s` (the terminating pushes, what was in flight)."""
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < quiet_s:
            if self.read(0.2):
                quiet_since = time.monotonic()
        self.consumer.close()


def _push_and_collect(run: ReleaseRun, release: KafkaRelease, bootstrap: str, prefix: str, telemetry_topic: str,
                      java_classes: Path | None, workdir: Path) -> None:
    """Clients run until each has PUSHES_WANTED pushes in the receiver's topic (60 s at most), then close;
    the topic is read until nothing new came for 5 s."""
    from confluent_kafka import Consumer, Producer

    data_topic = f"{prefix}-data"
    ids = {"librdkafka-producer": f"{prefix}-producer", "librdkafka-consumer": f"{prefix}-consumer"}
    if java_classes is not None:
        ids[JAVA_CLIENT] = f"{prefix}-java"
    run.clients = {kind: ClientPushes(cid) for kind, cid in ids.items()}
    reader = _TopicReader(bootstrap, telemetry_topic, {c.client_id: c for c in run.clients.values()})
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": ids["librdkafka-producer"]})
    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": ids["librdkafka-consumer"],
                         "group.id": f"{prefix}-group", "auto.offset.reset": "earliest"})
    consumer.subscribe([data_topic])
    java = (_JavaProducer(release, java_classes, bootstrap, data_topic, ids[JAVA_CLIENT], workdir)
            if java_classes is not None else None)
    try:
        deadline = time.monotonic() + 60
        while not reader.enough() and time.monotonic() < deadline:
            producer.produce(data_topic, b"m")
            producer.poll(0)
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                run.consumed += 1
            reader.read(0.1)
        producer.flush(10)
    finally:
        if java is not None:
            java.stop()
        producer.close()
        consumer.close()
    reader.drain(quiet_s=5.0)
    run.keys_match_instance_ids = bool(reader.keys_match) and all(reader.keys_match)


def run_load(release: KafkaRelease, root: Path, plugin_class: str) -> LoadRun:
    """A broker with `plugin_class`: started, asked what it advertises, stopped (no clients)."""
    started = time.monotonic()
    workdir = _fresh_dir(root, f"kafka-{release.version}-{plugin_class.rpartition('.')[2]}")
    with _broker(workdir, release, "http://127.0.0.1:9/v1/metrics", plugin_class, None) as (bootstrap, log):
        run = LoadRun(release, plugin_class, log)
        _broker_started(workdir, int(bootstrap.rpartition(":")[2]), log, started + READY_TIMEOUT_S)
        run.apis = set(kafka_broker.api_versions(*_host_port(bootstrap)))
        text = log.read_text(errors="replace")
        run.class_configured = f"metric.reporters = [{plugin_class}]" in text
        run.forwarder_started = "kct telemetry forwarder started" in text
    run.wall_s = time.monotonic() - started
    return run


def run_wrong_class(release: KafkaRelease, root: Path) -> WrongClassRun:
    """The 4.2+ class on a release without its interface: the broker must stop during start-up."""
    started = time.monotonic()
    workdir = _fresh_dir(root, f"kafka-{release.version}-wrong-class")
    with _broker(workdir, release, "http://127.0.0.1:9/v1/metrics", EXPORTER_CLASS, None) as (_bootstrap, log):
        run = WrongClassRun(release, log)
        # A broker that keeps running is this run's finding (the test asserts on `exited`), not an error here.
        with contextlib.suppress(pytest.fail.Exception):
            eventually(lambda: not _proc.is_running(workdir, _BROKER), interval=0.2,
                       timeout=max(0.0, started + READY_TIMEOUT_S - time.monotonic()),
                       what=f"Kafka {release.version} stopping at start-up")
        run.exited = not _proc.is_running(workdir, _BROKER)
        run.log_text = log.read_text(errors="replace")
    run.wall_s = time.monotonic() - started
    return run


class MatrixRunner:
    """Runs the jobs two at a time, in the order submitted; `result` waits for one."""

    def __init__(self, workers: int = 2) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kafka-matrix")
        self._futures: dict[str, Future[Any]] = {}
        self._lock = threading.Lock()
        self.started = time.monotonic()

    def submit(self, key: str, job: Callable[[], Any]) -> None:
        with self._lock:
            if key not in self._futures:
                self._futures[key] = self._pool.submit(job)

    def result(self, key: str, timeout: float) -> Any:
        return self._futures[key].result(timeout=timeout)

    def submitted(self) -> list[str]:
        with self._lock:
            return list(self._futures)

    def outcome(self, key: str) -> Any:
        """The job's result, or the exception it raised (for the report)."""
        future = self._futures[key]
        if future.cancelled():
            return "cancelled"
        error = future.exception()
        return error if error is not None else future.result()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
