"""A push's point times read off its wire bytes (`dev.kct.otlp.PushWire`, what a stream over records reads of
every record) are the ones protobuf's full parse gives (`PushTimes.parsedTimes`): over valid pushes of every
metric kind, pushes of odd but valid shapes (repeated oneof fields, repeated times, unknown fields, unpacked
numbers, non-minimal varints, deep nesting), broken ones (truncated, bad lengths, bad UTF-8, bad varints) and
random mutations of valid ones. Where the wire reader is not sure it says so, and PushTimes parses instead."""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest

pytestmark = pytest.mark.spark

T0 = 1_700_000_040 * 1_000_000_000


@pytest.fixture(scope="module")
def jvm(jvm_decoder: Any) -> Any:
    """The JVM of the session with the decoder jar, which holds PushWire and PushTimes (conftest.py)."""
    return jvm_decoder.sparkContext._jvm


# The protobuf wire format, by hand, for the shapes protobuf's own encoder never writes.
def _varint(n: int, pad: int = 0) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        if n or pad:
            out.append(byte | 0x80)
            if not n:
                out.extend([0x80] * (pad - 1) + [0x00])
                return bytes(out)
        else:
            out.append(byte)
            return bytes(out)


def _tag(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _ld(field: int, body: bytes, pad: int = 0) -> bytes:
    return _tag(field, 2) + _varint(len(body), pad) + body


def _fixed64(field: int, value: int) -> bytes:
    return _tag(field, 1) + struct.pack("<Q", value % (1 << 64))


def _point(time: int | None = None, *extra: bytes) -> bytes:
    """A NumberDataPoint: time_unix_nano (3), as_double (4), then `extra` fields."""
    body = b"" if time is None else _fixed64(3, time)
    return body + _tag(4, 1) + struct.pack("<d", 1.5) + b"".join(extra)


def _attribute(key: bytes, value: bytes) -> bytes:
    """A KeyValue: key (1), AnyValue (2) holding a string_value (1)."""
    return _ld(1, key) + _ld(2, _ld(1, value))


def _request(*metrics: bytes) -> bytes:
    """ExportMetricsServiceRequest > ResourceMetrics (1) > ScopeMetrics (2) > Metric (2)."""
    return _ld(1, _ld(2, b"".join(_ld(2, m) for m in metrics)))


def _metric(name: bytes, *data: tuple[int, bytes]) -> bytes:
    """A Metric: name (1), then data fields (gauge 5, sum 7, histogram 9, ...) each holding data_points (1)."""
    return _ld(1, name) + b"".join(_ld(field, body) for field, body in data)


def _gauge(*points: bytes) -> bytes:
    return b"".join(_ld(1, p) for p in points)


def _nested_any(depth: int) -> bytes:
    """An AnyValue nested `depth` times through array_value (5) > values (1)."""
    value = _ld(1, b"leaf")
    for _ in range(depth):
        value = _ld(5, _ld(1, value))
    return value


def _kv(key: str, value: Any) -> Any:
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    return KeyValue(key=key, value=value if isinstance(value, AnyValue) else AnyValue(string_value=value))


def _add_point(m: Any, kind: int, t: int, rng: random.Random) -> Any:
    """A point of metric kind `kind` (gauge, sum, histogram, exponential histogram, summary) at time `t`."""
    from opentelemetry.proto.metrics.v1 import metrics_pb2 as M

    if kind == 0:
        return m.gauge.data_points.add(time_unix_nano=t, as_double=rng.random())
    if kind == 1:
        m.sum.aggregation_temporality = M.AGGREGATION_TEMPORALITY_CUMULATIVE
        m.sum.is_monotonic = True
        p = m.sum.data_points.add(time_unix_nano=t, start_time_unix_nano=T0, as_int=rng.randint(0, 99))
        p.exemplars.add(time_unix_nano=(t + 5) % (1 << 64), as_double=1.0, span_id=b"\x01" * 8)
        return p
    if kind == 2:
        return m.histogram.data_points.add(time_unix_nano=t, count=3, sum=4.5, bucket_counts=[1, 2, 0],
                                           explicit_bounds=[1.0, 2.0])
    if kind == 3:
        p = m.exponential_histogram.data_points.add(time_unix_nano=t, count=2, scale=-1, zero_count=1)
        p.positive.bucket_counts.extend([1, 1])
        return p
    p = m.summary.data_points.add(time_unix_nano=t, count=1, sum=2.0)
    p.quantile_values.add(quantile=0.5, value=2.0)
    return p


def _valid_pushes() -> list[bytes]:
    """Pushes protobuf's encoder writes: every metric kind, exemplars, nested attributes, many resources."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValueList

    rng = random.Random(11)
    out = [ExportMetricsServiceRequest().SerializeToString()]
    for n in range(60):
        request = ExportMetricsServiceRequest()
        for r in range(1 + n % 3):
            rm = request.resource_metrics.add()
            rm.resource.attributes.extend([_kv("service.name", f"svc-{r}"), _kv("h\u00f6st", "\u6771\u4eac"),
                                           _kv("nested", AnyValue(kvlist_value=KeyValueList(values=[_kv("a", "b")])))])
            sm = rm.scope_metrics.add()
            sm.scope.name = "kct.test"
            sm.scope.attributes.extend([_kv("v", AnyValue(int_value=-3))])
            for i in range(n % 6 + 1):
                m = sm.metrics.add()
                m.name = f"org.apache.kafka.m{i}"
                m.unit = "ms"
                times = [T0 + rng.randint(-10**12, 10**12) for _ in range(rng.randint(0, 4))]
                if n % 20 == 7:  # times past 2^63: stored as negative longs
                    times = [(1 << 64) - 1, 1 << 63, 0]
                for t in times:
                    _add_point(m, (n + i) % 5, t, rng).attributes.extend(
                        [_kv("topic", f"t{rng.randint(0, 3)}"), _kv("b", AnyValue(bool_value=True))])
                if not times and i % 2:
                    m.gauge.SetInParent()  # a data field without points
        out.append(request.SerializeToString())
    return out


def _odd_and_broken(valid: bytes) -> list[bytes]:
    """Hand-written pushes: odd shapes protobuf accepts and broken ones it refuses."""
    p1, p2 = _point(T0 + 1, _ld(7, _attribute(b"k", b"v"))), _point(T0 + 2)
    one = _request(_metric(b"m", (5, _gauge(p1, p2))))
    return [
        one,
        _request(_metric(b"m", (5, _gauge(_point(None))))),                       # a point without a time: 0
        _request(_metric(b"m", (5, _gauge(p1)), (5, _gauge(p2)))),               # the gauge twice: merged
        _request(_metric(b"m", (5, _gauge(p1)), (7, _gauge(p2)))),               # gauge, then sum: sum
        _request(_metric(b"m", (5, _gauge(p1)), (7, _gauge(p2)), (5, _gauge(_point(T0 + 3))))),
        _request(_metric(b"m", (5, _gauge(_fixed64(3, T0) + _fixed64(3, T0 + 9))))),  # two times: the last
        _request(_metric(b"m", (5, _gauge(_point(T0, _fixed64(99, 1)))))),           # an unknown field in a point
        _request(_metric(b"m", (5, _gauge(p1)))) + _tag(15, 0) + _varint(7),        # ... at the top
        _request(_metric(b"m", (5, _gauge(p1)))) + _tag(15, 3) + _tag(15, 4),        # an unknown group
        _request(_metric(b"m", (5, _gauge(p1)))) + _tag(15, 3) + _tag(16, 4),        # a group ended wrong
        _request(_metric(b"m", (5, _gauge(p1)))) + _tag(15, 4),                     # an end without a start
        _request(_metric(b"m", (5, _gauge(_point(T0, _tag(3, 0) + _varint(5)))))),  # the time as a varint
        # a histogram point's bucket_counts (6) unpacked, and packed with a length not a multiple of 8
        _request(_metric(b"h", (9, _ld(1, _fixed64(3, T0) + _fixed64(6, 1) + _fixed64(6, 2))))),
        _request(_metric(b"h", (9, _ld(1, _fixed64(3, T0) + _ld(6, b"\x01" * 12))))),
        _request(_metric(b"h", (9, _ld(1, _fixed64(3, T0) + _ld(6, b"\x01" * 16))))),
        # exponential histogram positive buckets' counts (2 in Buckets) packed varints, one cut off
        _request(_metric(b"e", (10, _ld(1, _fixed64(3, T0) + _ld(8, _ld(2, _varint(300) + b"\x81")))))),
        _request(_metric(b"e", (10, _ld(1, _fixed64(3, T0) + _ld(8, _ld(2, _varint(300) + _varint(1))))))),
        _ld(1, _ld(2, _ld(2, _metric(b"m", (5, _gauge(p1)))), pad=3), pad=2),        # non-minimal lengths
        _request(_metric(b"m", (5, _gauge(p1)))).replace(b"\x0a", b"\x8a\x00", 1),  # a non-minimal tag
        _request(_metric(b"m\xff", (5, _gauge(p1)))),                               # a name not UTF-8
        _request(_metric(b"\xed\xa0\x80", (5, _gauge(p1)))),                        # a surrogate in UTF-8
        _request(_metric(b"\xc3\xa9", (5, _gauge(p1)))),                            # valid two-byte UTF-8
        _request(_metric(b"m", (5, _gauge(_point(T0, _ld(7, _ld(1, b"k") + _ld(2, _ld(7, b"\xff")))))))),  # bytes
        _request(_metric(b"m", (5, _gauge(_point(T0, _ld(7, _ld(1, b"k") + _ld(2, _nested_any(40)))))))),
        _request(_metric(b"m", (5, _gauge(_point(T0, _ld(7, _ld(1, b"k") + _ld(2, _nested_any(120)))))))),
        _request(_metric(b"m", (5, _gauge(_point(T0, _tag(8, 0) + b"\xff" * 9 + b"\x01"))))),  # flags, a 10-byte varint
        _request(_metric(b"m", (5, _gauge(_point(T0, _tag(8, 0) + b"\xff" * 10 + b"\x01"))))),  # 11 bytes
        _tag(0, 2) + _varint(0) + one,                                              # field number 0
        _tag(1, 6) + one,                                                           # wire type 6
        _tag(1, 2) + _varint(len(one)) + one,                                       # a length past the end
        _tag(1, 2) + b"\xff\xff\xff\xff\x0f",                                       # a negative length
        _tag(1, 2) + b"\x80\x80\x80\x80\x80\x00",                                  # a 6-byte length
        _tag(1, 2) + b"\x81\x80\x80\x80\x10" + b"\x00",                            # length 2^32 + 1
        b"\x0a",
        b"not a push at all",
        *(valid[:cut] for cut in range(0, len(valid), max(1, len(valid) // 120))),  # cut short
    ]


def _mutations(valid: list[bytes], count: int) -> list[bytes]:
    """Random damage to valid pushes: bytes changed, inserted, deleted or repeated."""
    rng = random.Random(23)
    out = []
    for _ in range(count):
        body = bytearray(rng.choice(valid[1:]))
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(body))
            action = rng.randrange(4)
            if action == 0:
                body[at] = rng.randrange(256)
            elif action == 1:
                body[at:at] = rng.randbytes(rng.randint(1, 4))
            elif action == 2:
                del body[at:at + rng.randint(1, 8)]
            else:
                body[at:at] = body[at:at + rng.randint(1, 30)]
        out.append(bytes(body))
    return out


def _times(array: Any) -> list[int] | None:
    return None if array is None else list(array)


def test_wire_times_are_protobufs_or_not_sure(jvm: Any) -> None:
    valid = _valid_pushes()
    written = valid + _odd_and_broken(valid[5])
    read: dict[str, int] = {"pushes": 0, "empty": 0, "mutated": 0}
    unsure = refused = 0
    for i, value in enumerate(written + _mutations(valid, 1500)):
        wire = _times(jvm.dev.kct.otlp.PushWire.times(value))
        parsed = _times(jvm.dev.kct.otlp.PushTimes.parsedTimes(value))
        if wire is None:
            unsure += 1
            refused += parsed is None
            continue
        assert wire == parsed, f"push {value.hex()}: wire {wire}, protobuf {parsed}"
        read["pushes"] += 1
        read["empty"] += not wire
        read["mutated"] += i >= len(written)
    for value in valid:
        assert jvm.dev.kct.otlp.PushWire.times(value) is not None, f"valid push {value.hex()} not read"
    # Both answers occur often enough for the comparison to mean something (1,500 mutations: ~5 % still
    # parse, damage inside a number; nearly all the others protobuf refuses, and the wire reader with it).
    assert read["pushes"] >= 120 and read["empty"] >= 2 and read["mutated"] >= 30, read
    assert unsure >= 1000 and refused >= 1000, (unsure, refused)


def test_odd_shapes(jvm: Any) -> None:
    """What protobuf makes of the odd shapes, and that the wire reader leaves them to it."""
    cases = _odd_and_broken(_valid_pushes()[5])

    def both(i: int) -> tuple[list[int] | None, list[int] | None]:
        return (_times(jvm.dev.kct.otlp.PushWire.times(cases[i])),
                _times(jvm.dev.kct.otlp.PushTimes.parsedTimes(cases[i])))

    assert both(0) == ([T0 + 1, T0 + 2], [T0 + 1, T0 + 2])
    assert both(1) == ([0], [0])
    assert both(2) == (None, [T0 + 1, T0 + 2])  # merged by protobuf
    assert both(3)[0] is None and both(4)[0] is None
    assert both(5) == (None, [T0 + 9])
    assert both(6) == (None, [T0]) and both(7) == (None, [T0 + 1]) and both(8) == (None, [T0 + 1])
    assert both(9) == (None, None) and both(10) == (None, None)
    assert both(11) == (None, [T0])  # the time as a varint: an unknown field to protobuf
    assert both(12) == ([T0], [T0]) and both(13) == (None, None) and both(14) == ([T0], [T0])
    assert both(15) == (None, None) and both(16) == ([T0], [T0])
    assert both(17) == ([T0 + 1], [T0 + 1]) and both(18) == ([T0 + 1], [T0 + 1])
    assert both(19)[0] is None and both(20)[0] is None and both(21) == ([T0 + 1], [T0 + 1])
    assert both(22) == ([T0], [T0])  # bytes_value: not UTF-8, and need not be
    assert both(23) == (None, [T0]) and both(24) == (None, None)  # 40 levels: protobuf's; 120: past its 100
    assert both(25) == ([T0], [T0]) and both(26) == (None, None)


def test_push_times_udf_uses_either(jvm: Any) -> None:
    """PushTimes (the UDF) gives [earliest, newest] of protobuf's times whichever way it read them."""
    valid = _valid_pushes()
    udf = jvm.dev.kct.otlp.PushTimes()
    for value in valid + _odd_and_broken(valid[5]):
        parsed = _times(jvm.dev.kct.otlp.PushTimes.parsedTimes(value))  # signed, as Java's longs
        expected = None if not parsed else [min(parsed), max(parsed)]
        assert _times(udf.call(value)) == expected
