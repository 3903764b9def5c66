"""The receiver as a process (`kct receiver --config`) in front of the real Kafka broker of the stack.

- the real OpenTelemetry Python SDK exporter (OTLP/HTTP, protobuf, gzip) -> receiver -> topic;
- the real chain: a librdkafka producer pushing KIP-714 telemetry -> broker -> our plugin -> receiver ->
  topic, records keyed by client instance id with the broker labels in headers;
- Kafka stopped under load: no 200 without a record afterwards, bounded memory, recovery without restart.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from aggregation_support import delete_topics
from helpers import eventually, stop_process, wait_for_client_metrics
from preconditions import missing_precondition
from waiting import eventually_async

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
TOKEN = "e2e-token"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)]).values():
        future.result(timeout=30)


def _topic_exists(bootstrap: str, topic: str) -> bool:
    """Whether the broker lists `topic`; asks for every topic, so the request itself creates none."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    return topic in admin.list_topics(timeout=10).topics


def _read_topic(bootstrap: str, topic: str, *, idle_s: float = 5.0, limit_s: float = 60.0) -> list[Any]:
    """Every record of `topic` (from the beginning), read until nothing new arrives for `idle_s`."""
    from confluent_kafka import Consumer

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"kct-e2e-{uuid.uuid4().hex}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "enable.metrics.push": False,
    })
    consumer.subscribe([topic])
    records: list[Any] = []
    deadline = time.monotonic() + limit_s
    last_new = time.monotonic()
    try:
        while time.monotonic() < deadline and time.monotonic() - last_new < idle_s:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            records.append(msg)
            last_new = time.monotonic()
    finally:
        consumer.close()
    return records


@dataclass
class RunningReceiver:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def status(self, path: str) -> int:
        try:
            with urllib.request.urlopen(f"{self.url}{path}", timeout=2) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except OSError:
            return 0

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0


@pytest.fixture
def run_receiver(stack: Any, tmp_path: Path) -> Iterator[Any]:
    started: list[RunningReceiver] = []

    def start(topic: str, port: int | None = None, token: str | None = TOKEN, **sections: Any) -> RunningReceiver:
        port = port or _free_port()
        config = {
            "listen": {"host": "127.0.0.1", "port": port},
            "auth": {"bearerTokenEnv": "KCT_RECEIVER_TOKEN" if token is not None else None},
            "kafka": {"bootstrapServersEnv": "KAFKA_BOOTSTRAP_SERVERS", "topic": topic,
                      "deliveryTimeoutMs": 5000, "readinessIntervalMs": 500, "readinessTimeoutMs": 1000},
            "logging": {"level": "INFO", "format": "json"},
            **sections,
        }
        path = tmp_path / f"receiver-{port}.yaml"
        path.write_text(json.dumps(config))
        env = dict(stack.env(), KCT_RECEIVER_TOKEN=token or "", PYTHONPATH=str(REPO / "operator"))
        log = tmp_path / f"receiver-{port}.log"
        process = subprocess.Popen(
            [sys.executable, "-m", "kct.cli", "receiver", "--config", str(path)],
            env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        )
        receiver = RunningReceiver(process, port, log)
        started.append(receiver)
        def ready() -> bool:
            assert process.poll() is None, log.read_text()
            return receiver.status("/readyz") == 200

        eventually(ready, timeout=60, interval=0.2, what=f"the receiver on port {port} to be ready")
        return receiver

    yield start
    for receiver in started:
        stop_process(receiver.process)


