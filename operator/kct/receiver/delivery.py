"""Kafka delivery reports, from whichever thread polled the producer to the pushes awaiting them on the loop.

librdkafka calls a push's delivery callback inside `Producer.poll()`: on the sink's polling thread when the
loop is idle, or on the loop itself when it polls between pushes under load. Either way the callback only
appends `(future, error)` to a deque (append and popleft are atomic, so no lock), and the futures are
resolved on the loop:

- from the polling thread, `wake()` asks the loop for one `drain()` per batch, and only when no drain is
  already pending: under load many polls' reports share one cross-thread wake-up instead of one per poll;
- on the loop itself, `drain()` is called directly after polling: no wake-up at all.

The wake-up is a write to an eventfd the loop watches (`add_reader`), made with the GIL released
(`os.eventfd_write`). `call_soon_threadsafe` would wake the loop while the polling thread still holds the
GIL (uvloop writes its wake-up handle without releasing it): on a busy core the woken loop runs at once,
blocks on the GIL, and both threads switch once more before the loop can drain (one A/B run at 500
pushes/s, the receiver on one core of a loaded machine: 6.4 voluntary context switches per push, 6.7
before). Without eventfd (not Linux) or on a loop without `add_reader`, `call_soon_threadsafe` is the
fallback. The sink uses this path only where librdkafka cannot signal the loop itself
(`kct.receiver.rdkafka_events`); there the loop polls the producer and calls `drain()` directly.

`drain()` clears the pending flag before it empties the deque, so a report appended after the flag check in
`wake()` is either taken by the drain already running or gets a drain of its own: none is left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
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
        self._wake_fd = _watched_eventfd(loop, self._on_wake_fd)

    @property
    def wakes_by_eventfd(self) -> bool:
        return self._wake_fd is not None

    def close(self) -> None:
        """On the loop, once no thread calls wake() any more (the poller has stopped): release the eventfd.
        Closing earlier could let a late wake() write into whatever file reuses the descriptor number."""
        fd, self._wake_fd = self._wake_fd, None
        if fd is None:
            return
        if not self._loop.is_closed():
            self._loop.remove_reader(fd)
        os.close(fd)

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
        fd = self._wake_fd
        if fd is None:
            loop.call_soon_threadsafe(self.drain)
            return
        try:
            os.eventfd_write(fd, 1)  # the GIL is released for the write
        except OSError:  # counter full (2^64 - 2) cannot happen: the loop reads it at every drain
            loop.call_soon_threadsafe(self.drain)

    def _on_wake_fd(self) -> None:
        fd = self._wake_fd
        if fd is not None:
            with contextlib.suppress(BlockingIOError):  # already read by an earlier callback
                os.eventfd_read(fd)
        self.drain()

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


def _watched_eventfd(loop: asyncio.AbstractEventLoop, on_readable: Any) -> int | None:
    """A non-blocking eventfd the loop calls `on_readable` for, or None where there is none (not Linux,
    a closed loop, a loop without add_reader)."""
    if not hasattr(os, "eventfd"):
        return None
    fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    try:
        loop.add_reader(fd, on_readable)
    except (RuntimeError, NotImplementedError):
        os.close(fd)
        return None
    return fd
