"""Kafka delivery reports, from whichever thread polled the producer to the pushes awaiting them on the loop.

librdkafka calls a push's delivery callback inside `Producer.poll()`: on the sink's polling thread when the
loop is idle, or on the loop itself when it polls between pushes under load. Either way the callback only
appends `(future, error)` to a deque (append and popleft are atomic, so no lock), and the futures are
resolved on the loop:

- from the polling thread, `wake()` asks the loop for one `drain()` per batch, and only when no drain is
  already pending: under load many polls' reports share one cross-thread wake-up (a self-pipe write and an
  event-loop handle each) instead of one per poll;
- on the loop itself, `drain()` is called directly after polling: no wake-up at all.

`drain()` clears the pending flag before it empties the deque, so a report appended after the flag check in
`wake()` is either taken by the drain already running or gets a drain of its own: none is left behind.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

__all__ = ["DeliveryFailed", "DeliveryReports"]


class DeliveryFailed(Exception):
    """The broker did not store the record: `err` is librdkafka's KafkaError."""

    def __init__(self, err: Any) -> None:
        super().__init__(str(err))
        self.err = err


class DeliveryReports:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._reports: deque[tuple[asyncio.Future[None], Any]] = deque()
        self._drain_pending = False
        self.wakeups = 0  # cross-thread drains requested (for tests and the curious)

    def add(self, future: asyncio.Future[None], err: Any) -> None:
        """A delivery report (err None: stored). Any thread; called from librdkafka's delivery callback."""
        self._reports.append((future, err))

    def wake(self) -> None:
        """From a thread other than the loop's, after a poll: have the loop drain, unless a drain is pending."""
        if not self._reports or self._drain_pending:
            return
        loop = self._loop
        if loop.is_closed():
            return
        self._drain_pending = True
        self.wakeups += 1
        loop.call_soon_threadsafe(self.drain)

    def drain(self) -> int:
        """On the loop: resolve every future reported so far (a future already done, e.g. failed by the
        lost-report sweep, is left alone); return how many reports were taken."""
        self._drain_pending = False
        pop = self._reports.popleft
        taken = 0
        while True:
            try:
                future, err = pop()
            except IndexError:
                return taken
            taken += 1
            if future.done():
                continue
            if err is None:
                future.set_result(None)
            else:
                future.set_exception(DeliveryFailed(err))

    def __len__(self) -> int:
        return len(self._reports)
