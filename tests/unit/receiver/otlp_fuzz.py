"""A seeded, structure-aware generator of OTLP/HTTP requests for fuzzing the receiver.

Each input is the raw bytes of one HTTP/1.1 request (so framing and headers can be broken too, which an
HTTP client library would refuse to send) plus what the test may conclude from the answer:

- `expect_200`: a valid seed push with correct headers and framing: anything but 200 is a bug;
- `never_200`: the body is certainly not a valid ExportMetricsServiceRequest (it fails to parse here), or
  the token, type or encoding is wrong: a 200 is a bug;
- `expect_status`: the exact status where it is certain (401 for a wrong token, 415 for a wrong type);
- `tag`: the `kct-client-instance-id` the request carries, so a record can be matched to its answer.

Why a seeded mutator rather than hypothesis for the volume: ~100,000 inputs must fit in a `make test` run
on a small shared machine; hypothesis spends milliseconds per example on its own bookkeeping, this spends
tens of microseconds. The mutations are the ones parsers get wrong: protobuf wire-level edits that keep
the message well-formed around them (lengths re-computed), huge and overlong varints, wrong wire types,
length prefixes that lie, nesting beyond the parsers' recursion limits, invalid UTF-8, JSON values of the
wrong type or range, truncations, corrupt and concatenated compressed streams, decompression bombs, and
broken HTTP framing (chunked encoding, lying Content-Length, oversized or malformed headers).
"""

from __future__ import annotations

import base64
import functools
import gzip
import io
import json
import random
import struct
import zlib
from dataclasses import dataclass
from typing import Any

import zstandard
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

__all__ = ["FuzzInput", "Generator", "seed_requests"]

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


@dataclass(frozen=True)
class FuzzInput:
    index: int
    kind: str  # a short name of what was done, for the report and for reproducing
    request: bytes  # the raw HTTP/1.1 request
    tag: str | None
    expect_200: bool = False
    never_200: bool = False
    expect_status: int | None = None
    half_close: bool = False  # the client shuts its side down after sending (a body shorter than declared)
    fresh_connection: bool = False  # framing may leave the connection unusable: use a new one


# -- seeds ------------------------------------------------------------------------------------------------


def _kv(attrs: Any, key: str, value: Any) -> None:
    kv = attrs.add()
    kv.key = key
    _set_any(kv.value, value)


def _set_any(target: AnyValue, value: Any) -> None:
    if isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, int):
        target.int_value = value
    elif isinstance(value, float):
        target.double_value = value
    elif isinstance(value, bytes):
        target.bytes_value = value
    elif isinstance(value, list):
        for item in value:
            _set_any(target.array_value.values.add(), item)
    elif isinstance(value, dict):
        for k, v in value.items():
            _kv(target.kvlist_value.values, k, v)
    else:
        target.string_value = str(value)


