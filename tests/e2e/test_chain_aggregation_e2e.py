"""The whole chain on the real stack: a real librdkafka producer pushing KIP-714 telemetry -> broker -> our
plugin -> `kct receiver` -> topic -> `kct aggregate` (local mode) -> Parquet aggregates, checked against the
producer's own statistics (`statistics.interval.ms`, librdkafka's JSON `stats_cb`) over the same interval.

librdkafka pushes one counter, `org.apache.kafka.producer.connection.creation.total`, in delta temporality
(the broker asks for deltas) from the moment it got its subscription: its summed deltas must equal the
statistics' `connects` (summed over brokers) at the end minus `connects` when the subscription arrived. The
producer closes idle connections after 1.5 s (`connections.max.idle.ms`) and telemetry is pushed every 3 s, so
it reconnects for nearly every push and the counter counts several real connections, not just zero.
"""

from __future__ import annotations

import json
import math
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from aggregation_support import KCT, create_topic, delete_topics, read_table, run_aggregation, write_config
from helpers import eventually, stop_process, unique, wait_for_client_metrics
from preconditions import missing_precondition

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

PREFIX = "org.apache.kafka.producer."
CONNECTIONS = PREFIX + "connection.creation.total"
LATENCY_AVG, LATENCY_MAX = PREFIX + "node.request.latency.avg", PREFIX + "node.request.latency.max"
PUSH_INTERVAL_MS = 3000
IDLE_MS = 1500  # connections.max.idle.ms: the producer disconnects between pushes


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@contextmanager
def _receiver(stack: Any, topic: str, port: int, tmp_path: Path) -> Iterator[Path]:
    """`kct receiver --config FILE` on the port the broker plugin posts to, expecting the plugin's token."""
    config = tmp_path / "receiver.json"
    config.write_text(json.dumps({
        "listen": {"host": "127.0.0.1", "port": port},
        "auth": {"bearerTokenEnv": "KCT_RECEIVER_TOKEN"},
        "kafka": {"bootstrapServersEnv": "KAFKA_BOOTSTRAP_SERVERS", "topic": topic},
        "logging": {"level": "INFO", "format": "json"},
    }))
    log = tmp_path / "receiver.log"
    eventually(lambda: _port_free(port), timeout=120, what=f"port {port} free for the receiver")
    env = dict(stack.env(), KCT_RECEIVER_TOKEN=stack.receiver_token or "")
    with log.open("wb") as out:
        process = subprocess.Popen([str(KCT), "receiver", "--config", str(config)], env=env, stdout=out,
                                   stderr=subprocess.STDOUT)
    try:
        def ready() -> bool:
            assert process.poll() is None, log.read_text()
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return "receiver listening" in log.read_text()
            except OSError:
                return False

        eventually(ready, timeout=60, what="the receiver listening")
        yield log
    finally:
        stop_process(process)