def test_otel_sdk_exporter_data_arrives_in_the_topic(stack: Any, run_receiver: Any) -> None:
    """Given the receiver in front of the stack's Kafka, when the OpenTelemetry Python SDK exports metrics
    with its OTLP/HTTP exporter (protobuf, gzip), then each export is one record in the topic, keyed by the
    resource's client_instance_id, holding the SDK's metric, without the private host.name, and the
    receiver exits 0 on SIGTERM."""
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource

    topic = f"kct-e2e-sdk-{uuid.uuid4().hex[:8]}"
    _create_topic(stack.kafka_bootstrap, topic)
    receiver = run_receiver(topic)
    instance_id = f"sdk-{uuid.uuid4().hex[:8]}"
    exporter = OTLPMetricExporter(
        endpoint=f"{receiver.url}/v1/metrics", headers={"Authorization": f"Bearer {TOKEN}"},
        compression=Compression.Gzip,
    )
    provider = MeterProvider(
        resource=Resource.create({"service.name": "e2e", "client_instance_id": instance_id, "host.name": "db-7"}),
        metric_readers=[PeriodicExportingMetricReader(exporter, export_interval_millis=500)],
    )
    counter = provider.get_meter("kct.e2e").create_counter("kct.e2e.requests")
    for _ in range(4):
        counter.add(3, {"route": "/orders"})
        time.sleep(0.3)  # duration: the adds spread over several 500 ms export intervals, so several exports
    provider.force_flush()
    provider.shutdown()

    records = _read_topic(stack.kafka_bootstrap, topic)
    assert records, receiver.log.read_text()
    for record in records:
        assert record.key() == instance_id.encode()
        headers = {k: v.decode() for k, v in record.headers()}
        assert headers["kct.content_encoding"] == "gzip"
        assert headers["kct.client_instance_id_source"] == "resource"
        request = ExportMetricsServiceRequest.FromString(record.value())
        keys = [kv.key for kv in request.resource_metrics[0].resource.attributes]
        assert "host.name" not in keys and "service.name" in keys
    names = {m.name for r in records for rm in ExportMetricsServiceRequest.FromString(r.value()).resource_metrics
             for sm in rm.scope_metrics for m in sm.metrics}
    assert "kct.e2e.requests" in names
    receiver.process.send_signal(signal.SIGTERM)
    assert receiver.process.wait(timeout=30) == 0


def _plugin_token(stack: Any) -> str | None:
    """The bearer token the stack's broker plugin sends, if the stack configured one."""
    token = getattr(stack, "receiver_token", None)
    if token:
        return str(token)
    env = stack.env()
    if env.get("KCT_RECEIVER_TOKEN"):
        return str(env["KCT_RECEIVER_TOKEN"])
    token_file = env.get("KCT_RECEIVER_TOKEN_FILE") or getattr(stack, "receiver_token_file", None)
    if token_file and Path(token_file).exists():
        return Path(token_file).read_text().strip()
    return None


def test_real_chain_librdkafka_broker_plugin_receiver_topic(stack: Any, run_receiver: Any) -> None:
    """Given a CLIENT_METRICS subscription (all metrics, 1 s) and the receiver on the stack's telemetry
    endpoint, when a librdkafka producer runs, then records keyed by its client instance id arrive in the
    topic, with the broker labels (client_id, software name, source address, broker id ...) as headers."""
    from confluent_kafka import Producer
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType

    endpoint = urlparse(stack.telemetry_endpoint)
    if endpoint.hostname not in ("127.0.0.1", "localhost") or endpoint.port is None:
        missing_precondition(f"telemetry endpoint {stack.telemetry_endpoint} is not a local port")
    topic = f"kct-e2e-chain-{uuid.uuid4().hex[:8]}"
    _create_topic(stack.kafka_bootstrap, topic)
    subscription = f"kct-e2e-{uuid.uuid4().hex[:8]}"
    client_id = f"chain-{uuid.uuid4().hex[:6]}"
    admin = KafkaAdminClient(bootstrap_servers=stack.kafka_bootstrap)
    wanted = {"metrics": "*", "interval.ms": "1000", "match": f"client_id={client_id}"}
    admin.alter_configs([ConfigResource(ConfigResourceType.CLIENT_METRICS, subscription, configs=wanted)],
                        incremental=True)
    try:
        wait_for_client_metrics(stack.kafka_bootstrap, subscription, wanted)
        run_receiver(topic, port=endpoint.port, token=_plugin_token(stack))
        producer = Producer({"bootstrap.servers": stack.kafka_bootstrap, "client.id": client_id})
        deadline = time.monotonic() + 25
        while time.monotonic() < deadline:
            producer.produce(topic + "-data", b"x")
            producer.poll(0.2)
        producer.flush(10)
        records = [r for r in _read_topic(stack.kafka_bootstrap, topic, idle_s=4)
                   if dict(r.headers() or []).get("client_id") == client_id.encode()]
    finally:
        admin.alter_configs([ConfigResource(ConfigResourceType.CLIENT_METRICS, subscription, configs={
            "metrics": None, "interval.ms": None, "match": None})], incremental=True)
        admin.close()
    assert records, "no telemetry from the chain reached the topic"
    headers = {k: v.decode() for k, v in records[-1].headers()}
    assert records[-1].key() == headers["client_instance_id"].encode()
    assert headers["client_software_name"]
    assert headers["client_source_address"] == "127.0.0.1"
    assert headers["broker_id"]
    assert headers["kct.client_instance_id_source"] == "header"