def seed_requests() -> list[ExportMetricsServiceRequest]:
    """Valid pushes covering every metric type, every attribute value type, exemplars, private attributes
    (dropped, so the record is re-encoded) and an invalid point among valid ones (partial success)."""
    seeds: list[ExportMetricsServiceRequest] = []
    t0 = 1_700_000_000_000_000_000

    req = ExportMetricsServiceRequest()
    rm = req.resource_metrics.add()
    _kv(rm.resource.attributes, "client_rack", "r1")
    _kv(rm.resource.attributes, "service.name", "fuzz-producer")
    sm = rm.scope_metrics.add()
    sm.scope.name = "librdkafka"
    sm.scope.version = "2.16.0"
    gauge = sm.metrics.add()
    gauge.name = "org.apache.kafka.producer.queue.bytes"
    for i in range(3):
        dp = gauge.gauge.data_points.add()
        dp.time_unix_nano = t0 + i
        dp.as_int = i
        _kv(dp.attributes, "topic", "orders")
    seeds.append(req)

    req = ExportMetricsServiceRequest()
    rm = req.resource_metrics.add()
    _kv(rm.resource.attributes, "client_id", "billing")
    _kv(rm.resource.attributes, "attrs", {"s": "x", "i": -7, "d": 1.5, "b": True, "by": b"\x00\xff",
                                          "arr": [1, "two", 3.0, [False]], "kv": {"deep": {"er": 1}}})
    sm = rm.scope_metrics.add()
    total = sm.metrics.add()
    total.name = "org.apache.kafka.consumer.fetch.manager.records.consumed.total"
    total.unit = "{record}"
    total.sum.aggregation_temporality = 2
    total.sum.is_monotonic = True
    dp = total.sum.data_points.add()
    dp.start_time_unix_nano = t0
    dp.time_unix_nano = t0 + 60_000_000_000
    dp.as_double = 12345.5
    ex = dp.exemplars.add()
    ex.as_int = 3
    ex.trace_id = bytes(range(16))
    ex.span_id = bytes(range(8))
    _kv(ex.filtered_attributes, "k", "v")
    seeds.append(req)

    req = ExportMetricsServiceRequest()
    rm = req.resource_metrics.add()
    _kv(rm.resource.attributes, "client_instance_id", "Wh0AAAAAQAaXMNu7xq6j4w")
    sm = rm.scope_metrics.add()
    hist = sm.metrics.add()
    hist.name = "org.apache.kafka.producer.request.latency"
    hist.histogram.aggregation_temporality = 1
    hp = hist.histogram.data_points.add()
    hp.time_unix_nano = t0
    hp.count = 6
    hp.sum = 21.0
    hp.explicit_bounds.extend([1.0, 5.0])
    hp.bucket_counts.extend([1, 2, 3])
    hp.min, hp.max = 0.5, 9.0
    expo = sm.metrics.add()
    expo.name = "org.apache.kafka.producer.request.size"
    expo.exponential_histogram.aggregation_temporality = 2
    ep = expo.exponential_histogram.data_points.add()
    ep.time_unix_nano = t0
    ep.count = 5
    ep.scale = 3
    ep.zero_count = 1
    ep.positive.offset = -2
    ep.positive.bucket_counts.extend([1, 2, 1])
    summary = sm.metrics.add()
    summary.name = "org.apache.kafka.producer.io.wait.time"
    sp = summary.summary.data_points.add()
    sp.time_unix_nano = t0
    sp.count = 4
    sp.sum = 8.0
    q = sp.quantile_values.add()
    q.quantile, q.value = 0.99, 3.0
    seeds.append(req)

    # Private attributes (dropped by the default privacy rules) and one invalid point next to a valid one.
    req = ExportMetricsServiceRequest()
    rm = req.resource_metrics.add()
    _kv(rm.resource.attributes, "host.name", "secret-host")
    _kv(rm.resource.attributes, "client_rack", "r2")
    sm = rm.scope_metrics.add()
    gauge = sm.metrics.add()
    gauge.name = "org.apache.kafka.consumer.lag"
    dp = gauge.gauge.data_points.add()
    dp.time_unix_nano = t0
    dp.as_double = float("nan")
    _kv(dp.attributes, "sasl.password", "hunter2")
    bad = sm.metrics.add()
    bad.name = "org.apache.kafka.consumer.bad.histogram"
    hb = bad.histogram.data_points.add()
    hb.explicit_bounds.extend([1.0, 2.0])
    hb.bucket_counts.extend([1])  # one bucket short: invalid, dropped with partial_success
    seeds.append(req)
    return seeds


