"""The receiver's client registry and `GET /v1/clients`: bounded, expiring, figures from real OTLP pushes,
guarded by the push token (in Authorization or X-Kct-Read-Token, which the API server's proxy lets through)."""

from __future__ import annotations

import json
import time
from typing import Any

from conftest import TOKEN, ReceiverFactory, make_request
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality

from kct.receiver.clients import ClientRegistry

SECOND_NS = 1_000_000_000
DELTA = AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA
CUMULATIVE = AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE


def _labels(client_id: str = "orders-1") -> list[tuple[str, bytes]]:
    return [("client_instance_id", b"i-1"), ("client_id", client_id.encode()),
            ("client_software_name", b"apache-kafka-java"), ("client_software_version", b"3.9.0"),
            ("principal", b"User:orders"), ("kct.push_id", b"0123")]


def _push(*, sums: dict[str, tuple[float, int]] | None = None, temporality: int = DELTA,
          gauges: dict[str, list[float]] | None = None, start_s: int = 100) -> bytes:
    """A real OTLP push: sums as name -> (value, time in s) over [start_s, time]; gauges as name -> points."""
    request = ExportMetricsServiceRequest()
    scope = request.resource_metrics.add().scope_metrics.add()
    for name, (value, at_s) in (sums or {}).items():
        metric = scope.metrics.add()
        metric.name = name
        metric.sum.aggregation_temporality = temporality  # type: ignore[assignment]
        metric.sum.is_monotonic = True
        point = metric.sum.data_points.add()
        point.as_double, point.start_time_unix_nano, point.time_unix_nano = value, start_s * SECOND_NS, at_s * SECOND_NS
    for name, values in (gauges or {}).items():
        metric = scope.metrics.add()
        metric.name = name
        for value in values:
            point = metric.gauge.data_points.add()
            point.as_double, point.time_unix_nano = value, 110 * SECOND_NS
    return request.SerializeToString()


def test_entries_carry_labels_attribution_and_push_times_newest_first() -> None:
    # Given a registry that saw two clients, one of them twice
    registry = ClientRegistry()
    registry.observe("i-1", _labels(), (("k8s.pod.name", "orders-x"),), b"", 1_000)
    registry.observe("i-2", _labels("billing"), (), b"", 2_000)
    registry.observe("i-1", _labels(), (("k8s.pod.name", "orders-x"),), b"", 3_000)
    # When it is read
    document = registry.document(4_000)
    # Then the newest push comes first, with its broker labels (not the receiver's own headers) and attribution
    first, second = document["clients"]
    assert first == {
        "client_instance_id": "i-1",
        "labels": {"client_id": "orders-1", "client_software_name": "apache-kafka-java",
                   "client_software_version": "3.9.0", "principal": "User:orders"},
        "attributes": {"k8s.pod.name": "orders-x"},
        "first_push_ms": 1_000, "last_push_ms": 3_000, "pushes": 2, "metrics": {},
    }
    assert second["client_instance_id"] == "i-2" and second["labels"]["client_id"] == "billing"
    assert (document["tracked"], document["evicted"], document["expired"]) == (2, 0, 0)


def test_a_full_registry_evicts_the_least_recently_pushed_and_counts_it() -> None:
    registry = ClientRegistry(max_clients=2)
    registry.observe("a", (), (), b"", 1)
    registry.observe("b", (), (), b"", 2)
    registry.observe("a", (), (), b"", 3)  # a is now the most recent
    registry.observe("c", (), (), b"", 4)
    document = registry.document(5)
    assert [c["client_instance_id"] for c in document["clients"]] == ["c", "a"]
    assert document["evicted"] == 1 and len(registry) == 2


def test_clients_without_a_push_for_the_idle_time_expire() -> None:
    registry = ClientRegistry(idle_ms=1_000)
    registry.observe("old", (), (), b"x" * 10, 0)
    registry.observe("live", (), (), b"y" * 10, 900)
    assert [c["client_instance_id"] for c in registry.document(1_500)["clients"]] == ["live"]
    assert registry.expired == 1 and registry.held_bytes == 10
    # A new client's push also sweeps the expired ones, so an unread registry stays small
    registry.observe("new", (), (), b"", 3_000)
    assert len(registry) == 1 and registry.expired == 2 and registry.held_bytes == 0


def test_held_values_share_a_byte_budget() -> None:
    registry = ClientRegistry(max_held_bytes=100)
    registry.observe("a", (), (), b"a" * 60, 1)
    registry.observe("b", (), (), b"b" * 60, 2)  # over budget: labels kept, value not
    assert registry.held_bytes == 60
    registry.observe("a", (), (), b"a" * 30, 3)  # a's older value is given back first
    registry.observe("b", (), (), b"b" * 60, 4)
    assert registry.held_bytes == 90


