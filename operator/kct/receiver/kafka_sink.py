"""The Kafka sink: confluent-kafka (librdkafka) idempotent producers with `acks=all`.

`produce()` only enqueues; the delivery report says whether the broker stored the record. Each producer's
queue is served on the event loop when librdkafka can signal it on an eventfd, else by a polling thread
(`kct.receiver.producer_lane`); either way the loop never blocks on librdkafka. Under load (at least
`_LOOP_POLL_MIN_INFLIGHT` pushes awaiting reports) the loop also polls before each produce, so reports that
arrived meanwhile need no wake-up at all. Every push waits for its own report: success -> the HTTP layer
answers 200; failure or timeout -> 503 with Retry-After (or 413 when the record exceeds the topic's limit).
librdkafka's queue is bounded; a full queue is a 503 too.

Two producers, because every push waits for its own ack: a *quiet* one without linger and with one
request in flight per broker takes a push when fewer than `_QUIET_MAX_INFLIGHT` others await their
reports, so a quiet receiver sends each record at once (librdkafka sleeps in whole milliseconds: 1 ms of
linger made the p50 at 500 pushes/s ~2x the OpenTelemetry Collector's); the *busy* one (`linger.ms` 1 ms,
librdkafka's 5 requests in flight) takes the rest, so load still makes large batches (with no linger and
5 requests in flight, librdkafka sent about a request per record at 32 connections and its broker thread
cost 3-4x as much per push; with one request in flight for every push, ~20 % fewer pushes per
CPU-second under load than with the linger: 8,212 vs 10,059 at 32 connections on a quiet machine).
When the user sets `linger.ms` in producerProperties, only their producer runs. Records of one client
instance sent at the same moment may thus land in a partition out of arrival order; each push is a
separate record with its own timestamps, and the aggregation orders points by time.

librdkafka itself fails a record after `message.timeout.ms`; the receiver only guards against a report that
never comes with one sweep per second over the pending pushes in send order (a deque: deadlines are
monotonic), not with one asyncio timer per push (a timer per push cost ~10 % of a push's CPU). The sweep
also serves the producers' queues once, a backstop should an event signal ever be missed.

Readiness is a cached metadata request (`list_topics(topic)`) refreshed in the background; while it
fails, pushes are refused at once with 503 instead of piling up behind `message.timeout.ms`. The request
never creates the topic (`allow.auto.create.topics` false): a missing topic means not ready.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from confluent_kafka import KafkaError, KafkaException

from kct.kafka.client_properties import librdkafka_properties, read_properties_dir
from kct.receiver.config import ConfigError, KafkaSinkConfig, resolve_env
from kct.receiver.delivery import DeliveryFailed, DeliveryReports
from kct.receiver.errors import PayloadTooLarge, PushRejected, Unavailable
from kct.receiver.producer_lane import ProducerLane

__all__ = ["KafkaSink", "producer_config", "quiet_producer_config"]

log = logging.getLogger(__name__)

_SWEEP_S = 1.0
_REPORT_MARGIN_S = 5.0  # beyond message.timeout.ms: only a lost report takes that long
_LOOP_POLL_MIN_INFLIGHT = 8  # fewer pushes awaiting reports: the producers' queue events serve them
_QUIET_MAX_INFLIGHT = 2  # fewer pushes awaiting reports: the quiet producer sends the next one at once
_LINGER_KEYS = ("linger.ms", "queue.buffering.max.ms")


def producer_config(config: KafkaSinkConfig, max_record_bytes: int) -> dict[str, Any]:
    """librdkafka properties: the user's, then what the receiver's guarantees require."""
    if config.bootstrap_servers_env is not None:
        bootstrap = resolve_env(config.bootstrap_servers_env, "kafka.bootstrapServersEnv")
    else:
        assert config.bootstrap_servers is not None
        bootstrap = config.bootstrap_servers
    conf: dict[str, Any] = {
        # Under load librdkafka batches what arrives within the linger and behind the requests in flight;
        # quiet pushes go through the quiet producer (quiet_producer_config) and wait for no linger.
        "linger.ms": 1,
        "compression.type": "lz4",
        # Every queued record is a push awaiting its answer, already bounded by limits.maxInflight*;
        # these only cap librdkafka if records outlive their request (the delivery-report margin).
        "queue.buffering.max.messages": 100_000,
        "queue.buffering.max.kbytes": 131_072,
        "client.id": "kct-receiver",
        # The receiver's own client would push its telemetry to the cluster it feeds: not wanted.
        "enable.metrics.push": False,
        # The topic is the operator's (partitions, replication, retention): librdkafka's producer default
        # would let the readiness probe's metadata request create it with the broker's defaults, before
        # the operator does or again after the operator deleted it with its resource (deleteOnRemoval)
        # while the receiver's pods are still terminating.
        "allow.auto.create.topics": False,
    }
    if config.client_properties_dir is not None:
        # The cluster's credentials and CA (spec.kafka.secretRef), mounted: never in the config file.
        try:
            conf.update(librdkafka_properties(read_properties_dir(Path(config.client_properties_dir))))
        except (OSError, ValueError) as error:
            raise ConfigError(f"kafka.clientPropertiesDir {config.client_properties_dir}: {error}") from None
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


def quiet_producer_config(conf: dict[str, Any], config: KafkaSinkConfig) -> dict[str, Any] | None:
    """The quiet producer's properties (no linger, one request in flight per broker: sent at once when
    idle, batched behind the request in flight otherwise), or None when the user chose a linger."""
    chosen = set(config.producer_properties) | set(config.producer_properties_from_env)
    if chosen & set(_LINGER_KEYS):
        return None
    return dict(conf, **{"linger.ms": 0, "max.in.flight.requests.per.connection": 1})


class KafkaSink:
    def __init__(
        self,
        config: KafkaSinkConfig,
        max_record_bytes: int,
        *,
        retry_after_s: int = 2,
        on_ready_change: Callable[[bool], None] | None = None,
        delivery_wakeup: Literal["eventfd", "thread"] = "eventfd",
    ) -> None:
        self._config = config
        conf = producer_config(config, max_record_bytes)
        conf["logger"] = logging.getLogger("kct.receiver.librdkafka")  # JSON logs, like ours
        event_fd = delivery_wakeup == "eventfd"
        self._busy = ProducerLane("busy", conf, event_fd=event_fd)
        quiet = quiet_producer_config(conf, config)
        self._quiet = ProducerLane("quiet", quiet, event_fd=event_fd) if quiet is not None else None
        self._lanes = [self._busy] if self._quiet is None else [self._busy, self._quiet]
        self._retry_after_s = retry_after_s
        self._on_ready_change = on_ready_change
        self._reports: DeliveryReports | None = None
        self._prober: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._pending: deque[tuple[float, asyncio.Future[None]]] = deque()
        self._ready = False
        self._ready_reason = "not probed yet"
        self._inflight = 0

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        self._reports = DeliveryReports(asyncio.get_running_loop())
        for lane in self._lanes:
            lane.start(self._reports)
        served_by = "event loop on librdkafka's eventfd" if self.reports_by_event_fd else "polling threads"
        log.info("kafka producers started",
                 extra={"producers": [lane.name for lane in self._lanes], "reports_served_by": served_by})
        await self._probe_once()
        self._prober = asyncio.create_task(self._probe_forever(), name="kct-kafka-readiness")
        self._sweeper = asyncio.create_task(self._sweep_forever(), name="kct-kafka-lost-reports")

    async def close(self, timeout_s: float) -> None:
        if self._prober is not None:
            self._prober.cancel()
        if self._sweeper is not None:
            self._sweeper.cancel()
        # Both producers flush at once, so a shutdown with Kafka away takes the timeout once, not per producer.
        remaining = await asyncio.gather(*(asyncio.to_thread(lane.producer.flush, timeout_s) for lane in self._lanes))
        for lane, left in zip(self._lanes, remaining, strict=True):
            if left:
                log.warning("producer closed with undelivered records", extra={"records": left, "lane": lane.name})
        stopped = all([await lane.stop_serving() for lane in self._lanes])
        if self._reports is not None:
            self._reports.drain()  # what the flushes served, resolved here on the loop
            if stopped:  # a poller stuck in librdkafka might still wake: keep the fd, the process is ending
                self._reports.close()

    @property
    def producer_replacements(self) -> int:
        return sum(lane.replacements for lane in self._lanes)

    @property
    def reports_by_event_fd(self) -> bool:
        """Whether the loop serves every producer on librdkafka's queue events (else polling threads do)."""
        return all(lane.watched for lane in self._lanes)

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
            metadata = self._busy.producer.list_topics(self._config.topic, timeout=timeout)
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
    async def send(self, key: bytes, value: bytes, headers: Sequence[tuple[str, bytes]]) -> None:
        if not self._ready:
            raise Unavailable(
                "kafka_not_ready", f"Kafka is not reachable: {self._ready_reason}", retry_after_s=self._retry_after_s
            )
        reports = self._reports
        assert reports is not None, "send() before start()"
        if self._inflight >= _LOOP_POLL_MIN_INFLIGHT:
            # Under load: the reports that arrived since the last poll, taken here on the loop.
            self._busy.producer.poll(0)
            if len(reports):
                reports.drain()
        quiet = self._quiet is not None and self._inflight < _QUIET_MAX_INFLIGHT
        producer = self._quiet.producer if quiet and self._quiet is not None else self._busy.producer
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        add = reports.add

        def on_delivery(err: KafkaError | None, _msg: object) -> None:
            add(future, err)

        try:
            producer.produce(
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
            for lane in self._lanes:
                if lane.watched:
                    lane.serve()
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

