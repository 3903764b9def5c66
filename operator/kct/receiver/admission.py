"""Fair admission under overload: pushes are served in arrival order, or refused early with 503 and
Retry-After; none waits behind a backlog longer than `limits.maxQueueWaitMs`.

Why: under overload (1,024 connections on one core, bench/receiver_vs_collector.py) one push in a hundred
waited about five seconds while the median waited a tenth of that. Traced per push (the closing note of
issue 47), the wait was not in one place: a push whose request was whole waited for the event loop to
start its task behind every request read in the same loop iteration (p99 ~3 s on a loaded core), then for
Kafka's acknowledgement behind the records produced before it. With every push admitted, the slowest
waited for the whole backlog, then did the work of a push its sender had nearly given up on.

So a push's age counts from its arrival (the request whole, off the socket), and it is admitted only:

- if it is no older than the bound when its turn comes: otherwise 503 `queue_wait`, before its body is
  decompressed or decoded, so a backlog sheds its oldest, cheapest-to-refuse work first and the pushes
  behind it are served sooner;
- into one of `limits.maxInflightRequests` places; with none free it waits in a FIFO queue (arrival
  order, at most `limits.maxQueuedRequests` long: 503 `queue_full` above) until a place frees or its
  deadline (arrival + bound) passes (503 `queue_wait`).

What admission cannot bound: the time before a request is read. The multi-second tail the benchmark
showed at 1,024 connections was each connection's *first* push (its `first_p99_ms` equals the run's
longest push): with uvloop, a few of a burst of new connections stayed in the kernel's accept queue and
were accepted a few per second while the loop was busy (connection_made times traced per connection),
no listen overflow counted; with `runtime.eventLoop: asyncio` every burst was accepted within half a
second and the first-push p99 was ~1 s, so asyncio's loop is now the default (config.RuntimeConfig).
Brokers keep their connections open, so this is a cost of connection storms (a receiver restart, a
benchmark's new connections), not of steady pushing.

A refused push never reaches the pipeline, so it never becomes a record; an admitted one is processed as
before, to Kafka's acknowledgement. The Retry-After is `limits.overloadRetryAfterSeconds`. Everything
here runs on the event loop's thread, so the counters need no lock.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

from kct.receiver.errors import Unavailable

__all__ = ["Admission"]


class Admission:
    """Bounds the work in flight (pushes being handled, and the body bytes they hold, received plus
    decompressed) and the time a push may wait for a place, so memory and latency stay bounded whatever
    the senders do."""

    def __init__(
        self,
        max_requests: int,
        max_bytes: int,
        retry_after_s: int,
        *,
        max_queue_wait_s: float = 0.5,
        max_queued: int = 1024,
        clock: Callable[[], float] = time.monotonic,  # the lean path stamps arrivals with time.monotonic()
    ) -> None:
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.retry_after_s = retry_after_s
        self.max_queue_wait_s = max_queue_wait_s
        self.max_queued = max_queued
        self.requests = 0
        self.bytes = 0
        self._clock = clock
        self._waiting: deque[asyncio.Future[None]] = deque()  # arrival order; done ones are skipped
        self.queued = 0  # futures in `_waiting` not yet done (pushes waiting for a place)

    async def enter(self, arrived: float | None = None) -> None:
        """Take a place for a push that arrived at `arrived` (on `clock`; None: now), waiting in arrival
        order for one when all are taken; raise Unavailable (503, Retry-After) when the push waited, or
        would wait, past the bound. The caller calls `leave()` once done, only if this returned."""
        now = self._clock()
        deadline = (now if arrived is None else arrived) + self.max_queue_wait_s
        if now > deadline:
            raise self._refusal("queue_wait", f"waited {now - deadline + self.max_queue_wait_s:.3f} s for its turn")
        if self.requests < self.max_requests and not self.queued:
            self.requests += 1
            return
        if self.queued >= self.max_queued:
            raise self._refusal("queue_full", f"{self.queued} pushes already waiting (limits.maxQueuedRequests)")
        loop = asyncio.get_running_loop()
        turn: asyncio.Future[None] = loop.create_future()
        self._waiting.append(turn)
        self.queued += 1
        timer = loop.call_later(deadline - now, self._expire, turn)
        try:
            await turn  # resolved by `leave()` with the place already counted as ours
        except asyncio.CancelledError:
            if turn.cancelled():
                self.queued -= 1  # cancelled while waiting (`leave()` skips it uncounted)
            elif turn.exception() is None:
                self.leave()  # given a place, then cancelled before using it: pass it on
            raise
        finally:
            timer.cancel()

    def leave(self) -> None:
        """Give a place back: to the push waiting longest, if any, else to the pool."""
        while self._waiting:
            turn = self._waiting.popleft()
            if turn.done():
                continue  # expired (uncounted there) or cancelled (uncounted by its waiter)
            self.queued -= 1
            turn.set_result(None)  # the place passes to it: `requests` unchanged
            return
        self.requests -= 1

    def _expire(self, turn: asyncio.Future[None]) -> None:
        if not turn.done():
            self.queued -= 1
            turn.set_exception(self._refusal("queue_wait", "no place freed within limits.maxQueueWaitMs"))

    def reserve(self, n: int) -> None:
        if self.bytes + n > self.max_bytes:
            raise Unavailable(
                "overloaded", f"{self.bytes} bytes in flight (limits.maxInflightBytes)",
                retry_after_s=self.retry_after_s,
            )
        self.bytes += n

    def release(self, n: int) -> None:
        self.bytes -= n

    def _refusal(self, reason: str, detail: str) -> Unavailable:
        return Unavailable(
            reason, f"overloaded: {detail}; {self.requests} pushes in flight (limits.maxInflightRequests), "
            f"bound {self.max_queue_wait_s * 1000:.0f} ms (limits.maxQueueWaitMs)",
            retry_after_s=self.retry_after_s,
        )
