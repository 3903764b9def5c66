"""The lean ingest path: `POST /v1/metrics` read straight off the socket, everything else served by aiohttp.

aiohttp's request machinery (parser callbacks, Request/Response objects, router, writer) was about a third
of the receiver's CPU per push. This asyncio protocol owns the listening socket and reads request heads
itself, but only accepts the plainest form of the one request the brokers send:

    POST /v1/metrics HTTP/1.1, one Content-Length, token-named headers with printable ASCII values,
    no Transfer-Encoding, Expect, Upgrade, obs-fold, or repeated header, a head under 8 KiB

Anything else, on any request of a connection, hands the connection over to aiohttp at that request's
first byte (its RequestHandler gets the transport and the unread bytes), so every other route, every
unusual or malformed request and every error the HTTP parser answers behave exactly as aiohttp does. The
push itself goes through `ReceiverServer.handle_push`, the same code as the aiohttp route. This module
names what it needs of the server (`PushHandler`) and the `Answer` both HTTP layers send, so it imports no
server: kct.receiver.server builds on it, never the reverse.

This is the receiver's one ingest engine: every connection starts here. The hand-over is its documented
fallback for what is not plain HTTP/1.1 (chunked bodies, `Expect: 100-continue`, odd or malformed heads),
so aiohttp's `POST /v1/metrics` route only ever serves pushes handed over, through the same handler. With
`logging.accessLog` on, the pushes answered here are logged in aiohttp's access-log format by
`kct.receiver.accesslog`; aiohttp logs what it serves itself.

What a connection may hold is bounded (`connections` in the config, `ConnectionBudget` here): a cap on
open connections (over it, 503 and close at once), a header timeout from the connection's opening or a
request's first byte, a body timeout from the end of the head, an idle timeout between keep-alive requests,
and a cap on the bytes of unfinished requests over all connections. A request's head is screened
(`PushHandler.screen_head`: token, content type, declared length) as soon as it is whole and its body is
not: a refused request is answered, the sending side shut, and what the sender still writes discarded for a
short linger (so the answer is read rather than lost to a reset), never buffered. Handed-over connections
still count against the cap until they close; aiohttp's keep-alive timeout is the idle timeout.

Requests on one connection are answered in order, one at a time (as aiohttp does): while a push waits for
Kafka, what else the sender writes is buffered (reading pauses only past one maximal request, so the usual
one-push-at-a-time sender costs no pause/resume system calls).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from email.utils import formatdate
from typing import Any, Protocol, cast

from kct.receiver.accesslog import PushAccessLog
from kct.receiver.config import ReceiverConfig
from kct.receiver.errors import BadRequest

__all__ = ["Answer", "ConnectionBudget", "ConnectionDeadlines", "LeanIngestProtocol", "PushHandler",
           "encode_answer", "parse_head"]

MAX_HEAD = 8192
_NEVER = float("inf")
_PREFIX = b"POST /v1/metrics HTTP/1.1\r\n"
_TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
# header values: visible ASCII, space and tab (no obs-text, no controls)
_VALUE_BAD = bytes(c for c in range(256) if not (c == 9 or 32 <= c <= 126))
_REFUSED = frozenset({"transfer-encoding", "expect", "upgrade"})
# After refusing a request before its body, what the sender still writes is read and dropped this long at
# most: closing at once would reset the connection, and a reset can destroy the answer before it is read.
LINGER_S = 2.0
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 408: "Request Timeout",
            413: "Payload Too Large",
            415: "Unsupported Media Type", 429: "Too Many Requests", 500: "Internal Server Error",
            503: "Service Unavailable"}


@dataclass(frozen=True, slots=True)
class Answer:
    """What to send back for a push: status, body, content type, extra headers."""

    status: int
    body: bytes
    content_type: str
    headers: tuple[tuple[str, str], ...] = ()


class PushHandler(Protocol):
    """What the lean path needs of the server behind it (kct.receiver.server.ReceiverServer)."""

    @property
    def config(self) -> ReceiverConfig: ...

    @property
    def draining(self) -> bool: ...

    async def handle_push(self, headers: Mapping[str, str], declared_length: int | None,
                          read_body: Callable[[], Awaitable[bytes]], peer_principal: str | None,
                          arrived: float | None = None) -> Answer:
        """One `POST /v1/metrics` (`headers` with lower-case names) whose request was whole at `arrived`
        (time.monotonic(); its wait for a turn counts from then)."""
        ...

    def screen_head(self, headers: Mapping[str, str], declared_length: int,
                    peer_principal: str | None = None) -> Answer | None:
        """The refusal of a request from its head alone (client certificate, token, content type, declared
        length), counted as `handle_push` counts it; None when the body is worth reading."""
        ...

    def peer_principal(self, cert: Any) -> str | None:
        """The identity a connection's verified client certificate gives (None: none, or not accepted)."""
        ...

    def connection_closed(self, reason: str) -> Answer:
        """Count a connection the lean path closes to protect the receiver (`reason`: connection_limit,
        buffer_limit, header_timeout, body_timeout, idle_timeout) and give the answer to send first."""
        ...


