"""End to end: real clients push KIP-714 telemetry through the real broker and our plugin to an HTTP endpoint.

The local stack starts the broker with the plugin pointed at KCT_TELEMETRY_ENDPOINT (by default
http://127.0.0.1:4318/v1/metrics); this test binds that address itself, so it sees exactly what the
receiver would: the OTLP protobuf body and the broker-added labels in `kct-*` headers.
"""

from __future__ import annotations

import time
import urllib.parse
import uuid
from typing import Any, Protocol

import pytest
from confluent_kafka import Consumer, Producer
from helpers import eventually
from kafka.admin import KafkaAdminClient
from plugin_support import client_metrics_subscription, otlp_endpoint

pytestmark = pytest.mark.e2e


class Stack(Protocol):
    """What these tests use of the `stack` fixture (tests/conftest.py)."""

    kafka_bootstrap: str
    telemetry_endpoint: str

API_GET_TELEMETRY_SUBSCRIPTIONS = 71
API_PUSH_TELEMETRY = 72


def test_broker_advertises_telemetry_apis(stack: Stack) -> None:
    """Given the stack's broker with the plugin, When a client asks ApiVersions,
    Then GetTelemetrySubscriptions (71) and PushTelemetry (72) are advertised."""
    admin = KafkaAdminClient(bootstrap_servers=stack.kafka_bootstrap, client_id="kct-e2e-apiversions")
    try:
        keys = {int(key) for key in admin.api_versions()}
    finally:
        admin.close()
    assert API_GET_TELEMETRY_SUBSCRIPTIONS in keys
    assert API_PUSH_TELEMETRY in keys


