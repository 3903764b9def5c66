"""Bad input: a corpus of malformed, truncated, oversized and wrongly encoded pushes, and a fuzz test.

Every one must be answered 4xx with a reason in a google.rpc.Status body, nothing may be written, and the
receiver must keep serving (a valid push right after is stored).
"""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import logging
from collections.abc import AsyncIterator

import pytest
import zstandard
from conftest import JSON, PROTOBUF, TOKEN, Receiver, ReceiverFactory, base_config, make_request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from waiting import eventually_async

VALID = make_request().SerializeToString()
LIMIT_COMPRESSED = 64 * 1024
LIMIT_DECOMPRESSED = 256 * 1024


def _zstd_bomb(size: int) -> bytes:
    """A zstd frame of `size` zero bytes, streamed (no content size in the header), small window."""
    params = zstandard.ZstdCompressionParameters.from_level(19, window_log=17)
    out = io.BytesIO()
    with zstandard.ZstdCompressor(compression_params=params).stream_writer(out, closefd=False) as writer:
        chunk = b"\x00" * 65536
        for _ in range(size // 65536):
            writer.write(chunk)
    return out.getvalue()


def _deep_json(depth: int) -> bytes:
    return ("[" * depth + "]" * depth).encode()


def _nested_anyvalue(depth: int) -> bytes:
    """A resource attribute whose value nests kvlists `depth` deep (protobuf recursion bomb)."""
    # AnyValue.kvlist_value (6) -> KeyValueList.values (1) -> KeyValue.value (2) -> AnyValue ...
    inner = b""
    for _ in range(depth):
        kv = b"\x0a\x01k" + b"\x12" + _len(inner)  # KeyValue{key="k", value=AnyValue(inner)}
        kvlist = b"\x0a" + _len(kv)  # KeyValueList{values=[kv]}
        inner = b"\x32" + _len(kvlist)  # AnyValue{kvlist_value}
    keyvalue = b"\x0a\x01a\x12" + _len(inner)
    resource = b"\x0a" + _len(keyvalue)
    rm = b"\x0a" + _len(resource)
    return b"\x0a" + _len(rm)


def _len(payload: bytes) -> bytes:
    n, out = len(payload), bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out) + payload


def _nameless() -> bytes:
    request = make_request()
    request.resource_metrics[0].scope_metrics[0].metrics[0].ClearField("name")
    return bytes(request.SerializeToString())


def _json_nested_kvlists(depth: int) -> bytes:
    """Valid OTLP JSON whose one attribute value nests kvlists `depth` deep (4 JSON levels each)."""
    value = '{"stringValue":"leaf"}'
    for _ in range(depth):
        value = '{"kvlistValue":{"values":[{"key":"k","value":' + value + "}]}}"
    return ('{"resourceMetrics":[{"resource":{"attributes":[{"key":"a","value":' + value + "}]}}]}").encode()


async def _chunked(body: bytes) -> AsyncIterator[bytes]:
    for i in range(0, len(body), 16384):
        yield body[i : i + 16384]