def _ids_to_hex(node: Any) -> Any:
    """protobuf's JSON mapping writes bytes as base64; OTLP JSON writes trace/span ids as hex."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in ("traceId", "spanId") and isinstance(value, str):
                out[key] = base64.b64decode(value).hex()
            else:
                out[key] = _ids_to_hex(value)
        return out
    if isinstance(node, list):
        return [_ids_to_hex(item) for item in node]
    return node


# -- protobuf wire format ------------------------------------------------------------------------------------

Field = list[Any]  # [number, wire type, value (int or bytes), raw override or None]


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if i >= len(data) or shift > 63:
            raise ValueError("bad varint")
        byte = data[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, i
        shift += 7


def parse_fields(data: bytes) -> list[Field] | None:
    """The fields of a protobuf message, or None when `data` is not cleanly one."""
    fields: list[Field] = []
    i = 0
    try:
        while i < len(data):
            key, i = _read_varint(data, i)
            number, wire = key >> 3, key & 7
            if number == 0:
                return None
            if wire == 0:
                value, i = _read_varint(data, i)
                fields.append([number, 0, value, None])
            elif wire == 1:
                if i + 8 > len(data):
                    return None
                fields.append([number, 1, data[i : i + 8], None])
                i += 8
            elif wire == 2:
                length, i = _read_varint(data, i)
                if i + length > len(data):
                    return None
                fields.append([number, 2, data[i : i + length], None])
                i += length
            elif wire == 5:
                if i + 4 > len(data):
                    return None
                fields.append([number, 5, data[i : i + 4], None])
                i += 4
            else:
                return None
    except ValueError:
        return None
    return fields


def encode_fields(fields: list[Field]) -> bytes:
    out = bytearray()
    for number, wire, value, raw in fields:
        if raw is not None:
            out += raw
            continue
        out += varint((number << 3) | wire)
        if wire == 0:
            out += varint(value)
        elif wire == 2:
            out += varint(len(value)) + value
        else:
            out += value
    return bytes(out)


@functools.lru_cache(maxsize=32)
def nested_anyvalue(depth: int) -> bytes:
    """An AnyValue nesting kvlists `depth` deep (beyond protobuf's recursion limit of 100 when > ~30)."""
    # AnyValue{kvlist_value(6): KeyValueList{values(1): KeyValue{key(1)="k", value(2): AnyValue ...}}}
    prefixes: list[bytes] = []
    size = 0
    for _ in range(depth):
        kv_prefix = b"\x0a\x01k\x12" + varint(size)
        kv_size = len(kv_prefix) + size
        kvlist_prefix = b"\x0a" + varint(kv_size)
        kvlist_size = len(kvlist_prefix) + kv_size
        any_prefix = b"\x32" + varint(kvlist_size)
        prefixes.append(any_prefix + kvlist_prefix + kv_prefix)
        size = len(any_prefix) + kvlist_size
    return b"".join(reversed(prefixes))


_INTERESTING_VARINTS = [0, 1, 0x7F, 0x80, 0x3FFF, 0x4000, (1 << 31) - 1, 1 << 31, (1 << 32) - 1, 1 << 32,
                        (1 << 63) - 1, 1 << 63, (1 << 64) - 1]
_INTERESTING_ENCODED = [varint(v) for v in _INTERESTING_VARINTS]


def _overlong_varint(value: int, extra: int) -> bytes:
    """`value` encoded with `extra` redundant continuation bytes (11+ bytes is invalid protobuf)."""
    body = bytearray(varint(value))
    body[-1] |= 0x80
    body += b"\x80" * max(0, extra - 1) + b"\x00"
    return bytes(body)


class _ProtoMutator:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def mutate(self, data: bytes) -> bytes:
        fields = parse_fields(data)
        if not fields:
            return data
        return encode_fields(self._mutate_level(fields, depth=0))

    def _mutate_level(self, fields: list[Field], depth: int) -> list[Field]:
        rng = self.rng
        fields = [list(f) for f in fields]
        nested = [f for f in fields if f[1] == 2 and f[2] and parse_fields(f[2])]
        if nested and depth < 12 and rng.random() < 0.7:
            target = rng.choice(nested)
            inner = parse_fields(target[2])
            assert inner is not None
            target[2] = encode_fields(self._mutate_level(inner, depth + 1))
            return fields
        op = rng.randrange(12)
        f = rng.choice(fields)
        number, wire, value = f[0], f[1], f[2]
        if op == 0 and wire == 0:
            f[2] = rng.choice(_INTERESTING_VARINTS)
        elif op == 1:  # a varint with redundant bytes (valid up to 10 bytes, invalid beyond)
            extra = rng.choice([1, 3, 9, 10, 20])
            if wire == 0:
                f[3] = varint(number << 3) + _overlong_varint(value, extra)
            else:
                f[3] = _overlong_varint((number << 3) | wire, extra) + encode_fields([[number, wire, value, None]])[
                    len(varint((number << 3) | wire)):]
        elif op == 2 and wire == 2:  # a length prefix that lies
            delta = rng.choice([-1, 1, 2, 1000, 1 << 31, (1 << 64) - 1 - len(value)])
            f[3] = varint((number << 3) | 2) + varint(len(value) + delta) + value
        elif op == 3:  # the wrong wire type for the field
            f[1] = rng.choice([w for w in (0, 1, 2, 3, 4, 5, 6, 7) if w != wire])
            if f[1] in (3, 4, 6, 7):
                f[3] = varint((number << 3) | f[1]) + (value if isinstance(value, bytes) else varint(value))
            elif f[1] == 0:
                f[2] = value if isinstance(value, int) else len(value)
            elif f[1] == 1:
                f[2] = (value if isinstance(value, bytes) else struct.pack("<Q", value))[:8].ljust(8, b"\x00")
            elif f[1] == 5:
                f[2] = (value if isinstance(value, bytes) else struct.pack("<Q", value))[:4].ljust(4, b"\x00")
            else:
                f[2] = value if isinstance(value, bytes) else varint(value)
        elif op == 4:  # repeat a field
            fields[fields.index(f) : fields.index(f)] = [list(f) for _ in range(rng.choice([1, 2, 10, 100]))]
        elif op == 5:
            fields.remove(f)
        elif op == 6:  # an unknown field, including the largest and the reserved numbers
            number = rng.choice([15, 16, 999, 19000, 19999, (1 << 29) - 1, rng.randrange(1, 1 << 29)])
            wire = rng.choice([0, 1, 2, 5])
            payload: Any = {0: rng.choice(_INTERESTING_VARINTS), 1: rng.randbytes(8), 5: rng.randbytes(4),
                            2: rng.randbytes(rng.randrange(0, 40))}[wire]
            fields.insert(rng.randrange(len(fields) + 1), [number, wire, payload, None])
        elif op == 7 and wire == 2:  # string/bytes content: invalid UTF-8, empty, long, NUL
            f[2] = rng.choice([b"\xff\xfe", b"\xc0\x80", b"\xed\xa0\x80", b"", b"\x00" * 7, b"A" * 5000,
                               "é".encode() * 300, rng.randbytes(rng.randrange(1, 64))])
        elif op == 8 and wire in (1, 5):  # doubles and floats: NaN, infinities, denormals, -0
            f[2] = rng.choice([struct.pack("<d", float("nan")), struct.pack("<d", float("inf")),
                               struct.pack("<d", float("-inf")), struct.pack("<d", 5e-324),
                               struct.pack("<d", -0.0), b"\xff" * 8])[: 8 if wire == 1 else 4]
        elif op == 9 and wire == 2:  # nesting far beyond the recursion limit where a message is expected
            f[2] = nested_anyvalue(rng.choice([31, 50, 99, 100, 101, 200, 1000]))
        elif op == 10:
            rng.shuffle(fields)
        else:  # a packed repeated field of many values (bucket counts, bounds)
            f[1], f[3] = 2, None
            n = rng.choice([1, 3, 1000])
            f[2] = b"".join(rng.choices(_INTERESTING_ENCODED, k=n))
        return fields


# -- byte-level and JSON mutations ---------------------------------------------------------------------------


def _byte_mutation(rng: random.Random, data: bytes, other: bytes) -> bytes:
    if not data:
        return rng.randbytes(rng.randrange(1, 32))
    op = rng.randrange(9)
    i = rng.randrange(len(data))
    if op == 0:
        return data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1 :]
    if op == 1:
        return data[:i] + bytes([rng.choice([0, 0x7F, 0x80, 0xFF, rng.randrange(256)])]) + data[i + 1 :]
    if op == 2:
        return data[:i] + rng.randbytes(rng.randrange(1, 9)) + data[i:]
    if op == 3:
        return data[:i] + data[i + rng.randrange(1, 16) :]
    if op == 4:
        j = min(len(data), i + rng.randrange(1, 64))
        return data[:j] + data[i:j] * rng.choice([1, 2, 8]) + data[j:]
    if op == 5:
        return data[:i]  # truncation
    if op == 6:
        return data[: rng.randrange(len(data) + 1)] + other[rng.randrange(len(other) + 1) :]  # splice
    if op == 7:
        return data[:i] + b"\xff" * rng.choice([1, 10, 11]) + b"\x01" + data[i:]  # a huge varint
    return data + data  # a message repeated (protobuf merges; JSON breaks)


