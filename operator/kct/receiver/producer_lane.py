"""One librdkafka producer of the Kafka sink and how its queue is served.

The queue (delivery reports, errors, logs) is served on the event loop when librdkafka can signal it on an
eventfd (`kct.receiver.rdkafka_events`): the loop calls `poll(0)` when the descriptor turns readable, so
the callbacks run on the loop and the reports resolve at once. Where it cannot, or when the configuration
asks for it (`runtime.deliveryWakeup: thread`), a polling thread serves it and wakes the loop through
`DeliveryReports.wake()`. A fatal producer error (possible with idempotence) replaces the producer,
failing what the dead one still held, so Kafka outages heal without a restart.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from confluent_kafka import KafkaError, Producer

from kct.receiver.delivery import DeliveryReports
from kct.receiver.rdkafka_events import MainQueueWatch, watch_main_queue

__all__ = ["ProducerLane"]

log = logging.getLogger(__name__)

_POLL_S = 0.05


class ProducerLane:
    def __init__(self, name: str, conf: dict[str, Any], *, event_fd: bool = True) -> None:
        self.name = name
        self._event_fd = event_fd  # try librdkafka's eventfd first (runtime.deliveryWakeup: eventfd)
        self._conf = dict(conf, error_cb=self._on_error)
        self.producer = Producer(self._conf)
        self.replacements = 0
        self._reports: DeliveryReports | None = None
        self._fatal = threading.Event()
        self._stop = threading.Event()
        self._watch: MainQueueWatch | None = None
        self._poller: threading.Thread | None = None

    @property
    def watched(self) -> bool:
        """Whether the loop serves this producer on librdkafka's queue events (else a polling thread does)."""
        return self._watch is not None

    def start(self, reports: DeliveryReports) -> None:
        """On the loop: serve the producer's queue from now on."""
        self._reports = reports
        if not self._watch_producer():
            self._start_poller()

    def serve(self) -> None:
        """On the loop: run the callbacks of what librdkafka queued and resolve the reports."""
        if self._watch is not None:
            self._watch.clear()
        producer = self.producer
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

    async def stop_serving(self) -> bool:
        """On the loop, after the final flush: no more serving; False when the poller did not stop in time."""
        self._unwatch_producer()
        self._stop.set()
        if self._poller is not None:
            await asyncio.to_thread(self._poller.join, 2.0)
            return not self._poller.is_alive()
        return True

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            log.error("fatal producer error; replacing the producer", extra={"error": str(err), "lane": self.name})
            self._fatal.set()
        else:
            log.warning("producer error", extra={"error": str(err), "lane": self.name})

    def _watch_producer(self) -> bool:
        watch = watch_main_queue(self.producer) if self._event_fd else None
        if watch is None:
            return False
        asyncio.get_running_loop().add_reader(watch.fd, self.serve)
        self._watch = watch
        return True

    def _unwatch_producer(self) -> None:
        watch, self._watch = self._watch, None
        if watch is not None:
            asyncio.get_running_loop().remove_reader(watch.fd)
            watch.close()

    def _start_poller(self) -> None:
        self._poller = threading.Thread(target=self._poll_forever, name=f"kct-kafka-poll-{self.name}", daemon=True)
        self._poller.start()

    def _poll_forever(self) -> None:
        while not self._stop.is_set():
            producer = self.producer
            producer.poll(_POLL_S)
            self._hand_over()
            if self._fatal.is_set():
                self._replace_producer(producer)

    def _replace_producer(self, old: Any) -> None:
        self._fatal.clear()
        self.producer = Producer(self._conf)
        self.replacements += 1
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