def _wait_for_terminating_push(bootstrap: str, topic: str, client_id: str, timeout: float = 60) -> None:
    """Read `topic` until the client's terminating push (broker label `terminating=true`) is in it."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("kct-e2e-chain"),
                         "auto.offset.reset": "earliest", "enable.metrics.push": False})
    consumer.subscribe([topic])
    try:
        def terminating() -> bool:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                return False
            headers = dict(msg.headers() or [])  # the receiver writes the broker labels as bytes
            return headers.get("client_id") == client_id.encode() and headers.get("terminating") == b"true"

        eventually(terminating, timeout=timeout, interval=0, what=f"the terminating push of {client_id}")
    finally:
        consumer.close()


def _connects(stats: dict[str, Any]) -> int:
    return sum(int(broker["connects"]) for broker in stats["brokers"].values())


def _requests(stats: dict[str, Any], name: str) -> int:
    return sum(int(broker["req"].get(name, 0)) for broker in stats["brokers"].values())


def _run_producer(bootstrap: str, client_id: str, topic: str) -> list[dict[str, Any]]:
    """A librdkafka producer: idle (reconnecting for its pushes), then producing, then closed; returns its
    statistics snapshots, the last one taken after the flush, just before closing."""
    from confluent_kafka import Producer

    stats: list[dict[str, Any]] = []
    producer = Producer({
        "bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
        "statistics.interval.ms": 100, "stats_cb": lambda raw: stats.append(json.loads(raw)),
        "connections.max.idle.ms": IDLE_MS,
    })

    def pushed(count: int) -> bool:
        producer.poll(0.1)
        return bool(stats) and _requests(stats[-1], "PushTelemetry") >= count

    eventually(lambda: pushed(4), timeout=60, what="the producer's first 4 pushes")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        producer.produce(topic, b"x" * 100)
        producer.poll(0.02)
    assert producer.flush(30) == 0
    seen = len(stats)
    while len(stats) < seen + 2:  # a snapshot taken after the flush
        producer.poll(0.02)
    # Closing well within the idle time: the connection is still up, the terminating push adds no connection.
    producer.close()
    return stats


def test_real_librdkafka_pushes_aggregate_to_the_clients_own_statistics(stack: Any, tmp_path: Path) -> None:
    """Given a CLIENT_METRICS subscription (producer metrics, every 3 s) for one client id, and the receiver
    on the endpoint the broker plugin posts to,
    When a real librdkafka producer runs (idle, reconnecting for its pushes, then producing) and closes,
    and `kct aggregate` runs in batch, local mode on the receiver's topic,
    Then the summed per-window deltas of connection.creation.total equal the connections the producer's own
    statistics counted since it got its subscription, the request latency gauges are aggregated within
    [0, the statistics' largest round-trip time], and the producer's terminating push is a termination."""
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType

    endpoint = urlparse(stack.telemetry_endpoint)
    if endpoint.hostname not in ("127.0.0.1", "localhost") or endpoint.port is None:
        missing_precondition(f"telemetry endpoint {stack.telemetry_endpoint} is not a local port")
    bootstrap = stack.kafka_bootstrap
    pushes_topic = create_topic(bootstrap, partitions=2, prefix="kct-chain-e2e")
    data_topic = create_topic(bootstrap, partitions=1, prefix="kct-chain-e2e-data")
    subscription, client_id = unique("kct-chain-e2e"), unique("chain")
    wanted = {"metrics": PREFIX, "interval.ms": str(PUSH_INTERVAL_MS), "match": f"client_id={client_id}"}
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kct-e2e-chain-admin")
    admin.alter_configs([ConfigResource(ConfigResourceType.CLIENT_METRICS, subscription, configs=wanted)],
                        incremental=True)
    try:
        wait_for_client_metrics(bootstrap, subscription, wanted)
        with _receiver(stack, pushes_topic, endpoint.port, tmp_path) as receiver_log:
            stats = _run_producer(bootstrap, client_id, data_topic)
            _wait_for_terminating_push(bootstrap, pushes_topic, client_id)
        out = tmp_path / "out"
        log = run_aggregation(bootstrap, write_config(tmp_path / "job.yaml", pushes_topic, out, mode="batch"),
                              timeout=300)
    finally:
        admin.alter_configs([ConfigResource(ConfigResourceType.CLIENT_METRICS, subscription,
                                            configs=dict.fromkeys(wanted))], incremental=True)
        admin.close()
        delete_topics(bootstrap, [pushes_topic, data_topic])

    rows = [r for r in read_table(out, "client_metrics") if r["client_id"] == client_id]
    assert rows, f"no aggregates for {client_id}\njob: {log[-2000:]}\nreceiver: {receiver_log.read_text()[-2000:]}"
    (instance,) = {r["client_instance_id"] for r in rows}

    # The counter: connections since the subscription, as the client itself counted them.
    subscribed = next(s for s in stats if _requests(s, "GetTelemetrySubscriptions") >= 1)
    final = stats[-1]
    assert all(b["state"] == "UP" for b in final["brokers"].values() if b["connects"]), final["brokers"]
    expected = _connects(final) - _connects(subscribed)
    counter = [r for r in rows if r["metric"] == CONNECTIONS]
    assert counter and {(r["type"], r["temporality"]) for r in counter} == {("sum", "delta")}
    total = sum(r["delta"] for r in counter)
    print(f"{CONNECTIONS}: aggregated {total} over {len(counter)} window(s); statistics: "
          f"{_connects(subscribed)} at subscription, {_connects(final)} at the end")
    assert expected >= 3, "the producer should have reconnected for its pushes"
    assert total == expected

    # The gauges: per-node request latency (ms), bounded by the largest round-trip time the client measured.
    rtt_max_ms = math.ceil(max(b["rtt"]["max"] for s in stats for b in s["brokers"].values()) / 1000)
    for metric in (LATENCY_AVG, LATENCY_MAX):
        gauges = [r for r in rows if r["metric"] == metric]
        assert gauges and {r["type"] for r in gauges} == {"gauge"}, metric
        for r in gauges:
            assert r["points"] >= 1 and 0 <= r["value_min"] <= r["value_avg"] <= r["value_max"] <= rtt_max_ms, r
    print(f"latency max aggregated {max(r['value_max'] for r in rows if r['metric'] == LATENCY_MAX)} ms, "
          f"statistics rtt max {rtt_max_ms} ms")

    ended = [t for t in read_table(out, "terminations") if t["client_instance_id"] == instance]
    assert len(ended) == 1 and ended[0]["client_id"] == client_id, ended