async def _load(url: str, stop: asyncio.Event, ok: list[str], statuses: dict[int, int], concurrency: int) -> None:
    import aiohttp
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    async def sender(session: aiohttp.ClientSession, worker: int) -> None:
        i = 0
        while not stop.is_set():
            instance = f"load-{worker}-{i}"
            i += 1
            req = ExportMetricsServiceRequest()
            kv = req.resource_metrics.add().resource.attributes.add()
            kv.key, kv.value.string_value = "service.name", "load"
            metric = req.resource_metrics[0].scope_metrics.add().metrics.add()
            metric.name = "org.apache.kafka.producer.queue.bytes"
            for p in range(50):
                metric.gauge.data_points.add().as_int = p
            headers = {"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {TOKEN}",
                       "kct-client-instance-id": instance}
            try:
                async with session.post(url, data=req.SerializeToString(), headers=headers) as resp:
                    await resp.read()
                    statuses[resp.status] = statuses.get(resp.status, 0) + 1
                    if resp.status == 200:
                        ok.append(instance)
                    else:
                        await asyncio.sleep(0.05)  # duration: a refused sender backs off, as a client would
            except aiohttp.ClientError:
                statuses[0] = statuses.get(0, 0) + 1
                await asyncio.sleep(0.1)  # duration: a sender without a connection backs off, as a client would

    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await asyncio.gather(*(sender(session, w) for w in range(concurrency)))


def test_kafka_stopped_under_load_no_200_without_a_record(stack: Any, run_receiver: Any) -> None:
    """Given the receiver under steady load, when Kafka is stopped for ~12 s and started again, then pushes
    are refused with 503 meanwhile, RSS stays bounded, pushes succeed again without restarting the receiver,
    and every push answered 200 is a record in the topic afterwards."""
    stack.require_local("a Kafka outage under load")
    topic = f"kct-e2e-outage-{uuid.uuid4().hex[:8]}"
    _create_topic(stack.kafka_bootstrap, topic)
    receiver = run_receiver(topic)
    ok: list[str] = []
    statuses: dict[int, int] = {}
    rss: list[float] = []
    phases: dict[str, dict[int, int]] = {}

    async def scenario() -> None:
        stop = asyncio.Event()
        load = asyncio.create_task(_load(f"{receiver.url}/v1/metrics", stop, ok, statuses, concurrency=16))
        await eventually_async(lambda: len(ok) >= 50, timeout=60, what="50 pushes acknowledged before the outage")
        phases["before"] = dict(statuses)
        await asyncio.to_thread(stack.kafka_stop)
        for _ in range(12):
            await asyncio.sleep(1)  # duration: a 12 s outage, the receiver's RSS sampled every second
            rss.append(receiver.rss_mb())
        await eventually_async(lambda: statuses.get(503, 0) > phases["before"].get(503, 0), timeout=30,
                               what="pushes refused with 503 during the outage")
        phases["outage"] = dict(statuses)
        await asyncio.to_thread(stack.kafka_start)
        ok_at_restart = len(ok)

        def recovered() -> bool:
            rss.append(receiver.rss_mb())
            return len(ok) >= ok_at_restart + 50

        await eventually_async(recovered, timeout=60, what="50 pushes acknowledged after Kafka's return")
        await asyncio.sleep(2)  # duration: two more seconds of load on the recovered receiver before it stops
        stop.set()
        await load
        phases["after"] = dict(statuses)

    asyncio.run(scenario())
    assert receiver.process.poll() is None, "the receiver died"
    assert phases["before"].get(200, 0) > 0
    assert phases["outage"].get(503, 0) > phases["before"].get(503, 0), phases
    assert phases["after"].get(200, 0) > phases["outage"].get(200, 0) + 50, phases  # recovered, same process
    assert max(rss) < 400, rss

    keys = {r.key().decode() for r in _read_topic(stack.kafka_bootstrap, topic, idle_s=5, limit_s=120)}
    missing = [instance for instance in ok if instance not in keys]
    assert not missing, f"{len(missing)} of {len(ok)} pushes answered 200 have no record: {missing[:5]}"
    print(f"outage: statuses={statuses} records={len(keys)} acknowledged={len(ok)} max_rss_mb={max(rss):.0f}")


