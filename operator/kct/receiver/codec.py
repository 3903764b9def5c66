"""OTLP/HTTP wire handling: content negotiation, bounded decompression, decoding, answers.

Everything here is a pure function of bytes and header values, so it is tested without a server and
shared by whichever HTTP server runs the receiver.

Decompression never trusts the sender: output is produced in bounded steps and the push is refused (413)
as soon as it would exceed `max_decompressed_bytes`, so a decompression bomb costs at most that much
memory. Truncated or corrupt streams are 400.
"""

from __future__ import annotations

import binascii
import json
import zlib
from dataclasses import dataclass
from typing import Any, Final

import zstandard
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)

from kct.receiver.errors import BadRequest, PayloadTooLarge, UnsupportedMediaType

__all__ = [
    "CONTENT_TYPE_JSON",
    "CONTENT_TYPE_PROTOBUF",
    "decode_request",
    "decompress",
    "encode_export_response",
    "encode_status",
    "negotiate",
    "response_format",
]

CONTENT_TYPE_PROTOBUF: Final = "application/x-protobuf"
CONTENT_TYPE_JSON: Final = "application/json"
_PROTOBUF_ALIASES: Final = frozenset({CONTENT_TYPE_PROTOBUF, "application/protobuf"})
_IDENTITY: Final = frozenset({"", "identity"})
ENCODINGS: Final = ("gzip", "zstd")

# Deepest JSON nesting (objects and arrays) we hand to protobuf's JSON parser. OTLP needs ~17 levels plus 4
# per nested attribute value; protobuf refuses messages nested deeper than 100 anyway (~130 JSON levels), and
# its recursive parser can exhaust Python's stack on deeper input (SystemError, not a clean error), so the
# depth is checked first, without recursion.
MAX_JSON_DEPTH: Final = 128

# google.rpc.Code for each HTTP status we answer (OTLP/HTTP puts a google.rpc.Status in error bodies).
_GRPC_CODE: Final = {400: 3, 401: 16, 413: 3, 415: 3, 429: 8, 500: 13, 503: 14}


@dataclass(frozen=True)
class Negotiated:
    """What the request claims to be: `fmt` is "protobuf" or "json"; `encoding` is "", "gzip" or "zstd"."""

    fmt: str
    encoding: str
    response_content_type: str


def response_format(content_type: str | None) -> str:
    """The format to answer in before (or without) full negotiation: protobuf if asked, else JSON."""
    mime = (content_type or "").split(";", 1)[0].strip().lower()
    return "protobuf" if mime in _PROTOBUF_ALIASES else "json"


def negotiate(content_type: str | None, content_encoding: str | None) -> Negotiated:
    """Check Content-Type and Content-Encoding; 415 naming the value when we do not support it."""
    mime = (content_type or "").split(";", 1)[0].strip().lower()
    if mime in _PROTOBUF_ALIASES:
        fmt, answer = "protobuf", CONTENT_TYPE_PROTOBUF
    elif mime == CONTENT_TYPE_JSON:
        fmt, answer = "json", CONTENT_TYPE_JSON
    else:
        raise UnsupportedMediaType(
            "content_type",
            f"Content-Type {content_type!r} is not supported; use {CONTENT_TYPE_PROTOBUF} or {CONTENT_TYPE_JSON}",
        )
    enc = (content_encoding or "").strip().lower()
    if enc in _IDENTITY:
        enc = ""
    elif enc not in ENCODINGS:
        raise UnsupportedMediaType(
            "content_encoding",
            f"Content-Encoding {content_encoding!r} is not supported; use gzip, zstd or none",
        )
    return Negotiated(fmt, enc, answer)


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        "decompressed_too_large", f"decompressed body exceeds limits.maxDecompressedBytes ({limit} bytes)"
    )


def _gunzip(body: bytes, limit: int) -> bytes:
    out: list[bytes] = []
    total = 0
    data = body
    while True:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            chunk = d.decompress(data, limit + 1 - total)
        except zlib.error as exc:
            raise BadRequest("bad_gzip", f"body is not valid gzip: {exc}") from None
        total += len(chunk)
        out.append(chunk)
        if total > limit or d.unconsumed_tail:
            raise _too_large(limit)
        if not d.eof:
            raise BadRequest("bad_gzip", "gzip stream is truncated")
        data = d.unused_data
        if not data:
            return b"".join(out)


# Streaming zstd compressors declare windows of 2^19 .. 2^23 bytes at their usual levels whatever the data's
# size (librdkafka's KIP-714 pushes, which Kafka 3.7 forwards compressed: 2 MiB), and the window is what
# decompression allocates: up to 8 MiB is accepted whatever `limit` is; beyond, only as much as `limit` could
# need (a larger one is refused as a bomb).
_ZSTD_ORDINARY_WINDOW_LOG = 23


def _zstd_window(limit: int) -> int:
    return 1 << max(_ZSTD_ORDINARY_WINDOW_LOG, (limit - 1).bit_length())


