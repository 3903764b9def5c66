"""librdkafka's queue events on an eventfd the loop watches, with the real librdkafka and no broker (the
producer points at a closed loopback port, so every record fails after message.timeout.ms)."""

from __future__ import annotations

import asyncio
import select
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from kct.receiver.command import kafka_sink
from kct.receiver.config import KafkaSinkConfig, parse_receiver_config
from kct.receiver.errors import Unavailable
from kct.receiver.kafka_sink import KafkaSink
from kct.receiver.rdkafka_events import watch_main_queue


@pytest.fixture
def closed_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])  # bound, never listening: connections are refused


def _producer(port: int) -> Producer:
    return Producer({"bootstrap.servers": f"127.0.0.1:{port}", "message.timeout.ms": 300,
                     "enable.metrics.push": False, "log_level": 0})


def test_a_delivery_report_makes_the_fd_readable_and_poll_serves_it(closed_port: int) -> None:
    """Given a watched producer, when a record fails, then the eventfd turns readable and poll(0) run after
    it delivers the report: no thread blocked in poll() was needed."""
    producer = _producer(closed_port)
    watch = watch_main_queue(producer)
    assert watch is not None, "the eventfd watch should be available with the pinned confluent-kafka on Linux"
    reports: list[KafkaError | None] = []
    producer.produce("kct-events-test", b"x", on_delivery=lambda err, _msg: reports.append(err))
    signals = 0
    deadline = time.monotonic() + 10
    while not reports and time.monotonic() < deadline:
        readable, _, _ = select.select([watch.fd], [], [], 1.0)
        if readable:
            signals += 1
            watch.clear()
            producer.poll(0)
    watch.close()
    assert signals >= 2  # the first is the initial one; the report signalled on its own
    assert len(reports) == 1 and reports[0] is not None
    assert reports[0].code() == KafkaError._MSG_TIMED_OUT


def test_only_a_producer_is_watched(closed_port: int) -> None:
    """Given a consumer (same C handle type, not a producer), then no watch: the sink would fall back to its
    polling thread."""
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{closed_port}", "group.id": "kct-events-test",
                         "enable.metrics.push": False, "log_level": 0})
    assert watch_main_queue(consumer) is None
    consumer.close()


@pytest.mark.parametrize("wakeup", ["eventfd", "thread"])
async def test_sink_fails_an_undeliverable_push_with_503_in_both_modes(closed_port: int, wakeup: str) -> None:
    """Given the receiver's configuration choosing either delivery wake-up (runtime.deliveryWakeup) and Kafka
    unreachable, when a push is sent anyway, then its failed report reaches the push (503 kafka_timeout) well
    before the lost-report margin, and the mode is the one chosen: with eventfd no polling thread runs."""
    config = parse_receiver_config({
        "kafka": {"bootstrapServers": f"127.0.0.1:{closed_port}", "topic": "kct-events-test",
                  "deliveryTimeoutMs": 500, "readinessTimeoutMs": 200},
        "runtime": {"deliveryWakeup": wakeup},
    })
    event_fd = wakeup == "eventfd"
    sink = kafka_sink(config)
    await sink.start()
    assert sink.reports_by_event_fd is event_fd
    pollers = [t for t in threading.enumerate() if t.name.startswith("kct-kafka-poll") and t.is_alive()]
    assert len(pollers) == (0 if event_fd else 2)
    sink._ready = True  # the probe failed (no broker): let the push through to librdkafka anyway
    started = time.monotonic()
    with pytest.raises(Unavailable) as refused:
        await asyncio.wait_for(sink.send(b"key", b"value", [("h", b"v")]), timeout=10)
    assert refused.value.reason == "kafka_timeout"
    assert time.monotonic() - started < 5  # the report itself, not the sweep after the 5 s margin
    await sink.close(1.0)
    assert not sink.reports_by_event_fd
    if not event_fd:
        assert all(not t.is_alive() for t in pollers)


async def test_the_default_delivery_wakeup_is_the_eventfd(closed_port: int) -> None:
    """Given a configuration that does not name runtime.deliveryWakeup, then the sink serves its producers
    on librdkafka's eventfd."""
    config = parse_receiver_config({"kafka": {"bootstrapServers": f"127.0.0.1:{closed_port}",
                                              "readinessTimeoutMs": 200}})
    assert config.runtime.delivery_wakeup == "eventfd"
    sink = kafka_sink(config)
    await sink.start()
    assert sink.reports_by_event_fd
    await sink.close(1.0)