# (case id, body, content type, content encoding, expected status, expected reason fragment)
CORPUS: list[tuple[str, bytes, str, str, int, str]] = [
    ("empty body", b"", PROTOBUF, "", 400, "empty"),
    ("garbage protobuf", b"\xff\xff\xff\xff", PROTOBUF, "", 400, "not a valid ExportMetricsServiceRequest"),
    ("truncated protobuf", VALID[: len(VALID) // 2], PROTOBUF, "", 400, "not a valid"),
    ("invalid wire type", b"\x0f\x00", PROTOBUF, "", 400, "not a valid"),
    ("length beyond the body", b"\x0a\x05\x01", PROTOBUF, "", 400, "not a valid"),
    ("invalid utf-8 in a string", b"\x0a\x0b\x12\x09\x12\x07\x0a\x05\xff\xfe\xfd\xfc\xfb", PROTOBUF, "", 400,
     "not a valid"),
    ("protobuf recursion bomb", _nested_anyvalue(200), PROTOBUF, "", 400, "not a valid"),
    ("json sent as protobuf", b'{"resourceMetrics": []}', PROTOBUF, "", 400, "not a valid"),
    ("protobuf sent as json", VALID, JSON, "", 400, "not valid JSON"),
    ("json not an object", b"[1, 2]", JSON, "", 400, "JSON object"),
    ("json wrong field type", b'{"resourceMetrics": "x"}', JSON, "", 400, "OTLP JSON"),
    ("json bad hex trace id", json.dumps({"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": "m",
     "gauge": {"dataPoints": [{"asInt": "1", "exemplars": [{"traceId": "zz"}]}]}}]}]}]}).encode(), JSON, "", 400,
     "not hex"),
    ("json too deep", _deep_json(30_000), JSON, "", 400, "JSON"),
    ("json truncated", b'{"resourceMetrics": [{"scopeMetrics"', JSON, "", 400, "not valid JSON"),
    # Found by the fuzzer (tests/unit/receiver/test_receiver_fuzz.py), each answered 500 before the fix:
    ("json integer beyond a double", b'{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"m","gauge":'
     b'{"dataPoints":[{"asDouble":' + b"9" * 400 + b"}]}}]}]}]}", JSON, "", 400, "too large to convert"),
    ("json lone surrogate where a message belongs", b'{"resourceMetrics":[{"scopeMetrics":[{"metrics":["\\ud800"]}]}]}',
     JSON, "", 400, "not valid Unicode"),
    ("json lone surrogate as a key", b'{"resourceMetrics":[{"\\udfff":{}}]}', JSON, "", 400, "not valid Unicode"),
    ("json nested deeper than the limit", _json_nested_kvlists(40), JSON, "", 400, "deeper than 128"),
    ("only nameless metrics", _nameless(), PROTOBUF, "", 400, "nothing valid"),
    ("gzip header only", gzip.compress(VALID)[:10], PROTOBUF, "gzip", 400, "truncated"),
    ("gzip truncated", gzip.compress(VALID)[:-8], PROTOBUF, "gzip", 400, "gzip"),
    ("not gzip", VALID, PROTOBUF, "gzip", 400, "not valid gzip"),
    ("not zstd", VALID, PROTOBUF, "zstd", 400, "not valid zstd"),
    ("zstd truncated", zstandard.ZstdCompressor().compress(VALID * 20)[:-6], PROTOBUF, "zstd", 400, "truncated"),
    ("gzip bomb", gzip.compress(b"\x00" * (64 * 1024 * 1024), 9), PROTOBUF, "gzip", 413, "maxDecompressedBytes"),
    ("zstd bomb", _zstd_bomb(64 * 1024 * 1024), PROTOBUF, "zstd", 413, "maxDecompressedBytes"),
    ("too large uncompressed", b"\x00" * (LIMIT_COMPRESSED + 1), PROTOBUF, "", 413, "maxCompressedBytes"),
    ("unknown content type", VALID, "text/plain", "", 415, "Content-Type"),
    ("unknown encoding", VALID, PROTOBUF, "br", 415, "Content-Encoding"),
    ("deflate encoding", VALID, PROTOBUF, "deflate", 415, "Content-Encoding"),
]


@pytest.fixture
async def limited(make_receiver: ReceiverFactory) -> Receiver:
    return await make_receiver(base_config(limits={
        "maxCompressedBytes": LIMIT_COMPRESSED, "maxDecompressedBytes": LIMIT_DECOMPRESSED,
        "maxInflightBytes": LIMIT_DECOMPRESSED * 4,
    }))


@pytest.mark.parametrize(("case", "body", "ctype", "encoding", "status", "reason"), CORPUS, ids=[c[0] for c in CORPUS])
async def test_bad_push_is_refused_with_a_reason_and_nothing_written(
    limited: Receiver, case: str, body: bytes, ctype: str, encoding: str, status: int, reason: str
) -> None:
    """Given a bad push, when posted, then the expected 4xx with a message naming the problem, no record,
    and the receiver still stores a valid push afterwards."""
    reply = await limited.post(body, content_type=ctype, encoding=encoding)
    assert reply.status == status, (case, reply.body)
    message = _status_message(reply.body, ctype)
    assert reason in message, (case, message)
    assert limited.sink.records == []
    assert (await limited.post(VALID)).status == 200
    assert len(limited.sink.records) == 1


async def test_oversized_chunked_body_is_refused_without_content_length(limited: Receiver) -> None:
    """Given a body above the compressed limit sent chunked (no Content-Length), then 413 and nothing stored."""
    reply = await limited.post(_chunked(b"\x00" * (LIMIT_COMPRESSED * 2)))
    assert reply.status == 413
    assert limited.sink.records == []
    assert (await limited.post(VALID)).status == 200


async def test_json_nesting_within_the_limit_is_accepted(limited: Receiver) -> None:
    """Given OTLP JSON with attribute values nested 20 kvlists deep (~100 JSON levels, under the limit), then
    it is stored, and the stored protobuf parses (protobuf's own limit is 100 message levels)."""
    reply = await limited.post(_json_with_points(_json_nested_kvlists(20)), content_type=JSON)
    assert reply.status == 200, reply.body
    assert len(limited.sink.records) == 1