def _unzstd(body: bytes, limit: int) -> bytes:
    # The stream reader gives output in bounded reads (the bomb guard); a second pass with a
    # decompression object, now known to yield at most `limit` bytes, tells a complete frame from a
    # truncated one (the reader just stops early on truncation).
    dctx = zstandard.ZstdDecompressor(max_window_size=_zstd_window(limit))
    total = 0
    try:
        reader = dctx.stream_reader(body, read_across_frames=True)
        while True:
            chunk = reader.read(min(65536, limit + 1 - total))
            if not chunk:
                break
            total += len(chunk)
            if total > limit:
                raise _too_large(limit)
        obj = dctx.decompressobj()
        out = obj.decompress(body)
        while obj.eof and obj.unused_data:
            rest = obj.unused_data
            obj = dctx.decompressobj()
            out += obj.decompress(rest)
    except zstandard.ZstdError as exc:
        if "too much memory" in str(exc):
            # The frame declares a window beyond what a body of `limit` bytes can need.
            raise _too_large(limit) from None
        raise BadRequest("bad_zstd", f"body is not valid zstd: {exc}") from None
    if not obj.eof:
        raise BadRequest("bad_zstd", "zstd stream is truncated")
    return out


def decompress(body: bytes, encoding: str, limit: int) -> bytes:
    """Decompress `body` (encoding "", "gzip" or "zstd") producing at most `limit` bytes (else 413)."""
    if encoding == "gzip":
        return _gunzip(body, limit)
    if encoding == "zstd":
        return _unzstd(body, limit)
    if len(body) > limit:
        raise _too_large(limit)
    return body


def _hex_ids_to_base64(node: Any) -> None:
    """OTLP JSON writes exemplar trace/span ids as hex; protobuf's JSON mapping wants base64."""
    if isinstance(node, dict):
        for key in ("traceId", "spanId", "trace_id", "span_id"):
            value = node.get(key)
            if isinstance(value, str) and value:
                try:
                    node[key] = binascii.b2a_base64(bytes.fromhex(value), newline=False).decode()
                except ValueError:
                    raise BadRequest("bad_json", f"{key} {value!r} is not hex") from None
        for value in node.values():
            if isinstance(value, (dict, list)):
                _hex_ids_to_base64(value)
    elif isinstance(node, list):
        for item in node:
            if isinstance(item, (dict, list)):
                _hex_ids_to_base64(item)


def _not_unicode(text: str) -> bool:
    if text.isascii():
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return True
    return False


def _check_json_shape(document: Any) -> None:
    """Refuse what protobuf's JSON parser does not refuse cleanly: nesting deeper than MAX_JSON_DEPTH (its
    recursion can exhaust the stack) and strings that are not Unicode text (a lone surrogate escape such as
    "\\ud800" where it expects a message or as a key makes it fail with SystemError). Iterative: no recursion
    on hostile input."""
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise BadRequest("bad_json", f"body nests JSON objects/arrays deeper than {MAX_JSON_DEPTH} levels")
        children = node.values() if isinstance(node, dict) else node
        if isinstance(node, dict) and any(_not_unicode(key) for key in node):
            raise BadRequest("bad_json", "an object key is not valid Unicode (a lone surrogate escape)")
        for child in children:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
            elif isinstance(child, str) and _not_unicode(child):
                raise BadRequest("bad_json", f"string {child[:40]!r} is not valid Unicode (a lone surrogate escape)")


def decode_request(data: bytes, fmt: str) -> ExportMetricsServiceRequest:
    """Parse an ExportMetricsServiceRequest from protobuf or OTLP JSON; 400 naming the problem."""
    if not data:
        raise BadRequest("empty_body", "request body is empty")
    request = ExportMetricsServiceRequest()
    if fmt == "protobuf":
        try:
            request.ParseFromString(data)
        except (DecodeError, RecursionError) as exc:
            raise BadRequest(
                "bad_protobuf", f"body is not a valid ExportMetricsServiceRequest protobuf: {exc}"
            ) from None
        return request
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BadRequest("bad_json", f"body is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise BadRequest("bad_json", "body must be a JSON object (an ExportMetricsServiceRequest)")
    _check_json_shape(document)
    try:
        _hex_ids_to_base64(document)
        json_format.ParseDict(document, request, ignore_unknown_fields=True)
    except (json_format.ParseError, RecursionError, TypeError, ValueError, OverflowError) as exc:
        # OverflowError: an integer beyond a double's range in a double field (e.g. "asDouble": 1e400 as digits).
        if isinstance(exc, BadRequest):
            raise
        raise BadRequest("bad_json", f"body is not a valid OTLP JSON ExportMetricsServiceRequest: {exc}") from None
    return request


def encode_export_response(fmt: str, rejected_data_points: int, error_message: str) -> bytes:
    """The 200 body: an ExportMetricsServiceResponse, with partial_success when something was dropped."""
    response = ExportMetricsServiceResponse()
    if rejected_data_points or error_message:
        response.partial_success.rejected_data_points = rejected_data_points
        response.partial_success.error_message = error_message
    if fmt == "json":
        return bytes(json_format.MessageToJson(response, indent=None).encode())
    return bytes(response.SerializeToString())


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_status(fmt: str, http_status: int, message: str) -> bytes:
    """An error body: google.rpc.Status {code, message} in the request's format.

    Encoded by hand (two fields) so we need not depend on googleapis-common-protos.
    """
    code = _GRPC_CODE.get(http_status, 2)
    if fmt == "json":
        return json.dumps({"code": code, "message": message}).encode()
    text = message.encode()
    return b"\x08" + _varint(code) + b"\x12" + _varint(len(text)) + text
