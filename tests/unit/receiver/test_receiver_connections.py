"""Connection bounds of the lean ingest path: heads screened before bodies, timeouts, the connection and
buffered-bytes caps (kct.receiver.ingest, `connections` in the config)."""

from __future__ import annotations

import asyncio
import re
import time

from conftest import PROTOBUF, TOKEN, Receiver, ReceiverFactory, base_config, make_request
from waiting import eventually_async

from kct.receiver.ingest import ConnectionDeadlines

VALID = make_request().SerializeToString()
ANSWER_DEADLINE_S = 10.0  # an answer that should come at once (or after a sub-second timeout), on a busy machine


def _head(length: int, *, token: str = TOKEN, content_type: str = PROTOBUF) -> bytes:
    return (f"POST /v1/metrics HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n"
            f"Authorization: Bearer {token}\r\nkct-client-instance-id: i-1\r\nContent-Length: {length}\r\n\r\n"
            ).encode()


async def _answer_then_eof(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    """(status, headers) of the one answer the receiver sends before ending the connection."""
    data = await asyncio.wait_for(reader.read(-1), ANSWER_DEADLINE_S)  # everything, until the receiver's EOF
    head, _, _ = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    return int(lines[0].split()[1]), headers


async def _counter(receiver: Receiver, name: str, **labels: str) -> float:
    """A counter as /metrics shows it (rendered in-process: a test may have every connection taken)."""
    text = receiver.server.telemetry.render().decode()
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))  # exposition sorts labels
    match = re.search(rf"^{name}\{{{re.escape(want)}\}} (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def _connections(**settings: int) -> dict[str, int]:
    return {"headerTimeoutMs": 10_000, "bodyTimeoutMs": 10_000, "idleTimeoutMs": 10_000, **settings}


async def test_a_wrong_token_is_refused_from_the_head_before_the_body(receiver: Receiver) -> None:
    """Given a head with a wrong token declaring a body, when no body byte has been sent, then 401 comes back
    and the connection ends: the receiver never waited for the body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", receiver.server.port)
    writer.write(_head(len(VALID), token="wrong"))
    await writer.drain()
    status, headers = await _answer_then_eof(reader)
    writer.close()
    assert status == 401 and headers["connection"] == "close" and "www-authenticate" in headers
    assert receiver.sink.records == []
    assert await _counter(receiver, "kct_receiver_rejections_total", reason="unauthenticated",
                          http_response_status_code="401") == 1


async def test_a_wrong_content_type_is_refused_from_the_head(receiver: Receiver) -> None:
    """Given a head with an unsupported content type and no body yet, then 415 comes back and the connection
    ends."""
    reader, writer = await asyncio.open_connection("127.0.0.1", receiver.server.port)
    writer.write(_head(len(VALID), content_type="text/plain"))
    await writer.drain()
    status, _ = await _answer_then_eof(reader)
    writer.close()
    assert status == 415 and receiver.sink.records == []


async def test_a_valid_head_waits_for_its_body(make_receiver: ReceiverFactory) -> None:
    """Given a valid head whose body follows in a later write, then the push is stored and answered 200 (the
    head's screening let it through)."""
    receiver = await make_receiver()
    reader, writer = await asyncio.open_connection("127.0.0.1", receiver.server.port)
    writer.write(_head(len(VALID)) + VALID[:5])
    await writer.drain()
    await eventually_async(lambda: receiver.server.connection_budget.buffered > 0, timeout=ANSWER_DEADLINE_S,
                           interval=0.01, what="the head and the first body bytes to be read")
    writer.write(VALID[5:])
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), ANSWER_DEADLINE_S)
    writer.close()
    assert head.startswith(b"HTTP/1.1 200 ") and len(receiver.sink.records) == 1


async def test_a_head_not_finished_in_time_is_answered_408(make_receiver: ReceiverFactory) -> None:
    """Given headerTimeoutMs 200, when a sender writes part of a head and stops, then 408 comes back and the
    connection ends; when a sender connects and writes nothing, then the connection is closed without an
    answer; each is counted as a header_timeout."""
    receiver = await make_receiver(base_config(connections=_connections(headerTimeoutMs=200)))
    reader, writer = await asyncio.open_connection("127.0.0.1", receiver.server.port)
    writer.write(_head(10)[:20])
    await writer.drain()
    status, _ = await _answer_then_eof(reader)
    writer.close()
    assert status == 408
    reader, writer = await asyncio.open_connection("127.0.0.1", receiver.server.port)
    assert await asyncio.wait_for(reader.read(-1), ANSWER_DEADLINE_S) == b""  # closed, nothing sent
    writer.close()
    assert await _counter(receiver, "kct_receiver_connections_closed_total", reason="header_timeout") == 2


async def test_a_body_not_finished_in_time_is_answered_408(make_receiver: ReceiverFactory) -> None:
    """Given bodyTimeoutMs 200, when a sender writes a valid head and only part of the body, then 408 comes
    back, nothing is stored, and the close is counted as a body_timeout."""
    receiver = await make_receiver(base_config(connections=_connections(bodyTimeoutMs=200)))
    reader, writer = await asyncio.open_connection("127.0.0.1", receiver.server.port)
    writer.write(_head(len(VALID)) + VALID[:3])
    await writer.drain()
    status, _ = await _answer_then_eof(reader)
    writer.close()
    assert status == 408 and receiver.sink.records == []
    assert await _counter(receiver, "kct_receiver_connections_closed_total", reason="body_timeout") == 1
    assert receiver.server.connection_budget.buffered == 0


