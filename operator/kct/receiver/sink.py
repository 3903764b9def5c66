"""Where accepted pushes go: the `Sink` port, and an in-memory fake for tests and benchmarks.

The real implementation is `kct.receiver.kafka_sink.KafkaSink`. A sink's `send` returns only once the
record is durably stored (Kafka: acknowledged by all in-sync replicas) and raises a `PushRejected`
(503 Unavailable, or 413 when the record can never fit) otherwise, so the HTTP layer answers 200 exactly
when a record exists.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from kct.receiver.errors import Unavailable

__all__ = ["MemorySink", "Record", "Sink"]


@dataclass(frozen=True)
class Record:
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]


@runtime_checkable
class Sink(Protocol):
    async def start(self) -> None:
        """Connect; return when ready or raise."""

    async def send(self, key: bytes, value: bytes, headers: Sequence[tuple[str, bytes]]) -> None:
        """Store one record durably or raise PushRejected."""

    def ready(self) -> bool:
        """True when the sink can currently store records (drives /readyz and fast 503s)."""

    def inflight(self) -> int:
        """Records handed over but not yet acknowledged."""

    async def close(self, timeout_s: float) -> None:
        """Flush what is in flight (at most `timeout_s`) and release resources."""


class MemorySink:
    """In-memory `Sink`: records in a list; can be made unavailable or slow to exercise the 503 paths."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.available = True
        self.delay_s = 0.0
        self.started = False
        self.closed = False
        self._inflight = 0

    async def start(self) -> None:
        self.started = True

    async def send(self, key: bytes, value: bytes, headers: Sequence[tuple[str, bytes]]) -> None:
        self._inflight += 1
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            if not self.available:
                raise Unavailable("kafka_unavailable", "Kafka is unavailable (fake)", retry_after_s=1)
            self.records.append(Record(key, value, tuple(headers)))
        finally:
            self._inflight -= 1

    def ready(self) -> bool:
        return self.available

    def inflight(self) -> int:
        return self._inflight

    async def close(self, timeout_s: float) -> None:
        self.closed = True
