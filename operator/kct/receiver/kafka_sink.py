"""The Kafka sink: a confluent-kafka (librdkafka) idempotent producer with `acks=all`.

`produce()` only enqueues; the delivery report says whether the broker stored the record. librdkafka
signals its main queue (delivery reports, errors, logs) on an eventfd the event loop watches
(`kct.receiver.rdkafka_events`): when it turns readable the loop calls `poll(0)` itself and resolves the
reports at once (`delivery.py`), so a report costs no thread and no GIL hand-off, and the loop never blocks
on librdkafka. Where that descriptor cannot be had, a dedicated thread polls the producer (blocking, GIL
released) and hands reports back in batches (one loop wake-up per batch, none while a drain is pending).
Under load (at least `_LOOP_POLL_MIN_INFLIGHT` pushes awaiting reports) the loop also polls the producer
before each produce, so reports that arrived meanwhile need no wake-up at all. Every push waits for its
own report: success -> the HTTP layer answers 200; failure or timeout -> 503 with Retry-After (or 413 when
the record exceeds the topic's limit). librdkafka's queue is bounded; a full queue is a 503 too.

librdkafka itself fails a record after `message.timeout.ms`; the receiver only guards against a report that
never comes with one sweep per second over the pending pushes in send order (a deque: deadlines are
monotonic), not with one asyncio timer per push (a timer per push cost ~10 % of a push's CPU). The sweep
also serves the producer's queue once, a backstop should an event signal ever be missed.

Readiness is a cached metadata request (`list_topics(topic)`) refreshed in the background; while it
fails, pushes are refused at once with 503 instead of piling up behind `message.timeout.ms`. A fatal
producer error (possible with idempotence) replaces the producer, so Kafka outages heal without a restart.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from kct.receiver.config import KafkaSinkConfig, resolve_env
from kct.receiver.delivery import DeliveryFailed, DeliveryReports
from kct.receiver.errors import PayloadTooLarge, PushRejected, Unavailable
from kct.receiver.rdkafka_events import MainQueueWatch, watch_main_queue

__all__ = ["KafkaSink", "producer_config"]

log = logging.getLogger(__name__)

_POLL_S = 0.05
_SWEEP_S = 1.0
_REPORT_MARGIN_S = 5.0  # beyond message.timeout.ms: only a lost report takes that long
_LOOP_POLL_MIN_INFLIGHT = 8  # fewer pushes awaiting reports: the poller thread alone serves them


def producer_config(config: KafkaSinkConfig, max_record_bytes: int) -> dict[str, Any]:
    """librdkafka properties: the user's, then what the receiver's guarantees require."""
    if config.bootstrap_servers_env is not None:
        bootstrap = resolve_env(config.bootstrap_servers_env, "kafka.bootstrapServersEnv")
    else:
        assert config.bootstrap_servers is not None
        bootstrap = config.bootstrap_servers
    conf: dict[str, Any] = {
        # Every push waits for its record's ack, so any linger is added to every answer of a quiet receiver
        # (librdkafka sleeps in whole milliseconds: 1 ms made the p50 at 500 pushes/s ~2x the OpenTelemetry
        # Collector's). No linger, and one produce request in flight per broker: a quiet receiver sends each
        # record at once, a busy one batches whatever arrives while the previous request is out (Nagle's
        # rule), so load still makes batches without a timer. With no linger and 5 requests in flight,
        # librdkafka sent a request per record at 32 connections and its broker thread cost 3-4x as much.
        "linger.ms": 0,
        "max.in.flight.requests.per.connection": 1,
        "compression.type": "lz4",
        # Every queued record is a push awaiting its answer, already bounded by limits.maxInflight*;
        # these only cap librdkafka if records outlive their request (the delivery-report margin).
        "queue.buffering.max.messages": 100_000,
        "queue.buffering.max.kbytes": 131_072,
        "client.id": "kct-receiver",
        # The receiver's own client would push its telemetry to the cluster it feeds: not wanted.
        "enable.metrics.push": False,
    }
    conf.update(config.producer_properties)
    for prop, env in config.producer_properties_from_env.items():
        conf[prop] = resolve_env(env, f"kafka.producerPropertiesFromEnv.{prop}")
    conf.update(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "message.timeout.ms": config.delivery_timeout_ms,
            "message.max.bytes": max(int(conf.get("message.max.bytes", 0)), max_record_bytes),
        }
    )
    return conf


class KafkaSink:
    def __init__(
        self,
        config: KafkaSinkConfig,
        max_record_bytes: int,
        *,
        retry_after_s: int = 2,
        on_ready_change: Callable[[bool], None] | None = None,
    ) -> None:
        self._config = config
        self._conf = producer_config(config, max_record_bytes)
        self._conf["error_cb"] = self._on_error
        self._conf["logger"] = logging.getLogger("kct.receiver.librdkafka")  # JSON logs, like ours
        self._retry_after_s = retry_after_s
        self._on_ready_change = on_ready_change
        self._producer = Producer(self._conf)
        self._reports: DeliveryReports | None = None
        self._stop = threading.Event()
        self._fatal = threading.Event()
        self._poller: threading.Thread | None = None
        self._watch: MainQueueWatch | None = None
        self._prober: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._pending: deque[tuple[float, asyncio.Future[None]]] = deque()
        self._ready = False
        self._ready_reason = "not probed yet"
        self._inflight = 0
        self.producer_replacements = 0

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        self._reports = DeliveryReports(asyncio.get_running_loop())
        if not self._watch_producer():
            self._start_poller()
        log.info("kafka delivery reports served", extra={
            "by": "event loop on librdkafka's eventfd" if self._watch is not None else "polling thread"})
        await self._probe_once()
        self._prober = asyncio.create_task(self._probe_forever(), name="kct-kafka-readiness")
        self._sweeper = asyncio.create_task(self._sweep_forever(), name="kct-kafka-lost-reports")

    async def close(self, timeout_s: float) -> None:
        if self._prober is not None:
            self._prober.cancel()
        if self._sweeper is not None:
            self._sweeper.cancel()
        remaining = await asyncio.to_thread(self._producer.flush, timeout_s)
        if remaining:
            log.warning("producer closed with undelivered records", extra={"records": remaining})
        self._unwatch_producer()
        if self._reports is not None:
            self._reports.drain()  # what the flush served, resolved here on the loop
        self._stop.set()
        if self._poller is not None:
            await asyncio.to_thread(self._poller.join, 2.0)
            if self._poller.is_alive():  # stuck in librdkafka: keep the wake-up fd, the process is ending
                return
        if self._reports is not None:
            self._reports.close()

    # -- readiness -------------------------------------------------------------------------------
    def ready(self) -> bool:
        return self._ready

    @property
    def ready_reason(self) -> str:
        return self._ready_reason

    def inflight(self) -> int:
        return self._inflight

    def _probe(self) -> tuple[bool, str]:
        timeout = self._config.readiness_timeout_ms / 1000.0
        try:
            metadata = self._producer.list_topics(self._config.topic, timeout=timeout)
        except KafkaException as exc:
            return False, f"Kafka metadata request failed: {exc.args[0]}"
        topic = metadata.topics.get(self._config.topic)
        if topic is None or topic.error is not None:
            return False, f"topic {self._config.topic!r} unavailable: {getattr(topic, 'error', 'missing')}"
        if not topic.partitions:
            return False, f"topic {self._config.topic!r} has no partitions"
        return True, "ok"

    async def _probe_once(self) -> None:
        ready, reason = await asyncio.to_thread(self._probe)
        if ready != self._ready:
            log.info("kafka readiness changed", extra={"ready": ready, "reason": reason})
            if self._on_ready_change is not None:
                self._on_ready_change(ready)
        self._ready, self._ready_reason = ready, reason

    async def _probe_forever(self) -> None:
        interval = self._config.readiness_interval_ms / 1000.0
        while True:
            await asyncio.sleep(interval)
            try:
                await self._probe_once()
            except Exception:  # a probe must never kill the prober
                log.exception("kafka readiness probe crashed")

    # -- delivery --------------------------------------------------------------------------------
    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            log.error("fatal producer error; replacing the producer", extra={"error": str(err)})
            self._fatal.set()
        else:
            log.warning("producer error", extra={"error": str(err)})

    @property
    def reports_by_event_fd(self) -> bool:
        """Whether the loop serves the producer on librdkafka's queue events (else a polling thread does)."""
        return self._watch is not None

    def _watch_producer(self) -> bool:
        watch = watch_main_queue(self._producer)
        if watch is None:
            return False
        asyncio.get_running_loop().add_reader(watch.fd, self._serve_producer)
        self._watch = watch
        return True

    def _unwatch_producer(self) -> None:
        watch, self._watch = self._watch, None
        if watch is not None:
            asyncio.get_running_loop().remove_reader(watch.fd)
            watch.close()

    def _serve_producer(self) -> None:
        """On the loop, when librdkafka signalled its queue: the callbacks run here, the reports resolve."""
        if self._watch is not None:
            self._watch.clear()
        producer = self._producer
        producer.poll(0)
        if self._reports is not None:
            self._reports.drain()
        if self._fatal.is_set():
            self._unwatch_producer()
            self._replace_producer(producer)
            if not self._watch_producer():  # not expected (same library, same type), but never unserved
                self._start_poller()
            if self._reports is not None:
                self._reports.drain()  # the dead producer's purged records, failed now

    def _start_poller(self) -> None:
        self._poller = threading.Thread(target=self._poll_forever, name="kct-kafka-poll", daemon=True)
        self._poller.start()

    def _poll_forever(self) -> None:
        while not self._stop.is_set():
            producer = self._producer
            producer.poll(_POLL_S)
            self._hand_over()
            if self._fatal.is_set():
                self._replace_producer(producer)

    def _replace_producer(self, old: Any) -> None:
        self._fatal.clear()
        self._producer = Producer(self._conf)
        self.producer_replacements += 1
        # Fail what the dead producer still holds, so no push waits for a report that never comes.
        try:
            old.purge()
            old.poll(0)
            old.flush(0)
        except Exception:
            log.exception("purging the replaced producer failed")
        self._hand_over()

    def _hand_over(self) -> None:
        if self._reports is not None:
            self._reports.wake()

    async def send(self, key: bytes, value: bytes, headers: Sequence[tuple[str, bytes]]) -> None:
        if not self._ready:
            raise Unavailable(
                "kafka_not_ready", f"Kafka is not reachable: {self._ready_reason}", retry_after_s=self._retry_after_s
            )
        reports = self._reports
        assert reports is not None, "send() before start()"
        if self._inflight >= _LOOP_POLL_MIN_INFLIGHT:
            # Under load: the reports that arrived since the last poll, taken here on the loop.
            self._producer.poll(0)
            if len(reports):
                reports.drain()
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        add = reports.add

        def on_delivery(err: KafkaError | None, _msg: object) -> None:
            add(future, err)

        try:
            self._producer.produce(
                self._config.topic, value=value, key=key, headers=list(headers), on_delivery=on_delivery
            )
        except BufferError:
            raise Unavailable(
                "kafka_queue_full", "the Kafka producer queue is full", retry_after_s=self._retry_after_s
            ) from None
        except KafkaException as exc:
            raise self._rejection(exc.args[0]) from None
        self._inflight += 1
        self._pending.append((time.monotonic() + self._config.delivery_timeout_ms / 1000.0 + _REPORT_MARGIN_S,
                              future))
        try:
            await future
        except _ReportLost:
            raise Unavailable(
                "kafka_timeout", "no delivery report from Kafka in time", retry_after_s=self._retry_after_s
            ) from None
        except DeliveryFailed as failed:
            raise self._rejection(failed.err) from None
        finally:
            self._inflight -= 1

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(_SWEEP_S)
            if self._watch is not None:
                self._serve_producer()
            self.sweep_lost_reports(time.monotonic())

    def sweep_lost_reports(self, now: float) -> int:
        """Fail the pushes whose report is overdue (and forget the answered ones); return how many failed."""
        pending = self._pending
        failed = 0
        while pending:
            deadline, future = pending[0]
            if not future.done():
                if deadline > now:
                    break
                future.set_exception(_ReportLost())
                failed += 1
            pending.popleft()
        return failed

    def _rejection(self, err: KafkaError) -> PushRejected:
        code = err.code()
        if code == KafkaError.MSG_SIZE_TOO_LARGE:
            return PayloadTooLarge("record_too_large", f"the record is larger than the topic accepts: {err.str()}")
        reason = "kafka_timeout" if code == KafkaError._MSG_TIMED_OUT else "kafka_error"
        return Unavailable(reason, f"Kafka did not store the record: {err.str()}", retry_after_s=self._retry_after_s)


class _ReportLost(Exception):
    pass