async def test_an_idle_keep_alive_connection_is_closed(make_receiver: ReceiverFactory) -> None:
    """Given idleTimeoutMs 200, when a push is answered and the sender then sends nothing, then the receiver
    closes the connection without a second answer and counts an idle_timeout."""
    receiver = await make_receiver(base_config(connections=_connections(idleTimeoutMs=200)))
    reader, writer = await asyncio.open_connection("127.0.0.1", receiver.server.port)
    writer.write(_head(len(VALID)) + VALID)
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), ANSWER_DEADLINE_S)
    length = int(re.search(rb"Content-Length: (\d+)", head).group(1))  # type: ignore[union-attr]
    await reader.readexactly(length)
    assert await asyncio.wait_for(reader.read(-1), ANSWER_DEADLINE_S) == b""  # closed, nothing more sent
    writer.close()
    assert head.startswith(b"HTTP/1.1 200 ")
    assert await _counter(receiver, "kct_receiver_connections_closed_total", reason="idle_timeout") == 1


async def test_connections_over_the_cap_are_answered_503_and_closed(make_receiver: ReceiverFactory) -> None:
    """Given maxOpen 2 and two open connections (one of them handed over to aiohttp), when a third connects,
    then it is answered 503 with Retry-After and closed (counted as connection_limit); once one closes, a new
    connection is served."""
    receiver = await make_receiver(base_config(connections=_connections(maxOpen=2)))
    port, budget = receiver.server.port, receiver.server.connection_budget
    _, lean = await asyncio.open_connection("127.0.0.1", port)
    handed_reader, handed = await asyncio.open_connection("127.0.0.1", port)
    handed.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    await handed.drain()
    assert (await asyncio.wait_for(handed_reader.readuntil(b"\r\n\r\n"), ANSWER_DEADLINE_S)).startswith(
        b"HTTP/1.1 200 ")
    await eventually_async(lambda: budget.open == 2, timeout=ANSWER_DEADLINE_S, interval=0.01,
                           what="both connections counted")
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    status, headers = await _answer_then_eof(reader)
    writer.close()
    assert status == 503 and headers["retry-after"] == "2"
    assert await _counter(receiver, "kct_receiver_connections_closed_total", reason="connection_limit") == 1
    handed.close()
    await eventually_async(lambda: budget.open == 1, timeout=ANSWER_DEADLINE_S, interval=0.01,
                           what="the handed-over connection to give its place back")
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_head(len(VALID)) + VALID)
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), ANSWER_DEADLINE_S)
    writer.close()
    lean.close()
    assert head.startswith(b"HTTP/1.1 200 ")


async def test_unfinished_requests_over_the_buffered_bytes_cap_are_refused(make_receiver: ReceiverFactory) -> None:
    """Given maxBufferedBytes 1500, when two senders each hold 1000 bytes of an unfinished request, then the
    one whose bytes go over the cap is answered 503 and closed, and the other's bytes stay counted."""
    receiver = await make_receiver(base_config(limits={"maxCompressedBytes": 1024},
                                               connections=_connections(maxBufferedBytes=1500)))
    port, budget = receiver.server.port, receiver.server.connection_budget
    first_reader, first = await asyncio.open_connection("127.0.0.1", port)
    first.write(_head(1024) + b"x" * 1000)
    await first.drain()
    await eventually_async(lambda: budget.buffered >= 1000, timeout=ANSWER_DEADLINE_S, interval=0.01,
                           what="the first sender's bytes buffered")
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_head(1024) + b"x" * 1000)
    await writer.drain()
    status, headers = await _answer_then_eof(reader)
    writer.close()
    assert status == 503 and "retry-after" in headers
    assert await _counter(receiver, "kct_receiver_connections_closed_total", reason="buffer_limit") == 1
    assert not first_reader.at_eof() and budget.buffered >= 1000
    first.close()
    await eventually_async(lambda: budget.buffered == 0, timeout=ANSWER_DEADLINE_S, interval=0.01,
                           what="a closed connection to give its buffered bytes back")


async def test_a_timeout_fires_at_the_sweep_after_its_deadline_never_before(make_receiver: ReceiverFactory) -> None:
    """Given headerTimeoutMs 10000 and a sender that wrote part of a head, when the deadlines are swept at
    nine seconds from now, then the connection is left alone; when swept past ten seconds, then 408 comes
    back. The sweep runs every quarter of the shortest timeout, within [50 ms, 1 s]."""
    receiver = await make_receiver(base_config(connections=_connections(headerTimeoutMs=10_000)))
    deadlines = receiver.server.connection_deadlines
    assert deadlines.interval == 0.5  # the 2 s linger is the shortest wait here
    reader, writer = await asyncio.open_connection("127.0.0.1", receiver.server.port)
    writer.write(_head(10)[:20])
    await writer.drain()
    await eventually_async(lambda: receiver.server.connection_budget.buffered == 20, timeout=ANSWER_DEADLINE_S,
                           interval=0.01, what="the partial head buffered")
    written = time.monotonic()
    assert deadlines.sweep(written + 9.0) == 0
    assert deadlines.sweep(written + 10.5) == 1
    status, _ = await _answer_then_eof(reader)
    writer.close()
    assert status == 408


def test_the_sweep_interval_is_a_quarter_of_the_shortest_timeout_within_bounds() -> None:
    def interval(**settings: int) -> float:
        return ConnectionDeadlines(base_config(connections=_connections(**settings))).interval

    assert interval(headerTimeoutMs=1_000) == 0.25
    assert interval(bodyTimeoutMs=10) == 0.05
    assert interval() == 0.5
