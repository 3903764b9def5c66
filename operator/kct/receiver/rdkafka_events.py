"""A file descriptor that becomes readable when a confluent-kafka producer has events to serve.

librdkafka hands delivery reports (and error and log events) to the application through the producer's
main queue, served by `Producer.poll()`. confluent-kafka offers no way to wait for that queue other than a
blocking `poll()` on some thread, so the sink needed a polling thread: every delivery report woke that
thread, which took the GIL, ran the callback and then woke the event loop. On a quiet receiver that
hand-off was two of the ~7 context switches a push cost.

librdkafka itself can signal the queue on a file descriptor (`rd_kafka_queue_io_event_enable`: it writes a
payload whenever an event lands on the empty queue). This module reaches that C function through ctypes
in the librdkafka that confluent-kafka already loaded, with the producer's `rd_kafka_t *`, so the event
loop can watch the descriptor (`add_reader`) and call `poll(0)` itself when it turns readable: no thread,
no GIL hand-off.

The `rd_kafka_t *` is the first field after the object header of confluent-kafka's handle type (its C
`Handle` struct), which Python code cannot see. Nothing is trusted blindly: the librdkafka found must be
the version confluent-kafka reports, and the pointer read must be a producer whose opaque (which
confluent-kafka sets to the handle object itself) is this very `Producer`. When anything does not match,
`watch_main_queue` returns None and the sink keeps its polling thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
from dataclasses import dataclass
from typing import Any

__all__ = ["MainQueueWatch", "watch_main_queue"]

log = logging.getLogger(__name__)

_RD_KAFKA_PRODUCER = 0  # rd_kafka_type_t
_PAYLOAD = (1).to_bytes(8, "little")  # an eventfd takes 8-byte writes: each adds 1 to its counter


@dataclass(frozen=True)
class MainQueueWatch:
    """A non-blocking eventfd librdkafka writes to when the producer's main queue gets an event."""

    fd: int
    _lib: Any
    _rk: int

    def clear(self) -> None:
        """Reset the descriptor before serving the queue, so an event enqueued meanwhile makes it readable
        again (librdkafka writes only when the queue goes from empty to non-empty)."""
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self.fd)

    def close(self) -> None:
        """Stop librdkafka writing to the descriptor, then close it. Call while the producer is alive."""
        queue = self._lib.rd_kafka_queue_get_main(self._rk)
        self._lib.rd_kafka_queue_io_event_enable(queue, -1, None, 0)
        self._lib.rd_kafka_queue_destroy(queue)
        os.close(self.fd)


@functools.cache
def _librdkafka() -> Any | None:
    """The librdkafka confluent-kafka loaded (by its path in this process's memory map), or None."""
    import confluent_kafka

    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            paths = {line.split()[-1] for line in maps if "librdkafka" in line and "/" in line}
    except OSError:
        return None
    if len(paths) != 1:
        return None
    lib = ctypes.CDLL(paths.pop())  # already loaded: dlopen returns the same object
    lib.rd_kafka_version.restype = ctypes.c_int
    if lib.rd_kafka_version() != confluent_kafka.libversion()[1]:
        return None
    lib.rd_kafka_type.restype, lib.rd_kafka_type.argtypes = ctypes.c_int, [ctypes.c_void_p]
    lib.rd_kafka_opaque.restype, lib.rd_kafka_opaque.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
    lib.rd_kafka_queue_get_main.restype = ctypes.c_void_p
    lib.rd_kafka_queue_get_main.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_queue_destroy.restype, lib.rd_kafka_queue_destroy.argtypes = None, [ctypes.c_void_p]
    lib.rd_kafka_queue_io_event_enable.restype = None
    lib.rd_kafka_queue_io_event_enable.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
    return lib


def _handle_of(producer: object, lib: Any) -> int | None:
    """The producer's `rd_kafka_t *`, checked against what librdkafka says about it."""
    from confluent_kafka import Producer

    if not isinstance(producer, Producer):  # only its C type is known to hold the handle there
        return None
    rk = ctypes.c_void_p.from_address(id(producer) + object.__basicsize__).value
    if not rk or lib.rd_kafka_opaque(rk) != id(producer) or lib.rd_kafka_type(rk) != _RD_KAFKA_PRODUCER:
        return None
    return int(rk)


def watch_main_queue(producer: object) -> MainQueueWatch | None:
    """Have librdkafka signal the producer's main queue on a new eventfd; None where it cannot (not Linux,
    another librdkafka layout), said in the log: then serve the queue with a polling thread."""
    if not hasattr(os, "eventfd"):
        log.info("this platform has no eventfd; delivery reports use a polling thread")
        return None
    lib = _librdkafka()
    if lib is None:
        log.info("librdkafka's queue events are not reachable here; delivery reports use a polling thread")
        return None
    rk = _handle_of(producer, lib)
    if rk is None:
        log.info("the producer's librdkafka handle did not check out; delivery reports use a polling thread")
        return None
    fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    queue = lib.rd_kafka_queue_get_main(rk)
    lib.rd_kafka_queue_io_event_enable(queue, fd, _PAYLOAD, len(_PAYLOAD))
    lib.rd_kafka_queue_destroy(queue)  # the reference only: the queue and its IO event stay
    # Events queued before now would never be signalled (the queue is not empty, so librdkafka does not
    # write until it has been served): start readable, so the first serve takes them.
    os.eventfd_write(fd, 1)
    return MainQueueWatch(fd, lib, rk)