_JSON_VALUES: list[Any] = [
    None, True, False, 0, -1, 2**63, 2**64, -(2**63) - 1, 10**400, 1e308, -1e-320, "", "x", "NaN", "Infinity",
    "-Infinity", "1e999", "99999999999999999999999", "0x10", " 1", "\u0000", "\ud800", "é" * 100, [], {},
    [None], {"": None}, "A" * 10000,
]


def _deep_json_text(depth: int, kind: int) -> str:
    """An OTLP AnyValue (or plain arrays) nested `depth` deep, as text (json.dumps would recurse too deep)."""
    if kind == 0:
        return '{"kvlistValue":{"values":[{"key":"k","value":' * depth + '{"stringValue":"leaf"}' + "}]}}" * depth
    if kind == 1:
        return '{"arrayValue":{"values":[' * depth + '{"stringValue":"leaf"}' + "]}}" * depth
    return "[" * depth + "1" + "]" * depth


_DEEP = "\x00deep:"


def _dump_json(document: Any, ensure_ascii: bool) -> bytes:
    """json.dumps, with the deep-nesting placeholders replaced by their text."""
    text = json.dumps(document, ensure_ascii=ensure_ascii)
    marker = json.dumps(_DEEP, ensure_ascii=ensure_ascii)[:-1]
    while marker in text:
        start = text.index(marker)
        end = text.index('"', start + len(marker))
        depth, kind = text[start + len(marker) : end].split(":")
        text = text[:start] + _deep_json_text(int(depth), int(kind)) + text[end + 1 :]
    return text.encode("utf-8", "surrogatepass")


def _json_paths(node: Any, path: tuple[Any, ...], out: list[tuple[Any, ...]]) -> None:
    out.append(path)
    if isinstance(node, dict):
        for key, value in node.items():
            _json_paths(value, (*path, key), out)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            _json_paths(value, (*path, index), out)