def test_a_topic_deleted_under_the_receiver_stays_deleted_and_the_receiver_not_ready(
    stack: Any, run_receiver: Any
) -> None:
    """Given a ready receiver, When its topic is deleted (as the operator does with deleteOnRemoval while the
    pods still terminate), Then /readyz answers 503 and the topic stays deleted across the readiness probes
    that follow (their metadata requests create no topic); When the topic is created again, Then the same
    process is ready again."""
    topic = f"kct-e2e-gone-{uuid.uuid4().hex[:8]}"
    _create_topic(stack.kafka_bootstrap, topic)
    receiver = run_receiver(topic)  # readinessIntervalMs 500
    delete_topics(stack.kafka_bootstrap, [topic])
    eventually(lambda: receiver.status("/readyz") == 503, timeout=30, what="/readyz to answer 503 without the topic",
               interval=0.2)
    # Ten probe intervals: with auto-creation the first probe after the deletion re-created the topic.
    for _ in range(10):
        time.sleep(0.5)  # duration: one readiness probe interval (500 ms) must pass between two looks
        assert not _topic_exists(stack.kafka_bootstrap, topic), "the receiver's metadata requests re-created it"
        assert receiver.status("/readyz") == 503
    assert "unavailable" in receiver.log.read_text()
    _create_topic(stack.kafka_bootstrap, topic)
    eventually(lambda: receiver.status("/readyz") == 200, timeout=30, what="/readyz to answer 200 again",
               interval=0.2)
    assert receiver.process.poll() is None, receiver.log.read_text()


def test_chaos_kafka_down_30s_then_receiver_killed_no_acknowledged_push_lost(stack: Any, run_receiver: Any) -> None:
    """Given the receiver under steady load, When Kafka is stopped for 30 s and started again, and then the
    receiver is killed with SIGKILL mid-load and started again on its port, Then every push answered 200 at
    any point is a record in the topic (zero acknowledged pushes lost), and the load flows again after each
    fault."""
    stack.require_local("a Kafka outage and a receiver kill under load")
    topic = f"kct-e2e-chaos-{uuid.uuid4().hex[:8]}"
    _create_topic(stack.kafka_bootstrap, topic)
    receiver = run_receiver(topic)
    ok: list[str] = []
    statuses: dict[int, int] = {}
    phases: dict[str, int] = {}

    async def until_more_acknowledged(count: int, limit_s: float = 90) -> None:
        target = len(ok) + count
        await eventually_async(lambda: len(ok) >= target, timeout=limit_s,
                               what=f"{count} more pushes acknowledged (no recovery?)")

    async def scenario() -> None:
        nonlocal receiver
        stop = asyncio.Event()
        load = asyncio.create_task(_load(f"{receiver.url}/v1/metrics", stop, ok, statuses, concurrency=16))
        await until_more_acknowledged(50)
        await asyncio.to_thread(stack.kafka_stop)
        phases["acknowledged at kafka stop"] = len(ok)
        await asyncio.sleep(30)  # duration: the 30 s Kafka outage the scenario is about
        phases["acknowledged during 30 s outage"] = len(ok) - phases["acknowledged at kafka stop"]
        await asyncio.to_thread(stack.kafka_start)
        await until_more_acknowledged(50)
        receiver.process.kill()  # SIGKILL mid-load: pushes in flight get no answer, never a 200
        receiver.process.wait(timeout=10)
        phases["acknowledged at receiver kill"] = len(ok)
        receiver = await asyncio.to_thread(run_receiver, topic, receiver.port)
        await until_more_acknowledged(50)
        stop.set()
        await load

    asyncio.run(scenario())
    assert receiver.process.poll() is None, "the restarted receiver died"
    assert statuses.get(503, 0) > 0, statuses  # the outage was seen and refused, not acknowledged
    assert statuses.get(0, 0) > 0, statuses  # the kill was seen by the load (connections refused or reset)
    keys = {r.key().decode() for r in _read_topic(stack.kafka_bootstrap, topic, idle_s=5, limit_s=180)}
    missing = [instance for instance in ok if instance not in keys]
    print(f"\nchaos: statuses={statuses} acknowledged={len(ok)} records={len(keys)} lost={len(missing)} {phases}")
    assert not missing, f"{len(missing)} of {len(ok)} pushes answered 200 have no record: {missing[:5]}"