class ConnectionBudget:
    """Open connections and bytes of unfinished requests, shared by every connection of one listener."""

    __slots__ = ("buffered", "open")

    def __init__(self) -> None:
        self.open = 0
        self.buffered = 0


class ConnectionDeadlines:
    """The lean connections of one listener and the waits their timeouts bound, swept by one task.

    A connection changes phase (header, body, idle) on every push, so a timer per phase change meant a
    `call_later` and a `cancel` per push, about 20 µs of the loop's time at a few thousand pushes a second.
    Here a phase change only writes its deadline; `run` checks them all every quarter of the shortest
    timeout (between 50 ms and 1 s), so a timeout fires that much late at most, never early.
    """

    __slots__ = ("_delays", "connections", "interval")

    def __init__(self, config: ReceiverConfig) -> None:
        cfg = config.connections
        self._delays = {"header": cfg.header_timeout_ms / 1000.0, "body": cfg.body_timeout_ms / 1000.0,
                        "idle": cfg.idle_timeout_ms / 1000.0, "linger": LINGER_S}
        self.connections: set[LeanIngestProtocol] = set()
        self.interval = min(1.0, max(0.05, min(self._delays.values()) / 4))

    def delay(self, phase: str) -> float:
        return self._delays[phase]

    def sweep(self, now: float) -> int:
        """Expire every connection whose deadline is past at `now` (time.monotonic()); how many."""
        due = [c for c in self.connections if c.deadline <= now]
        for connection in due:
            connection.expire(now)
        return len(due)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.sweep(time.monotonic())


class _Date:
    """The Date header, formatted once per second."""

    def __init__(self) -> None:
        self._second = -1
        self._value = b""

    def header(self) -> bytes:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._value = f"Date: {formatdate(now, usegmt=True)}\r\n".encode()
        return self._value


_DATE = _Date()


def parse_head(head: bytes) -> tuple[dict[str, str], int, bool] | None:
    """(headers by lower-case name, Content-Length, keep-alive) for a head this path accepts, else None.
    `head` is the bytes after the request line, without the final CRLF CRLF."""
    headers: dict[str, str] = {}
    for line in head.split(b"\r\n") if head else ():
        name, sep, value = line.partition(b":")
        if not sep or not name or not _TOKEN.issuperset(name) or value.translate(None, _VALUE_BAD) != value:
            return None
        key = name.decode("ascii").lower()
        if key in headers or key in _REFUSED:
            return None
        headers[key] = value.strip(b" \t").decode("ascii")
    length = headers.get("content-length")
    if length is None or not length.isdigit() or len(length) > 12:
        return None
    connection = headers.get("connection", "keep-alive").lower()
    if connection not in ("keep-alive", "close"):
        return None
    return headers, int(length), connection == "keep-alive"


def encode_answer(answer: Answer, keep_alive: bool) -> bytes:
    extra = "".join(f"{k}: {v}\r\n" for k, v in answer.headers)
    head = (f"HTTP/1.1 {answer.status} {_REASONS.get(answer.status, 'Unknown')}\r\n"
            f"Content-Type: {answer.content_type}\r\nContent-Length: {len(answer.body)}\r\n{extra}"
            f"{'' if keep_alive else 'Connection: close' + chr(13) + chr(10)}").encode()
    return head + _DATE.header() + b"Server: kct-receiver\r\n\r\n" + answer.body


