"""The lean ingest path (kct.receiver.ingest): plain pushes read off the socket, everything else aiohttp's."""

from __future__ import annotations

import asyncio
import logging
import re

import pytest
from conftest import PROTOBUF, TOKEN, Receiver, ReceiverFactory, base_config, make_request

from kct.receiver.ingest import parse_head

VALID = make_request().SerializeToString()


def _push(body: bytes = VALID, *, extra: str = "", instance: str = "i-1") -> bytes:
    return (f"POST /v1/metrics HTTP/1.1\r\nHost: x\r\nContent-Type: {PROTOBUF}\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"kct-client-instance-id: {instance}\r\n{extra}Content-Length: {len(body)}\r\n\r\n").encode() + body


async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return int(lines[0].split()[1]), headers, body


def test_parse_head_accepts_only_the_plain_form() -> None:
    """Given request heads, then only single Content-Length, token names, printable ASCII values and no
    Transfer-Encoding / Expect / Upgrade / repeated header / obs-fold are accepted (the rest is aiohttp's)."""
    ok = parse_head(b"Host: x\r\nContent-Length: 12\r\nConnection: close")
    assert ok == ({"host": "x", "content-length": "12", "connection": "close"}, 12, False)
    assert parse_head(b"Content-Length: 3")[1:] == (3, True)  # type: ignore[index]
    for refused in (b"Host: x", b"Content-Length: 1\r\nContent-Length: 1", b"Content-Length: -1",
                    b"Content-Length: 1, 2", b"Content-Length: 1\r\nTransfer-Encoding: chunked",
                    b"Content-Length: 1\r\nExpect: 100-continue", b"Content-Length: 1\r\nUpgrade: h2c",
                    b"Content-Length: 1\r\n folded", b"Content-Length: 1\r\nX: caf\xc3\xa9",
                    b"Content-Length: 1\r\nBad Name: v", b"Content-Length: 1\r\nX: a\x00b",
                    b"Content-Length: 1\r\nConnection: upgrade", b"NoColon\r\nContent-Length: 1"):
        assert parse_head(refused) is None, refused


async def test_pipelined_pushes_are_answered_in_order_on_one_connection(receiver: Receiver) -> None:
    """Given three pushes written at once on one keep-alive connection, then three 200s come back in order
    and three records are stored."""
    reader, writer = await asyncio.open_connection("127.0.0.1", receiver.server.port)
    writer.write(b"".join(_push(instance=f"i-{n}") for n in range(3)))
    await writer.drain()
    answers = [await _read_answer(reader) for _ in range(3)]
    writer.close()
    assert [status for status, _, _ in answers] == [200, 200, 200]
    assert all(h["content-type"] == PROTOBUF and "date" in h for _, h, _ in answers)
    assert all(h["server"] == "kct-receiver" for _, h, _ in answers)  # the lean path answered, not aiohttp
    assert len(receiver.sink.records) == 3


async def test_other_routes_on_a_push_connection_are_handed_to_aiohttp(receiver: Receiver) -> None:
    """Given a push and then GET /metrics on the same keep-alive connection, then both are answered: the
    second by aiohttp (the connection is handed over with its unread bytes)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", receiver.server.port)
    writer.write(_push() + b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    status, _, _ = await _read_answer(reader)
    status2, headers2, body2 = await _read_answer(reader)
    writer.close()
    assert (status, status2) == (200, 200)
    assert b"kct_receiver_data_points_total" in body2 and headers2["content-type"].startswith("text/plain")


@pytest.mark.parametrize("split", [1, 10, 40, len(_push()) - 1])
async def test_a_push_arriving_in_pieces_is_read_whole(receiver: Receiver, split: int) -> None:
    """Given a push whose bytes arrive in two writes split anywhere, then it is answered 200 once."""
    data = _push()
    reader, writer = await asyncio.open_connection("127.0.0.1", receiver.server.port)
    writer.write(data[:split])
    await writer.drain()
    await asyncio.sleep(0.02)  # duration: a gap between the two writes, so they arrive as two reads
    writer.write(data[split:])
    await writer.drain()
    status, _, _ = await _read_answer(reader)
    writer.close()
    assert status == 200 and len(receiver.sink.records) == 1


async def test_connection_close_and_declared_too_large_close_after_the_answer(receiver: Receiver) -> None:
    """Given `Connection: close`, then the answer carries it and the connection ends; given a Content-Length
    over the limit, then 413 comes back at once (the body is not awaited) and the connection ends."""
    reader, writer = await asyncio.open_connection("127.0.0.1", receiver.server.port)
    writer.write(_push(extra="Connection: close\r\n"))
    await writer.drain()
    status, headers, _ = await _read_answer(reader)
    assert status == 200 and headers.get("connection") == "close" and await reader.read() == b""
    writer.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", receiver.server.port)
    huge = receiver.server.config.limits.max_compressed_bytes + 1
    writer.write((f"POST /v1/metrics HTTP/1.1\r\nHost: x\r\nContent-Type: {PROTOBUF}\r\n"
                  f"Authorization: Bearer {TOKEN}\r\nContent-Length: {huge}\r\n\r\n").encode())
    await writer.drain()
    status, _, _ = await _read_answer(reader)
    assert status == 413 and await reader.read() == b""
    writer.close()


_CLIENT = "Referer: https://example.test/r\r\nUser-Agent: librdkafka-test/2.6\r\nConnection: close\r\n"


async def _answered_and_logged(receiver: Receiver, request: bytes, caplog: pytest.LogCaptureFixture
                               ) -> tuple[str, int, logging.LogRecord]:
    """(the answering server's Server header, the bytes of its answer, the access-log record) for one request
    with `Connection: close` (so the server closes after answering)."""
    caplog.clear()
    reader, writer = await asyncio.open_connection("127.0.0.1", receiver.server.port)
    writer.write(request)
    await writer.drain()
    answer = await reader.read()  # all the receiver wrote, until it closed the connection
    writer.close()
    status, headers, _ = await _read_answer(_reader_of(answer))
    assert status == 200
    records = [r for r in caplog.records if r.name == "aiohttp.access"]
    assert len(records) == 1, records
    return headers["server"], len(answer), records[0]


def _reader_of(data: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return reader


async def test_access_log_lines_are_aiohttps_whichever_path_answers(make_receiver: ReceiverFactory,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    """Given logging.accessLog on, when a plain push (answered by the lean path) and the same push with a
    repeated header (handed over to aiohttp's route) are sent, then each is logged once on aiohttp.access
    with the same line but for its time and the same extra fields; given the default (off), none is."""
    receiver = await make_receiver(base_config(logging={"level": "INFO", "accessLog": True}))
    with caplog.at_level(logging.INFO, logger="aiohttp.access"):
        lean_server, lean_sent, lean = await _answered_and_logged(receiver, _push(extra=_CLIENT), caplog)
        handed_server, handed_sent, handed = await _answered_and_logged(
            receiver, _push(extra=_CLIENT + "X-A: 1\r\nX-A: 2\r\n"), caplog)
    assert lean_server == "kct-receiver" and "aiohttp" in handed_server  # each path answered one of them
    # %b (response_size) is what each server wrote: their heads differ (Server, Connection), so mask it.
    assert (lean.response_size, handed.response_size) == (lean_sent, handed_sent)
    untimed = re.compile(r"\[[^\]]*\] |(?<= 200 )\d+")
    assert untimed.sub("", lean.getMessage()) == untimed.sub("", handed.getMessage())
    assert lean.getMessage() == (f'127.0.0.1 {lean.request_start_time} "POST /v1/metrics HTTP/1.1" 200 {lean_sent} '
                                 '"https://example.test/r" "librdkafka-test/2.6"')
    fields = ("remote_address", "first_request_line", "response_status", "request_header")
    assert {f: getattr(lean, f) for f in fields} == {f: getattr(handed, f) for f in fields}
    assert set(vars(lean)) - set(vars(handed)) == set() == set(vars(handed)) - set(vars(lean))
    assert re.fullmatch(r"\[\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d [+-]\d{4}\]", lean.request_start_time)

    quiet = await make_receiver()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="aiohttp.access"):
        reader, writer = await asyncio.open_connection("127.0.0.1", quiet.server.port)
        writer.write(_push(extra=_CLIENT))
        await writer.drain()
        assert (await _read_answer(reader))[0] == 200
        writer.close()
    assert not [r for r in caplog.records if r.name == "aiohttp.access"]
