"""The lean ingest path (kct.receiver.ingest): plain pushes read off the socket, everything else aiohttp's."""

from __future__ import annotations

import asyncio

import pytest
from conftest import PROTOBUF, TOKEN, Receiver, make_request

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