def test_client_pushes_reach_the_endpoint_with_labels(stack: Stack) -> None:
    """Given an endpoint on the plugin's address and a CLIENT_METRICS subscription (interval 1 s) for
    producer and consumer metrics of this test's clients,
    When a confluent-kafka producer and consumer run for a few seconds and are closed,
    Then the endpoint receives OTLP ExportMetricsServiceRequest pushes holding producer and consumer
    metrics, labelled with each client's client.id and the other broker-added labels, and a
    terminating push when each client closes."""
    run = uuid.uuid4().hex[:8]
    producer_id, consumer_id = f"kct-e2e-{run}-producer", f"kct-e2e-{run}-consumer"
    topic = f"kct-e2e-{run}"
    subscription = {
        "metrics": "org.apache.kafka.producer.,org.apache.kafka.consumer.",
        "interval.ms": "1000",
        "match": f"client_id=kct-e2e-{run}-.*",
    }
    with otlp_endpoint(stack.telemetry_endpoint) as endpoint, \
            client_metrics_subscription(stack.kafka_bootstrap, f"kct-e2e-{run}", subscription):
        producer = Producer({"bootstrap.servers": stack.kafka_bootstrap, "client.id": producer_id})
        consumer = Consumer({"bootstrap.servers": stack.kafka_bootstrap, "client.id": consumer_id,
                             "group.id": f"kct-e2e-{run}", "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        consumed = 0

        def enough() -> bool:
            return consumed > 0 and all(
                sum(p.label("kct-terminating") == "false" for p in endpoint.for_client(cid)) >= 2
                for cid in (producer_id, consumer_id))

        started = time.monotonic()
        # at least 5 s of traffic; more while a fresh broker is still creating __consumer_offsets
        while time.monotonic() < started + 5 or (not enough() and time.monotonic() < started + 45):
            producer.produce(topic, b"hello")
            producer.poll(0)
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                consumed += 1
        producer.flush(10)

        def close_between_pushes(client: Any, client_id: str) -> None:
            # librdkafka sends its terminating push only when closed with the next push scheduled, not while
            # one is in flight (best effort, rd_kafka_telemetry_schedule_termination): close it just after a
            # push reached the endpoint, once the broker's answer is back and the next push ~0.7 s away.
            seen = len(endpoint.for_client(client_id))
            eventually(lambda: len(endpoint.for_client(client_id)) > seen, timeout=10, interval=0.02,
                       what=f"a push from {client_id}")
            time.sleep(0.3)  # duration: into the gap before the next push (1 s interval), see above
            client.close()

        close_between_pushes(producer, producer_id)
        close_between_pushes(consumer, consumer_id)
        # the terminating pushes are sent while the clients close; the plugin forwards them a moment later
        eventually(lambda: all(any(p.label("kct-terminating") == "true" for p in endpoint.for_client(cid))
                               for cid in (producer_id, consumer_id)),
                   timeout=15, interval=0.2, what="the terminating push of each client at the endpoint")

        assert consumed > 0, "the consumer read nothing back: the broker is not serving fetches"
        local = getattr(stack, "local", True)  # an external (kind) cluster has its own addresses and ids
        for client_id, prefix in ((producer_id, "org.apache.kafka.producer."),
                                  (consumer_id, "org.apache.kafka.consumer.")):
            pushes = endpoint.for_client(client_id)
            assert len(pushes) >= 2, f"{client_id}: {len(pushes)} pushes"
            names = set().union(*(p.metric_names() for p in pushes))
            assert any(n.startswith(prefix) for n in names), f"{client_id}: no {prefix}* metric in {sorted(names)}"
            first = pushes[0]
            assert first.path == urllib.parse.urlsplit(stack.telemetry_endpoint).path
            assert first.headers["content-type"] == "application/x-protobuf"
            assert first.label("kct-client-instance-id")
            assert first.label("kct-client-software-name")
            assert first.label("kct-client-software-version")
            assert first.label("kct-client-source-address") == "127.0.0.1" or not local
            assert (first.label("kct-client-source-port") or "").isdigit()
            assert first.label("kct-principal") == "User:ANONYMOUS"
            assert (first.label("kct-broker-id") or "").isdigit()
            assert first.label("kct-broker-id") == "1" or not local
            if local or first.label("kct-push-interval-ms") is not None:
                # the local stack runs Kafka 4.3 with the 4.2+ exporter class, which knows the interval
                assert first.label("kct-push-interval-ms") == "1000"
            assert {p.label("kct-client-instance-id") for p in pushes} == {first.label("kct-client-instance-id")}
            assert [p.label("kct-terminating") for p in pushes].count("true") == 1, \
                f"{client_id}: terminating flags {[p.label('kct-terminating') for p in pushes]}"
            assert pushes[-1].label("kct-terminating") == "true"


def test_broker_serves_produce_and_fetch_while_the_endpoint_is_down(stack: Stack) -> None:
    """Given clients subscribed to all metrics every 100 ms and nothing listening on the plugin's endpoint,
    When a producer (acks=all) and a consumer run for 15 s,
    Then every message is acknowledged and read back: failing pushes never hold up the broker.
    (bench/plugin_produce_latency.py runs the same for a minute and measures the latency.)"""
    run = uuid.uuid4().hex[:8]
    topic = f"kct-e2e-down-{run}"
    subscription = {"metrics": "*", "interval.ms": "100", "match": f"client_id=kct-e2e-down-{run}-.*"}
    with client_metrics_subscription(stack.kafka_bootstrap, f"kct-e2e-down-{run}", subscription):
        producer = Producer({"bootstrap.servers": stack.kafka_bootstrap, "acks": "all",
                             "client.id": f"kct-e2e-down-{run}-producer"})
        consumer = Consumer({"bootstrap.servers": stack.kafka_bootstrap, "group.id": f"kct-e2e-down-{run}",
                             "client.id": f"kct-e2e-down-{run}-consumer", "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        errors: list[str] = []

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        sent = consumed = 0
        started = time.monotonic()
        while time.monotonic() < started + 15:
            producer.produce(topic, b"m", on_delivery=on_delivery)
            sent += 1
            producer.poll(0)
            msg = consumer.poll(0.01)
            if msg is not None and msg.error() is None:
                consumed += 1
        assert producer.flush(15) == 0
        drain_until = time.monotonic() + 15
        while consumed < sent and time.monotonic() < drain_until:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                consumed += 1
        producer.close()
        consumer.close()
    _drain_plugin_backlog(stack.telemetry_endpoint)
    assert errors == []
    assert consumed == sent


def _drain_plugin_backlog(url: str, quiet_s: float = 3.0, limit_s: float = 120.0) -> None:
    """Bring the endpoint back until the plugin has flushed what it queued while it was down.

    The plugin keeps what it queued during the outage (up to `queue.capacity` pushes, for up to
    `queue.max.age.ms`) and delivers it when the endpoint returns, which would be the next test's endpoint.
    Accepting them here keeps the tests independent."""
    with otlp_endpoint(url) as endpoint:
        deadline = time.monotonic() + limit_s
        seen, last_change = -1, time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - last_change < quiet_s:
            with endpoint.lock:
                count = len(endpoint.pushes)
            if count != seen:
                seen, last_change = count, time.monotonic()
            time.sleep(0.2)  # duration: the poll interval of a quiet period (no new push for quiet_s)