def _json_mutation(rng: random.Random, document: dict[str, Any]) -> Any:
    doc: Any = json.loads(json.dumps(document))
    paths: list[tuple[Any, ...]] = []
    _json_paths(doc, (), paths)
    path = rng.choice(paths)
    parent: Any = None
    node: Any = doc
    for step in path:
        parent, node = node, node[step]
    op = rng.randrange(6)
    if not path:
        return rng.choice([_JSON_VALUES[rng.randrange(len(_JSON_VALUES))], [doc], {"resourceMetrics": doc}])
    key = path[-1]
    if op == 0:
        parent[key] = rng.choice(_JSON_VALUES)
    elif op == 1:
        del parent[key]
    elif op == 2 and isinstance(parent, dict):
        parent[rng.choice(["unknownField", "resource_metrics", "ResourceMetrics", "dataPoints", "asInt",
                           "asDouble", "traceId", "@type"])] = rng.choice(_JSON_VALUES)
    elif op == 3:
        parent[key] = f"{_DEEP}{rng.choice([10, 31, 50, 99, 101, 200, 400, 900, 3000])}:{rng.randrange(3)}"
    elif op == 4 and isinstance(node, list) and node:
        parent[key] = node * rng.choice([2, 50])
    else:
        parent[key] = rng.choice([str(node), [node], {"value": node}, len(str(node))])
    return doc


# -- encodings ----------------------------------------------------------------------------------------------


def _zstd(data: bytes, **kwargs: Any) -> bytes:
    return bytes(zstandard.ZstdCompressor(**kwargs).compress(data))


def _gzip_bomb(size: int) -> bytes:
    return gzip.compress(b"\x00" * size, 9)


