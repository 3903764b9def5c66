"""Token rotation without restarts, end to end: real librdkafka clients push KIP-714 telemetry through the real
broker and our plugin to a `kct receiver` process, while the push token is rotated twice.

The receiver reads its token from a directory laid out like a mounted Secret (kubelet swaps a `..data`
symlink); the broker plugin reads the stack's token file (`kct.telemetry.token.file`, re-read when it
changes). Each rotation happens as kubelet would deliver it when the receiver pod's copy is updated first:
the receiver's file changes, then, seconds later, the plugin's. Throughout, no push may be refused: the
receiver accepts the previous token for its grace period. Afterwards the retired token is refused.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from helpers import eventually, wait_for_client_metrics

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
GRACE_S = 20
CLIENTS = 4


class SecretVolume:
    """`token -> ..data/token`, `..data -> ..v<N>`: how kubelet lays out and atomically updates a Secret."""

    def __init__(self, root: Path, token: str) -> None:
        self.root = root
        self.version = 0
        root.mkdir(parents=True)
        self.write(token)
        (root / "token").symlink_to(Path("..data") / "token")

    @property
    def path(self) -> Path:
        return self.root / "token"

    def write(self, token: str) -> None:
        self.version += 1
        version = self.root / f"..v{self.version}"
        version.mkdir()
        (version / "token").write_text(token + "\n")
        (self.root / "..data_tmp").symlink_to(version.name)
        os.replace(self.root / "..data_tmp", self.root / "..data")


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.chmod(0o600)
    os.replace(tmp, path)


def _stack_token_file() -> Path:
    for line in (REPO / "build" / "stack.env").read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "KCT_RECEIVER_TOKEN_FILE":
            return Path(value.strip())
    raise AssertionError("build/stack.env has no KCT_RECEIVER_TOKEN_FILE")


def _post(url: str, token: str) -> int:
    """A direct push (not through the plugin) with `token`; the HTTP status."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    req = ExportMetricsServiceRequest()
    metric = req.resource_metrics.add().scope_metrics.add().metrics.add()
    metric.name = "kct.e2e.rotation.probe"
    metric.gauge.data_points.add().as_int = 1
    request = urllib.request.Request(url, data=req.SerializeToString(), method="POST", headers={
        "Content-Type": "application/x-protobuf", "Authorization": f"Bearer {token}",
        "kct-client-instance-id": f"probe-{uuid.uuid4().hex[:8]}"})
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _rejections(metrics_url: str) -> dict[str, float]:
    with urllib.request.urlopen(metrics_url, timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("kct_receiver_rejections_total{"):
            labels, value = line.rsplit(" ", 1)
            reason = labels.split('reason="', 1)[1].split('"', 1)[0]
            out[reason] = out.get(reason, 0.0) + float(value)
    return out


def _rotation_times(log_path: Path) -> list[float]:
    """When the receiver logged "bearer token rotated", as epoch seconds (its JSON lines carry UTC, to the ms)."""
    times = []
    for line in log_path.read_text().splitlines():
        if not line.startswith("{"):
            continue
        entry = json.loads(line)
        if entry.get("message") == "bearer token rotated":
            stamp = datetime.strptime(entry["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
            times.append(stamp.timestamp())
    return times


@pytest.fixture
def plugin_token_file(stack: Any) -> Iterator[Path]:
    """The stack's plugin token file, restored to its content afterwards whatever happens."""
    stack.require_local("rotating the broker plugin's token file is only possible on the local stack")
    path = _stack_token_file()
    original = path.read_text()
    yield path
    _write_atomically(path, original)


def test_pushes_through_the_plugin_are_never_refused_across_two_rotations(
    stack: Any, plugin_token_file: Path, tmp_path: Path
) -> None:
    """Given clients pushing every second through the broker plugin to a receiver reading its token from a
    Secret-like file, when the token is rotated twice (receiver's copy first, the plugin's 3 s later), then no
    push is refused (no 401), every client's pushes keep arriving before, between and after the rotations,
    the receiver is not restarted, and once the grace period has passed the retired token is refused."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType

    endpoint = urlparse(stack.telemetry_endpoint)
    assert endpoint.hostname in ("127.0.0.1", "localhost") and endpoint.port is not None, stack.telemetry_endpoint
    token_a = plugin_token_file.read_text().strip()
    token_b = secrets.token_hex(24)
    token_c = secrets.token_hex(24)
    run = uuid.uuid4().hex[:6]
    topic = f"kct-e2e-rotation-{run}"
    topics_admin = AdminClient({"bootstrap.servers": stack.kafka_bootstrap})  # alive until the futures resolve
    for future in topics_admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).values():
        future.result(timeout=30)

    volume = SecretVolume(tmp_path / "token-secret", token_a)
    config = {
        "listen": {"host": "127.0.0.1", "port": endpoint.port},
        "auth": {"bearerTokenFile": str(volume.path), "previousTokenGraceSeconds": GRACE_S},
        "kafka": {"bootstrapServersEnv": "KAFKA_BOOTSTRAP_SERVERS", "topic": topic, "readinessIntervalMs": 500},
        "logging": {"level": "INFO", "format": "json"},
    }
    config_path = tmp_path / "receiver.yaml"
    config_path.write_text(json.dumps(config))
    log_path = tmp_path / "receiver.log"
    receiver = subprocess.Popen([sys.executable, "-m", "kct.cli", "receiver", "--config", str(config_path)],
                                env=dict(stack.env(), PYTHONPATH=str(REPO / "operator")),
                                stdout=log_path.open("wb"), stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{endpoint.port}"

    def ready() -> bool:
        assert receiver.poll() is None, log_path.read_text()
        try:
            with urllib.request.urlopen(f"{base}/readyz", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    subscription = f"kct-e2e-rotation-{run}"
    wanted = {"metrics": "*", "interval.ms": "1000", "match": f"client_id=rot-{run}-.*"}
    admin = KafkaAdminClient(bootstrap_servers=stack.kafka_bootstrap)
    admin.alter_configs([ConfigResource(ConfigResourceType.CLIENT_METRICS, subscription, configs=wanted)],
                        incremental=True)
    stop = threading.Event()
    marks: dict[str, float] = {}
    try:
        eventually(ready, timeout=60, what="the receiver to be ready")
        wait_for_client_metrics(stack.kafka_bootstrap, subscription, wanted)
        producers = [Producer({"bootstrap.servers": stack.kafka_bootstrap, "client.id": f"rot-{run}-{i}"})
                     for i in range(CLIENTS)]

        def produce() -> None:
            while not stop.is_set():
                for producer in producers:
                    producer.produce(f"{topic}-data", b"x")
                    producer.poll(0)
                time.sleep(0.25)  # duration: the clients' produce rate (four rounds a second)

        clients = threading.Thread(target=produce, daemon=True)
        clients.start()
        time.sleep(10)  # duration: a phase of pushes with token A (the check looks at its last 8 s)
        # Rotation 1: A -> B. The receiver's copy of the Secret is updated first, the broker's 3 s later.
        marks["rotation1"] = time.time()
        volume.write(token_b)
        time.sleep(3)  # duration: kubelet updates the broker's copy of the Secret seconds after the receiver's
        _write_atomically(plugin_token_file, token_b + "\n")
        time.sleep(10)  # duration: a phase of pushes with token B
        # Rotation 2: B -> C, the same way.
        marks["rotation2"] = time.time()
        volume.write(token_c)
        time.sleep(3)  # duration: the same lag between the receiver's copy and the broker's
        _write_atomically(plugin_token_file, token_c + "\n")
        time.sleep(10)  # duration: a phase of pushes with token C
        marks["end"] = time.time()
        stop.set()
        clients.join(10)
        for producer in producers:
            producer.flush(10)
        refused_during_load = _rejections(f"{base}/metrics").get("unauthenticated", 0.0)

        # After the grace period the retired tokens are refused, the current one accepted. The grace period
        # runs from the moment the receiver noticed the change (logged), which is up to its check interval
        # (1 s) plus the gap to the next push after the file changed.
        noticed = _rotation_times(log_path)
        assert len(noticed) == 2, log_path.read_text()[-3000:]
        assert marks["rotation2"] <= noticed[1] + 0.01 <= marks["rotation2"] + 5, (marks, noticed)
        time.sleep(max(0.0, noticed[1] + GRACE_S + 0.5 - time.time()))  # duration: the grace period must pass
        probes = {"A": _post(f"{base}/v1/metrics", token_a), "B": _post(f"{base}/v1/metrics", token_b),
                  "C": _post(f"{base}/v1/metrics", token_c)}
        assert receiver.poll() is None, "the receiver exited"
    finally:
        stop.set()
        admin.alter_configs([ConfigResource(ConfigResourceType.CLIENT_METRICS, subscription, configs={
            "metrics": None, "interval.ms": None, "match": None})], incremental=True)
        admin.close()
        receiver.send_signal(signal.SIGTERM)
        try:
            receiver.wait(timeout=30)
        except subprocess.TimeoutExpired:
            receiver.kill()

    consumer = Consumer({"bootstrap.servers": stack.kafka_bootstrap, "group.id": f"kct-e2e-{run}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "enable.metrics.push": False})
    consumer.subscribe([topic])
    arrivals: dict[str, list[float]] = {}
    deadline, last_new = time.monotonic() + 60, time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - last_new < 5:
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            continue
        last_new = time.monotonic()
        headers = {k: v.decode() for k, v in msg.headers() or []}
        client = headers.get("client_id", "")
        if client.startswith(f"rot-{run}-"):
            arrivals.setdefault(client, []).append(int(headers["kct.received_ms"]) / 1000)
    consumer.close()

    log = log_path.read_text()
    assert log.count("bearer token rotated") == 2, log[-3000:]
    assert refused_during_load == 0, f"{refused_during_load} pushes refused with 401 during the rotations"
    assert sorted(arrivals) == [f"rot-{run}-{i}" for i in range(CLIENTS)], sorted(arrivals)
    for client, times in arrivals.items():
        # Each client's pushes keep arriving in each phase: before, between and after the rotations.
        for start, end in ((marks["rotation1"] - 8, marks["rotation1"]),
                           (marks["rotation1"] + 1, marks["rotation2"]),
                           (marks["rotation2"] + 1, marks["end"])):
            assert any(start <= t <= end for t in times), (client, start, end, times)
    assert probes == {"A": 401, "B": 401, "C": 200}, probes
    print(f"rotation: pushes per client {sorted(len(t) for t in arrivals.values())}, refused 0, probes {probes}")