async def test_body_cut_short_by_the_sender_is_a_client_refusal_not_an_internal_error(limited: Receiver) -> None:
    """Given a request whose body is shorter than its Content-Length and whose sender then shuts its side down,
    then nothing is stored and the refusal is counted as `incomplete_body`, not as an internal error (500)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", limited.server.port)
    writer.write((f"POST /v1/metrics HTTP/1.1\r\nHost: x\r\nContent-Type: {PROTOBUF}\r\n"
                  f"Authorization: Bearer {TOKEN}\r\nContent-Length: {len(VALID) + 100}\r\n\r\n").encode() + VALID)
    writer.write_eof()
    await writer.drain()
    await reader.read()  # aiohttp closes on EOF: the refusal may not reach the sender
    writer.close()
    text = await _metrics_after(limited, 'reason="incomplete_body"')
    assert 'kct_receiver_rejections_total{http_response_status_code="400",reason="incomplete_body"} 1.0' in text
    assert 'reason="internal_error"' not in text
    assert limited.sink.records == []


async def test_malformed_http_is_counted_and_logged_without_a_traceback(
    limited: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """Given requests aiohttp's parser refuses (a bad Content-Length, a header without a colon), then each is
    answered 400, counted as `bad_http`, and none logs an ERROR with a traceback (a log flood otherwise)."""
    caplog.set_level(logging.DEBUG)
    for bad in (b"Content-Length: 1, 2\r\n", b"NoColonHeader\r\n"):
        reader, writer = await asyncio.open_connection("127.0.0.1", limited.server.port)
        writer.write(b"POST /v1/metrics HTTP/1.1\r\nHost: x\r\n" + bad + b"\r\n")
        await writer.drain()
        answer = await reader.read()
        writer.close()
        assert answer.split(b" ", 2)[1] == b"400", answer
    text = (await limited.get("/metrics")).body.decode()
    assert 'kct_receiver_rejections_total{http_response_status_code="400",reason="bad_http"} 2.0' in text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], caplog.records


async def _metrics_after(receiver: Receiver, needle: str) -> str:
    """/metrics once it mentions `needle` (the server handles a closed connection asynchronously)."""

    async def mentioned() -> str | None:
        text = (await receiver.get("/metrics")).body.decode()
        return text if needle in text else None

    found: str = await eventually_async(mentioned, timeout=10, interval=0.02, what=f"/metrics to mention {needle}")
    return found


def _json_with_points(document: bytes) -> bytes:
    """`document` (one resource) with one valid gauge point added, so the push has data."""
    doc = json.loads(document)
    doc["resourceMetrics"][0]["scopeMetrics"] = [{"metrics": [{"name": "m", "gauge": {"dataPoints": [
        {"asInt": "1", "timeUnixNano": "1700000000000000000"}]}}]}]
    return json.dumps(doc).encode()


async def test_bad_broker_headers_are_400(limited: Receiver) -> None:
    """Given a non-numeric push interval, a bad terminating flag or bad percent-encoding, then 400 each."""
    for headers in (
        {"kct-push-interval-ms": "soon"},
        {"kct-push-interval-ms": "-5"},
        {"kct-terminating": "maybe"},
        {"kct-client-id": "%ff%fe"},
    ):
        reply = await limited.post(VALID, headers=headers)
        assert reply.status == 400, headers
        assert "header kct-" in _status_message(reply.body, PROTOBUF)
    assert limited.sink.records == []


def _status_message(body: bytes, ctype: str) -> str:
    """The message of a google.rpc.Status (JSON, or protobuf field 2 decoded by hand)."""
    if ctype == JSON or not body.startswith(b"\x08"):
        try:
            return str(json.loads(body)["message"])
        except ValueError:
            pass
    i = 2 if body[1] < 0x80 else 3  # code varint (1-2 bytes)
    assert body[i] == 0x12
    length, shift, j = 0, 0, i + 1
    while True:
        byte = body[j]
        length |= (byte & 0x7F) << shift
        j += 1
        if byte < 0x80:
            break
        shift += 7
    return body[j : j + length].decode()


_HEADERS = st.dictionaries(
    st.sampled_from(["kct-client-instance-id", "kct-client-id", "kct-push-interval-ms", "kct-terminating",
                     "kct-principal", "kct-broker-id"]),
    st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=20),
    max_size=4,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=st.one_of(
        st.binary(max_size=2048),
        st.builds(lambda b, i, x: b[:i] + x + b[i:], st.just(VALID), st.integers(0, len(VALID)), st.binary(max_size=8)),
        st.builds(lambda b, i: b[:i], st.just(VALID), st.integers(0, len(VALID))),
    ),
    ctype=st.sampled_from([PROTOBUF, JSON, "application/octet-stream"]),
    encoding=st.sampled_from(["", "gzip", "zstd", "identity"]),
    headers=_HEADERS,
)
async def test_fuzzed_pushes_never_crash_and_only_200_writes(
    limited: Receiver, body: bytes, ctype: str, encoding: str, headers: dict[str, str]
) -> None:
    """Given arbitrary bytes, mutations and truncations of a valid push, under any declared type, encoding
    and broker headers, then the answer is 200, 4xx, or 429 - never 5xx - and a record exists only for a
    200; the receiver keeps serving."""
    before = len(limited.sink.records)
    reply = await limited.post(body, content_type=ctype, encoding=encoding, headers=headers)
    assert reply.status in (200, 400, 413, 415, 429), (reply.status, reply.body)
    assert len(limited.sink.records) - before == (1 if reply.status == 200 else 0)
    assert (await limited.get("/healthz")).status == 200