class LeanIngestProtocol(asyncio.Protocol):
    def __init__(self, server: PushHandler, aiohttp_factory: Callable[[], Any],
                 deadlines: ConnectionDeadlines, budget: ConnectionBudget,
                 access_log: PushAccessLog | None = None) -> None:
        self._server = server
        self._access_log = access_log
        self._aiohttp_factory = aiohttp_factory
        self._deadlines = deadlines
        self._budget = budget
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._held = 0  # this connection's share of budget.buffered (the buffer's length when last counted)
        self._counted = False  # counted in budget.open (until closed or handed over)
        self._busy = False  # a push of this connection is being handled
        self._closed = False
        self._eof = False
        self._paused = False
        self._refused = False  # answered before its body: what arrives now is dropped until the close
        self._peer: str | None = None
        self._head: tuple[dict[str, str], int, bool, int] | None = None  # the head of the request being read
        self._screened = False  # that head went through `screen_head`
        self._phase = ""  # what the deadline bounds: header, body, idle, linger; "" while a push is handled
        self.deadline = _NEVER  # time.monotonic() past which `ConnectionDeadlines` expires the phase

    # -- connection ------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = stream = cast(asyncio.Transport, transport)  # a stream transport (TCP or TLS)
        budget = self._budget
        if budget.open >= self._server.config.connections.max_open:
            # answered before the sender wrote anything, so closing at once resets nothing it sent
            self._refused = True
            stream.write(encode_answer(self._server.connection_closed("connection_limit"), False))
            transport.close()
            return
        budget.open += 1
        self._counted = True
        self._deadlines.connections.add(self)
        self._peer = self._server.peer_principal(transport.get_extra_info("peercert"))
        self._arm("header")

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._deadlines.connections.discard(self)
        self._arm("")
        if self._counted:
            self._counted = False
            self._budget.open -= 1
        self._budget.buffered -= self._held
        self._held = 0

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # answered already; lingering until the sender closes
        self._buffer += data
        if not self._busy:
            self._next()
        elif len(self._buffer) > self._server.config.limits.max_compressed_bytes + MAX_HEAD:
            # a sender pipelining while its push is handled: stop reading until that one is answered
            assert self._transport is not None
            self._transport.pause_reading()
            self._paused = True
        self._account()

    def eof_received(self) -> bool | None:
        if self._refused:
            return None  # the sender is done: close
        if self._busy:
            self._eof = True  # answer the push being handled, then close
            return True
        if not self._buffer:
            return None
        head = self._head or self._complete_head()
        if head is None:
            self._hand_over()  # a partial head then EOF: aiohttp deals with it as it would have
            return None
        # a push whose body the sender cut short: refused as the aiohttp route refuses it (incomplete_body)
        headers, length, _, _ = head
        self._buffer = bytearray()
        self._account()
        self._eof = True
        self._start(headers, length, None, keep_alive=False)
        return True

    @property
    def idle(self) -> bool:
        return not self._busy and not self._buffer

    def close(self) -> None:
        if self._transport is not None and not self._closed:
            self._transport.close()

    # -- bounds ----------------------------------------------------------------------------------
    def _account(self) -> None:
        """Bring budget.buffered up to date with this connection's buffer; over the cap, refuse it."""
        held = len(self._buffer)
        budget = self._budget
        budget.buffered += held - self._held
        self._held = held
        if (budget.buffered > self._server.config.connections.max_buffered_bytes and held and not self._busy
                and not self._refused):
            self._refuse(self._server.connection_closed("buffer_limit"))

    def _arm(self, phase: str) -> None:
        """Bound the wait `phase` names (a new deadline only when the phase changes); "" disarms."""
        if phase == self._phase:
            return
        self._phase = phase
        self.deadline = (time.monotonic() + self._deadlines.delay(phase)) if phase and not self._closed else _NEVER

    def expire(self, now: float) -> None:
        """The phase's deadline passed (`ConnectionDeadlines.sweep`): close or refuse as the phase says."""
        if self.deadline > now:
            return
        phase, self.deadline = self._phase, _NEVER
        if phase == "linger":
            self.close()
        elif phase == "idle":
            self._server.connection_closed("idle_timeout")
            self._phase = ""
            self.close()
        elif phase == "header" and not self._buffer:
            # not a byte of a request yet (a fresh or pooled connection): closed silently, as when idle
            self._server.connection_closed("header_timeout")
            self._phase = ""
            self.close()
        elif phase in ("header", "body"):
            self._phase = ""
            self._refuse(self._server.connection_closed(f"{phase}_timeout"))

    def _refuse(self, answer: Answer) -> None:
        """Answer, end the connection's sending side, drop what still arrives; close after a short linger."""
        transport = self._transport
        assert transport is not None
        self._refused = True
        self._buffer = bytearray()
        self._account()
        if self._closed:
            return
        transport.write(encode_answer(answer, keep_alive=False))
        if self._paused:
            self._paused = False
            transport.resume_reading()
        if transport.can_write_eof():
            transport.write_eof()
        self._arm("linger")

    # -- requests --------------------------------------------------------------------------------
    def _complete_head(self) -> tuple[dict[str, str], int, bool, int] | None:
        """(headers, Content-Length, keep-alive, body offset) when the buffer starts with a whole head this
        path accepts; None otherwise."""
        buf = self._buffer
        if not buf.startswith(_PREFIX):
            return None
        end = buf.find(b"\r\n\r\n", 0, MAX_HEAD)
        if end < 0:
            return None
        parsed = parse_head(bytes(buf[len(_PREFIX):end]))
        if parsed is None:
            return None
        return (*parsed, end + 4)

    def _next(self) -> None:
        """Start the next complete request in the buffer, hand the connection over, or wait for more (with
        the header or body timeout running)."""
        buf = self._buffer
        if not buf:
            return
        head = self._head
        if head is None:
            if len(buf) < len(_PREFIX) and _PREFIX.startswith(buf):
                self._arm("header")
                return
            head = self._complete_head()
            if head is None:
                if not buf.startswith(_PREFIX) or buf.find(b"\r\n\r\n", 0, MAX_HEAD) >= 0 or len(buf) >= MAX_HEAD:
                    self._hand_over()
                else:
                    self._arm("header")  # the head is still arriving
                return
        headers, length, keep_alive, body_start = head
        if length > self._server.config.limits.max_compressed_bytes or len(buf) < body_start + length:
            if not self._screened:
                # the body is not all here: refuse on the head now rather than wait for (and hold) the body
                self._head, self._screened = head, True
                answer = self._server.screen_head(headers, length, self._peer)
                if answer is not None:
                    self._refuse(answer)
                    return
            self._arm("body")
            return
        body = bytes(buf[body_start:body_start + length])
        del buf[:body_start + length]
        self._start(headers, length, body, keep_alive)

    def _start(self, headers: dict[str, str], length: int, body: bytes | None, keep_alive: bool) -> None:
        self._busy = True
        self._head, self._screened = None, False
        self._arm("")
        asyncio.get_running_loop().create_task(self._answer(headers, length, body, keep_alive, time.monotonic()))

    async def _answer(self, headers: dict[str, str], length: int, body: bytes | None, keep_alive: bool,
                      arrived: float) -> None:
        async def read_body() -> bytes:
            if body is None:
                raise BadRequest("incomplete_body", "the connection closed before the request body was complete")
            return body

        answer = await self._server.handle_push(headers, length, read_body, self._peer, arrived)
        transport = self._transport
        if self._closed or transport is None:
            return
        keep_alive = keep_alive and not self._server.draining and not self._eof
        wire = encode_answer(answer, keep_alive)
        transport.write(wire)
        if self._access_log is not None:
            self._log_access(transport, headers, answer.status, len(wire), arrived)
        self._busy = False
        if not keep_alive:
            transport.close()
            return
        if self._paused:
            self._paused = False
            transport.resume_reading()
        if self._buffer:
            self._next()
            self._account()
        else:
            self._arm("idle")

    def _log_access(self, transport: asyncio.Transport, headers: dict[str, str], status: int, sent: int,
                    arrived: float) -> None:
        assert self._access_log is not None
        peer = transport.get_extra_info("peername")
        remote = str(peer[0]) if isinstance(peer, tuple) and peer else None
        self._access_log.push(remote, headers, status, sent, time.monotonic() - arrived)

    def _hand_over(self) -> None:
        """From this request on, the connection is aiohttp's: its handler gets the transport and the bytes
        (and still counts against `connections.maxOpen` until it closes)."""
        transport = self._transport
        assert transport is not None
        self._deadlines.connections.discard(self)
        self._arm("")
        self._counted = False  # the open count goes with the connection
        handler = _HandedOver(self._aiohttp_factory(), self._budget)
        transport.set_protocol(handler)
        handler.connection_made(transport)
        pending, self._buffer = bytes(self._buffer), bytearray()
        self._account()
        if pending:
            handler.data_received(pending)


class _HandedOver(asyncio.Protocol):
    """aiohttp's request handler on a handed-over connection, passed every event, giving the connection's
    place in `ConnectionBudget.open` back when it closes."""

    def __init__(self, handler: Any, budget: ConnectionBudget) -> None:
        self._handler = handler
        self._budget = budget

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._handler.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._budget.open -= 1
        self._handler.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._handler.data_received(data)

    def eof_received(self) -> bool | None:
        return self._handler.eof_received()  # type: ignore[no-any-return]

    def pause_writing(self) -> None:
        self._handler.pause_writing()

    def resume_writing(self) -> None:
        self._handler.resume_writing()