def _zstd_bomb(size: int) -> bytes:
    params = zstandard.ZstdCompressionParameters.from_level(19, window_log=17)
    out = io.BytesIO()
    with zstandard.ZstdCompressor(compression_params=params).stream_writer(out, closefd=False) as writer:
        chunk = b"\x00" * 65536
        for _ in range(size // 65536):
            writer.write(chunk)
    return out.getvalue()


def _zstd_huge_window() -> bytes:
    """A frame header declaring a 2 GiB window (window descriptor exponent 21) and no content size."""
    return b"\x28\xb5\x2f\xfd" + b"\x00" + bytes([(21 << 3)]) + b"\x01\x00\x00"


# -- the generator ------------------------------------------------------------------------------------------


class Generator:
    """Inputs from a seed: the same seed gives the same inputs (failures are reproducible by index)."""

    def __init__(self, seed: int, token: str, *, max_compressed: int, max_decompressed: int) -> None:
        self.rng = random.Random(seed)
        self.token = token
        self.max_compressed = max_compressed
        self.max_decompressed = max_decompressed
        requests = seed_requests()
        self.proto_seeds = [bytes(r.SerializeToString()) for r in requests]
        self.json_seeds = [
            _ids_to_hex(json_format.MessageToDict(r, preserving_proto_field_name=False)) for r in requests
        ]
        self.proto_mutator = _ProtoMutator(self.rng)
        # Bombs are built once: each inflates far beyond max_decompressed from a body under max_compressed.
        self.bombs = {
            "gzip": [_gzip_bomb(max_decompressed * 64), gzip.compress(_gzip_bomb(max_decompressed * 8))],
            "zstd": [_zstd_bomb(max_decompressed * 64), _zstd_huge_window()],
        }

    # -- bodies --
    def _protobuf_body(self) -> tuple[str, bytes]:
        rng = self.rng
        seed = rng.choice(self.proto_seeds)
        roll = rng.random()
        if roll < 0.10:
            return "pristine", seed
        if roll < 0.55:
            body = seed
            for _ in range(rng.choice([1, 1, 2, 3])):
                body = self.proto_mutator.mutate(body)
            return "proto-structure", body
        if roll < 0.85:
            body = seed
            for _ in range(rng.choice([1, 1, 2, 4])):
                body = _byte_mutation(rng, body, rng.choice(self.proto_seeds))
            return "proto-bytes", body
        if roll < 0.92:
            depth = rng.choice([31, 32, 33, 99, 100, 101, 1000, 20000])
            inner = nested_anyvalue(depth)
            keyvalue = b"\x0a\x01a\x12" + varint(len(inner)) + inner
            resource = b"\x0a" + varint(len(keyvalue)) + keyvalue
            rm = b"\x0a" + varint(len(resource)) + resource
            return "proto-deep", b"\x0a" + varint(len(rm)) + rm
        if roll < 0.96:
            return "proto-huge-varint", rng.choice([
                b"\x0a" + b"\xff" * 10 + b"\x01", b"\x08" + b"\x80" * 10 + b"\x00",
                b"\x0a" + varint((1 << 64) - 1) + b"x", b"\xff" * 11, b"\x0a" + varint(1 << 31),
            ])
        return "random-bytes", rng.randbytes(rng.choice([0, 1, 2, 7, 64, 1024]))

    def _json_body(self) -> tuple[str, bytes]:
        rng = self.rng
        doc = rng.choice(self.json_seeds)
        roll = rng.random()
        if roll < 0.10:
            return "pristine", json.dumps(doc).encode()
        if roll < 0.65:
            mutated: Any = doc
            for _ in range(rng.choice([1, 1, 2, 3])):
                mutated = _json_mutation(rng, mutated) if isinstance(mutated, dict) else mutated
            return "json-structure", _dump_json(mutated, ensure_ascii=rng.random() < 0.5)
        if roll < 0.90:
            body = json.dumps(doc).encode()
            for _ in range(rng.choice([1, 1, 2, 4])):
                body = _byte_mutation(rng, body, json.dumps(rng.choice(self.json_seeds)).encode())
            return "json-bytes", body
        depth = rng.choice([100, 1000, 5000, 100_000])
        return "json-deep", rng.choice([b"[" * depth + b"]" * depth, b'{"a":' * depth + b"1" + b"}" * depth,
                                        b"[" * depth])

    @staticmethod
    def _parses(body: bytes, fmt: str) -> bool:
        """Whether `body` could be a valid request at all (False is certain; True is only possible)."""
        if fmt == "protobuf":
            try:
                ExportMetricsServiceRequest.FromString(body)
            except (DecodeError, RecursionError):
                return False
            return True
        try:
            return isinstance(json.loads(body), dict)
        except (ValueError, RecursionError):
            return False

    # -- encodings --
    def _encode(self, body: bytes) -> tuple[str, str, bytes, bool]:
        """(kind suffix, Content-Encoding header or "" for none, encoded body, certainly broken)."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.45:
            return "", rng.choice(["", "", "identity"]), body, False
        encoding = rng.choice(["gzip", "zstd"])
        header = encoding if rng.random() < 0.9 else encoding.upper()
        if roll < 0.75:
            if encoding == "gzip":
                return f"+{encoding}", header, gzip.compress(body, rng.choice([1, 6])), False
            return f"+{encoding}", header, _zstd(body, write_content_size=rng.random() < 0.5,
                                                write_checksum=rng.random() < 0.5), False
        if roll < 0.80:  # several members / frames: valid, decoded as their concatenation
            cut = rng.randrange(len(body) + 1)
            if encoding == "gzip":
                return f"+{encoding}-multi", header, gzip.compress(body[:cut], 1) + gzip.compress(body[cut:], 1), False
            return f"+{encoding}-multi", header, _zstd(body[:cut]) + _zstd(body[cut:]), False
        if roll < 0.90:  # a corrupt or truncated stream
            packed = gzip.compress(body, 1) if encoding == "gzip" else _zstd(body, write_checksum=True)
            return f"+{encoding}-corrupt", header, _byte_mutation(rng, packed, packed), False
        if roll < 0.95:
            return f"+{encoding}-bomb", header, rng.choice(self.bombs[encoding]), True
        if roll < 0.98:  # the header lies: the body is not compressed, or compressed the other way
            other = _zstd(body) if encoding == "gzip" else gzip.compress(body, 1)
            return f"+{encoding}-mismatch", header, rng.choice([body, other, zlib.compress(body)]), False
        return "+unsupported", rng.choice(["br", "deflate", "x-gzip", "gzip, zstd", "compress", "*", "zstd;q=1"]), \
            body, True

    # -- one input --
    def _content_type(self, fmt: str) -> tuple[str, str | None, str | None]:
        """(kind suffix, Content-Type header or None for none, the format it declares or None if unsupported)."""
        rng = self.rng
        canonical = PROTOBUF if fmt == "protobuf" else JSON
        roll = rng.random()
        if roll < 0.04:
            return "+bad-content-type", rng.choice([
                None, "text/plain", "", "application/octet-stream", "application/x-protobuf2", "application/jsonx",
                "multipart/form-data; boundary=x", "*/*", "application/grpc",
                "application/x-protobuf, application/json"]), None
        if roll < 0.07:
            variant = rng.choice(["application/json; charset=utf-8", "APPLICATION/X-PROTOBUF", "application/protobuf",
                                  " application/x-protobuf ", "application/x-protobuf; proto=opentelemetry.proto",
                                  "Application/Json"])
            return "+content-type-variant", variant, "json" if "json" in variant.lower() else "protobuf"
        if roll < 0.09:
            return "+swapped-content-type", JSON if fmt == "protobuf" else PROTOBUF, \
                "json" if fmt == "protobuf" else "protobuf"
        return "", canonical, fmt

    def next(self, index: int) -> FuzzInput:
        rng = self.rng
        fmt = rng.choice(["protobuf", "protobuf", "json"])
        kind, body = self._protobuf_body() if fmt == "protobuf" else self._json_body()
        suffix, content_encoding, wire_body, broken_encoding = self._encode(body)
        kind += suffix
        ct_kind, content_type, declared = self._content_type(fmt)
        kind += ct_kind
        tag = f"fuzz-{index}"
        headers: list[tuple[str, str]] = [("Host", "127.0.0.1")]
        if content_type is not None:
            headers.append(("Content-Type", content_type))
        if content_encoding:
            headers.append(("Content-Encoding", content_encoding))
        never_200 = broken_encoding or declared is None or not self._parses(body, declared)
        expect_status: int | None = None
        if declared is None or suffix == "+unsupported":
            expect_status = 415

        token_roll = rng.random()
        if token_roll < 0.9:
            headers.append(("Authorization", f"Bearer {self.token}"))
        elif token_roll < 0.98:
            headers.extend(rng.choice([
                [], [("Authorization", "Bearer")], [("Authorization", f"Bearer {self.token}x")],
                [("Authorization", f"Basic {base64.b64encode(b'u:p').decode()}")],
                [("Authorization", "Bearer " + "A" * 4000)], [("Authorization", f"Bearer {self.token[:-1]}")],
                [("Authorization", "Bearer wrong")]]))
            kind += "+bad-token"
            never_200, expect_status = True, 401  # the token is checked before anything else
        else:
            headers.append(("Authorization", rng.choice([f"bearer {self.token}", f"BEARER  {self.token} "])))
            kind += "+token-variant"

        headers.append(("kct-client-instance-id", tag))
        if rng.random() < 0.5:
            # with both ids in headers the receiver may store a push without decoding it (native validator)
            headers.append(("kct-client-id", "fuzz-producer"))
        if rng.random() < 0.15:
            headers.extend(self._label_headers())
            kind += "+labels"
        expect_200 = (
            kind.startswith("pristine")
            and suffix in ("", "+gzip", "+zstd", "+gzip-multi", "+zstd-multi")
            and declared == fmt
            and "+bad-token" not in kind
            and "+labels" not in kind
        )
        if rng.random() < 0.90:
            return FuzzInput(index, kind, self._frame(headers, wire_body), tag, expect_200=expect_200,
                             never_200=never_200, expect_status=expect_status)
        return self._broken_framing(index, kind, headers, wire_body, tag, never_200, expect_status)

    def _label_headers(self) -> list[tuple[str, str]]:
        rng = self.rng
        names = ["kct-client-id", "kct-push-interval-ms", "kct-terminating", "kct-principal", "kct-broker-id",
                 "kct-client-software-name", "kct-listener", "kct-client-source-port"]
        values = ["", "0", "-1", "1000", "86400001", "99999999999999999999", "true", "TRUE", "maybe", "%", "%zz",
                  "%ff%fe", "%e2%82%ac", "User:alice", "User:", ":", "a" * 2000, "\t", "caf%C3%A9", "1e3", "\uff11"]
        return [(rng.choice(names), rng.choice(values)) for _ in range(rng.randrange(1, 4))]

    @staticmethod
    def _frame(headers: list[tuple[str, str]], body: bytes, *, method: str = "POST",
               target: str = "/v1/metrics") -> bytes:
        head = f"{method} {target} HTTP/1.1\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers)
        head += f"Content-Length: {len(body)}\r\n\r\n"
        return head.encode("utf-8", "surrogatepass") + body

    def _broken_framing(self, index: int, kind: str, headers: list[tuple[str, str]], body: bytes, tag: str,
                        never_200: bool, expect_status: int | None) -> FuzzInput:
        rng = self.rng
        op = rng.randrange(12)
        head_lines = "".join(f"{k}: {v}\r\n" for k, v in headers)
        if op == 0:  # valid chunked transfer encoding (no Content-Length)
            chunks = b""
            i = 0
            while i < len(body):
                n = rng.randrange(1, 4096)
                chunks += f"{n if i + n <= len(body) else len(body) - i:x}\r\n".encode() + body[i : i + n] + b"\r\n"
                i += n
            raw = f"POST /v1/metrics HTTP/1.1\r\n{head_lines}Transfer-Encoding: chunked\r\n\r\n".encode() + \
                chunks + b"0\r\n\r\n"
            return FuzzInput(index, kind + "+chunked", raw, tag, never_200=never_200, expect_status=expect_status,
                             fresh_connection=True)
        if op == 1:  # malformed chunked encoding
            bad = rng.choice([b"zz\r\n", b"-1\r\n", b"ffffffffffffffffff\r\n", b"5\r\nab\r\n0\r\n\r\n",
                              b"5;ext=\x00\r\nabcde\r\n0\r\n\r\n", b"0\r\n", b"3\nabc\n0\n\n"])
            raw = f"POST /v1/metrics HTTP/1.1\r\n{head_lines}Transfer-Encoding: chunked\r\n\r\n".encode() + bad
            return FuzzInput(index, kind + "+bad-chunked", raw, tag, never_200=True, half_close=True,
                             fresh_connection=True)
        if op == 2:  # both Content-Length and chunked (a smuggling attempt)
            raw = (f"POST /v1/metrics HTTP/1.1\r\n{head_lines}Content-Length: {len(body)}\r\n"
                   f"Transfer-Encoding: chunked\r\n\r\n").encode() + body
            return FuzzInput(index, kind + "+cl-and-te", raw, tag, never_200=True, half_close=True,
                             fresh_connection=True)
        if op == 3:  # a body shorter than its Content-Length, then the client closes its side
            raw = (f"POST /v1/metrics HTTP/1.1\r\n{head_lines}Content-Length: {len(body) + rng.randrange(1, 10000)}"
                   "\r\n\r\n").encode() + body
            return FuzzInput(index, kind + "+short-body", raw, tag, never_200=True, half_close=True,
                             fresh_connection=True)
        if op == 4:  # a Content-Length that is not a number, or two that disagree
            cl = rng.choice([f"{len(body)}, {len(body) + 1}", "-1", "0x10", "1e3", " ", "99999999999999999999999"])
            raw = f"POST /v1/metrics HTTP/1.1\r\n{head_lines}Content-Length: {cl}\r\n\r\n".encode() + body
            return FuzzInput(index, kind + "+bad-content-length", raw, tag, never_200=True, half_close=True,
                             fresh_connection=True)
        if op == 5:  # headers too long or too many
            if rng.random() < 0.5:
                extra = [("X-Long", "a" * rng.choice([8190, 9000, 70000]))]
            else:
                extra = [(f"X-H{i}", "v") for i in range(rng.choice([100, 200, 2000]))]
            return FuzzInput(index, kind + "+big-headers", self._frame(headers + extra, body), tag,
                             never_200=never_200, fresh_connection=True)
        if op == 6:  # malformed header lines
            bad = rng.choice(["NoColon\r\n", " folded: continuation\r\n", "Bad Name: v\r\n", "X: a\x00b\r\n",
                              "X: \x7f\r\n", ": empty-name\r\n", "X:\xff\xfe\r\n"])
            raw = (f"POST /v1/metrics HTTP/1.1\r\n{head_lines}{bad}Content-Length: {len(body)}\r\n\r\n"
                   .encode("utf-8", "surrogateescape") + body)
            return FuzzInput(index, kind + "+bad-header-line", raw, tag, never_200=never_200, fresh_connection=True)
        if op == 7:  # other methods and paths
            method, target = rng.choice([("GET", "/v1/metrics"), ("PUT", "/v1/metrics"), ("POST", "/v1/traces"),
                                         ("POST", "/v1/metrics/"), ("POST", "/v1/metrics?x=%zz"),
                                         ("POST", "http://other/v1/metrics"), ("POST", "/v1/%00metrics"),
                                         ("POST", "/" + "a" * 9000), ("OPTIONS", "*"), ("DELETE", "/metrics"),
                                         ("POST", "/healthz"), ("BREW", "/v1/metrics")])
            # The absolute form and a query string still name /v1/metrics (RFC 9112 3.2.2): only the body decides.
            routed = (method, target) in (("POST", "/v1/metrics?x=%zz"), ("POST", "http://other/v1/metrics"))
            return FuzzInput(index, kind + "+method-path", self._frame(headers, body, method=method, target=target),
                             tag, never_200=never_200 or not routed, fresh_connection=True)
        if op == 8:  # a broken request line or HTTP version
            line = rng.choice(["POST /v1/metrics HTTP/1.1 extra", "POST  /v1/metrics HTTP/1.1", "POST /v1/metrics",
                               "POST /v1/metrics HTTP/2.0", "POST /v1/metrics HTTP/9.9", "POST /v1/metrics HTTP/1.x",
                               "\x00\x01\x02", "POST /v1/metrics HTTP/1.0", "PRI * HTTP/2.0", ""])
            raw = f"{line}\r\n{head_lines}Content-Length: {len(body)}\r\n\r\n".encode() + body
            # Some of these the HTTP parser tolerates (no version: HTTP/0.9 style; 1.0): only the body decides.
            return FuzzInput(index, kind + "+request-line", raw, tag, never_200=never_200,
                             half_close=True, fresh_connection=True)
        if op == 9:  # Expect: 100-continue (the server answers 100 first, or refuses without reading)
            raw = self._frame([*headers, ("Expect", "100-continue")], body)
            return FuzzInput(index, kind + "+expect-continue", raw, tag, never_200=never_200,
                             fresh_connection=True)
        if op == 10:  # LF-only line endings
            raw = self._frame(headers, body).replace(b"\r\n", b"\n", len(headers) + 2)
            return FuzzInput(index, kind + "+lf-only", raw, tag, never_200=never_200, fresh_connection=True)
        # a declared Content-Length above the limit while the body is small: refused without reading it
        raw = (f"POST /v1/metrics HTTP/1.1\r\n{head_lines}Content-Length: {self.max_compressed + 1}\r\n\r\n"
               .encode() + body)
        return FuzzInput(index, kind + "+declared-too-large", raw, tag, never_200=True, half_close=True,
                         fresh_connection=True)