async def test_a_fatal_producer_error_replaces_the_producer_and_the_new_one_is_watched(closed_port: int) -> None:
    """Given the sink in event-fd mode, when librdkafka reports a fatal error (possible with idempotence),
    then the loop replaces the producer, watches the new one's queue, and a push through it still gets
    its report (503 kafka_timeout), not the lost-report sweep."""
    config = KafkaSinkConfig(bootstrap_servers=f"127.0.0.1:{closed_port}", topic="kct-events-test",
                             delivery_timeout_ms=500, readiness_timeout_ms=200)
    sink = KafkaSink(config, 1_000_000)
    await sink.start()
    assert sink.reports_by_event_fd
    for lane in sink._lanes:
        old = lane.producer
        lane._on_error(KafkaError(KafkaError._FATAL, "test: fatal", fatal=True))
        lane.serve()
        assert lane.producer is not old
    assert sink.producer_replacements == 2
    assert sink.reports_by_event_fd
    sink._ready = True
    started = time.monotonic()
    with pytest.raises(Unavailable) as refused:
        await asyncio.wait_for(sink.send(b"key", b"value", []), timeout=10)
    assert refused.value.reason == "kafka_timeout"
    assert time.monotonic() - started < 5
    await sink.close(1.0)


class _CountingProducer:
    """A producer that counts the records produced through it."""

    def __init__(self, producer: Producer) -> None:
        self._producer = producer
        self.produced = 0

    def produce(self, *args: Any, **kwargs: Any) -> None:
        self.produced += 1
        self._producer.produce(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._producer, name)

    def __len__(self) -> int:
        return len(self._producer)


async def test_quiet_pushes_take_the_quiet_producer_and_busy_ones_the_batching_one(closed_port: int) -> None:
    """Given the sink, when three pushes are sent at once, then the first two (fewer than 2 others awaiting
    reports) are produced by the quiet producer (no linger) and the third by the busy one (linger); given
    the user's own linger.ms, then there is only their producer."""
    config = KafkaSinkConfig(bootstrap_servers=f"127.0.0.1:{closed_port}", topic="kct-events-test",
                             delivery_timeout_ms=500, readiness_timeout_ms=200)
    sink = KafkaSink(config, 1_000_000)
    await sink.start()
    sink._ready = True
    assert sink._quiet is not None
    # Records produced are counted at produce(): len(producer) also counts queued events (connection errors).
    counted = {lane.name: _CountingProducer(lane.producer) for lane in sink._lanes}
    for lane in sink._lanes:
        lane.producer = counted[lane.name]  # type: ignore[assignment]
    sends = [asyncio.ensure_future(sink.send(b"k%d" % i, b"v", [])) for i in range(3)]
    await asyncio.sleep(0)  # duration: one turn of the loop, in which each send produces and awaits its report
    assert (counted["quiet"].produced, counted["busy"].produced) == (2, 1)
    results = await asyncio.wait_for(asyncio.gather(*sends, return_exceptions=True), timeout=10)
    assert all(isinstance(r, Unavailable) and r.reason == "kafka_timeout" for r in results)
    await sink.close(1.0)
    own_linger = KafkaSinkConfig(bootstrap_servers=f"127.0.0.1:{closed_port}", topic="kct-events-test",
                                 producer_properties={"linger.ms": 5})
    single = KafkaSink(own_linger, 1_000_000)
    assert single._quiet is None and [lane.name for lane in single._lanes] == ["busy"]


class _FlushMeetsTheOther:
    """A producer whose flush returns only once the other producer's flush has started too."""

    def __init__(self, producer: Producer, barrier: threading.Barrier) -> None:
        self._producer = producer
        self._barrier = barrier

    def flush(self, timeout: float) -> int:
        self._barrier.wait()
        return int(self._producer.flush(timeout))

    def __len__(self) -> int:
        return len(self._producer)


async def test_close_flushes_both_producers_at_once(closed_port: int) -> None:
    """Given the sink's two producers, when it closes, then they flush at the same time (with Kafka away a
    shutdown waits the flush timeout once, not once per producer): each flush here waits for the other one
    to start, which a flush after the other never would (the barrier breaks after 10 s)."""
    config = KafkaSinkConfig(bootstrap_servers=f"127.0.0.1:{closed_port}", topic="kct-events-test",
                             delivery_timeout_ms=500, readiness_timeout_ms=200)
    sink = KafkaSink(config, 1_000_000)
    await sink.start()
    assert len(sink._lanes) == 2
    barrier = threading.Barrier(len(sink._lanes), timeout=10)
    real = [lane.producer for lane in sink._lanes]
    for lane in sink._lanes:
        lane.producer = _FlushMeetsTheOther(lane.producer, barrier)  # type: ignore[assignment]
    await sink.close(1.0)
    assert not barrier.broken
    for lane, producer in zip(sink._lanes, real, strict=True):
        lane.producer = producer