def test_figures_from_delta_sums_and_gauges_of_a_java_producer() -> None:
    # Given a producer's push: DELTA sums over 10 s, latency per node and queue time as gauges
    body = _push(
        sums={"org.apache.kafka.producer.record.send.total": (500.0, 110),
              "org.apache.kafka.producer.outgoing.byte.total": (20_000.0, 110),
              "org.apache.kafka.producer.topic.record.send.total": (999.0, 110)},  # same thing, not counted twice
        gauges={"org.apache.kafka.producer.node.request.latency.avg": [4.0, 6.0],
                "org.apache.kafka.producer.node.request.latency.max": [9.0, 31.0],
                "org.apache.kafka.producer.record.queue.time.max": [12.5],
                "org.apache.kafka.producer.produce.throttle.time.avg": [0.0]},
    )
    registry = ClientRegistry()
    registry.observe("i-1", _labels(), (), body, 1)
    # Then the figures are rates per second, averages and maxima
    assert registry.document(2)["clients"][0]["metrics"] == {
        "records_per_s": 50.0, "bytes_per_s": 2_000.0, "request_latency_avg_ms": 5.0,
        "request_latency_max_ms": 31.0, "queue_time_max_ms": 12.5, "throttle_time_avg_ms": 0.0,
    }


def test_a_cumulative_sum_gives_a_rate_between_two_reads() -> None:
    name = "org.apache.kafka.consumer.fetch.manager.records.consumed.total"
    registry = ClientRegistry()
    registry.observe("c", (), (), _push(sums={name: (1_000.0, 110)}, temporality=CUMULATIVE), 1)
    assert registry.document(2)["clients"][0]["metrics"] == {}  # one sample: no rate yet
    registry.observe("c", (), (), _push(sums={name: (1_600.0, 140)}, temporality=CUMULATIVE), 3)
    assert registry.document(4)["clients"][0]["metrics"] == {"records_per_s": 20.0}
    # A client that restarted its counters gives no rate (not a negative one)
    registry.observe("c", (), (), _push(sums={name: (10.0, 150)}, temporality=CUMULATIVE), 5)
    assert registry.document(6)["clients"][0]["metrics"] == {}


def test_a_value_that_does_not_decode_gives_no_figures() -> None:
    registry = ClientRegistry()
    registry.observe("x", (), (), b"\xff\xff\xff", 1)
    assert registry.document(2)["clients"][0]["metrics"] == {}


def _headers(instance: str) -> dict[str, str]:
    return {"kct-client-instance-id": instance, "kct-client-id": "orders-1", "kct-principal": "User:orders",
            "kct-client-software-name": "librdkafka", "kct-client-software-version": "2.6.1",
            "kct-client-source-address": "203.0.113.9", "kct-client-source-port": "40000", "kct-broker-id": "1"}


async def _get(receiver: Any, headers: dict[str, str]) -> tuple[int, Any]:
    async with receiver.session.get(f"{receiver.url}/v1/clients", headers=headers) as resp:
        return resp.status, json.loads(await resp.read())


async def test_the_endpoint_lists_stored_pushes_to_token_holders_only(make_receiver: ReceiverFactory) -> None:
    # Given a receiver that stored two pushes of one client, and one push without any instance id
    receiver = await make_receiver()
    body = make_request(name="org.apache.kafka.producer.record.queue.time.max").SerializeToString()
    before = time.time_ns() // 1_000_000
    for _ in range(2):
        assert (await receiver.post(body, headers=_headers("abc"))).status == 200
    assert (await receiver.post(body)).status == 200
    # When it is asked without a token, with a wrong one, and with the token in either header
    assert (await _get(receiver, {}))[0] == 401
    assert (await _get(receiver, {"X-Kct-Read-Token": "wrong"}))[0] == 401
    status, document = await _get(receiver, {"X-Kct-Read-Token": TOKEN})
    # Then the token holders get one entry for the client (a push with a generated id is no client)
    assert status == 200
    assert set(document) == {"receiver", "now_ms", "clients", "tracked", "evicted", "expired"}
    (entry,) = document["clients"]
    assert entry["client_instance_id"] == "abc" and entry["pushes"] == 2
    assert entry["labels"] == {"client_id": "orders-1", "principal": "User:orders",
                               "client_software_name": "librdkafka", "client_software_version": "2.6.1",
                               "client_source_address": "203.0.113.9", "client_source_port": "40000", "broker_id": "1"}
    assert entry["first_push_ms"] >= before and entry["last_push_ms"] >= entry["first_push_ms"]
    assert entry["metrics"] == {"queue_time_max_ms": 2.0}  # make_request's gauge points are 0, 1, 2


async def test_the_endpoint_takes_a_bearer_token_like_pushes(make_receiver: ReceiverFactory) -> None:
    receiver = await make_receiver()
    status, document = await _get(receiver, {"Authorization": f"Bearer {TOKEN}"})
    assert status == 200 and document["clients"] == []
    assert (await _get(receiver, {"Authorization": "Bearer wrong"}))[0] == 401


async def test_without_auth_the_endpoint_is_open(make_receiver: ReceiverFactory) -> None:
    receiver = await make_receiver(token=None)
    assert (await _get(receiver, {}))[0] == 200
