"""The native scan (kct.receiver._otlpscan), the one owner of the receiver's validity rules, against the
Python walk over the decoded message (tests/receiver_oracle).

`sanitize` applies the scan's report (what to drop, by position, and why) to the decoded message; the
oracle walks the rules itself. On the fuzz seeds, on thousands of wire-level mutations of them (the
fuzzer's mutator) and on crafted pushes, both must leave the same message, bit for bit, and give the same
answer (points kept and rejected, metrics and attributes dropped, the reasons in order), from the wire bytes
and from the message's own encoding (a JSON push). Whenever the fast path ("nothing to change, N points")
answers, the oracle must change nothing; and it must answer for clean pushes, or it would be useless (and
this test vacuous).
"""

from __future__ import annotations

import random
import subprocess
import sys

import pytest
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric, Sum
from otlp_fuzz import _ProtoMutator, seed_requests
from preconditions import require_module
from receiver_oracle.sanitize_walk import walk

from kct.receiver import _otlpscan
from kct.receiver.config import PrivacyConfig
from kct.receiver.privacy import AttributeFilter
from kct.receiver.sanitize import SanitizeResult, sanitize, scan_untouched

require_module("kct.receiver._otlpscan", "the receiver's C extension (pip install -e . builds it)")

MUTATIONS = 4000


def _clean_push(points: int = 100) -> ExportMetricsServiceRequest:
    req = ExportMetricsServiceRequest()
    rm = req.resource_metrics.add()
    kv = rm.resource.attributes.add()
    kv.key, kv.value.string_value = "service.name", "bench"
    sm = rm.scope_metrics.add()
    sm.scope.name = "librdkafka"
    for m in range(10):
        metric = sm.metrics.add()
        metric.name = f"org.apache.kafka.m{m}"
        dps = metric.sum.data_points if m % 2 else metric.gauge.data_points
        for p in range(points // 10):
            dp = dps.add()
            dp.as_double = p * 1.5
            akv = dp.attributes.add()
            akv.key, akv.value.string_value = "topic", f"t{p}"
    hist = sm.metrics.add()
    hist.name = "latency"
    hp = hist.histogram.data_points.add()
    hp.bucket_counts.extend([1, 2, 3])
    hp.explicit_bounds.extend([1.0, 2.0])
    return req


def _answer(result: SanitizeResult) -> tuple[int, int, int, int, list[str], str]:
    return (result.data_points, result.rejected_data_points, result.dropped_metrics, result.dropped_attributes,
            result.reasons, result.error_message)


def _agree(data: bytes, filt: AttributeFilter, check_points: bool) -> bool | None:
    """None when the bytes do not parse (the scan never sees those); else whether the fast path answered.
    Asserts that `sanitize` (the scan's report applied), from the wire bytes and from the message's own
    encoding, leaves the message the oracle leaves and gives the oracle's answer."""
    try:
        request = ExportMetricsServiceRequest.FromString(data)
    except DecodeError:
        return None
    walked = walk(request, filt, point_attributes=True, check_points=check_points)
    expected = (_answer(walked), request.SerializeToString(deterministic=True))
    for serialized in (data, None):
        mine = ExportMetricsServiceRequest.FromString(data)
        result = sanitize(mine, filt, serialized=serialized, check_points=check_points)
        assert (_answer(result), mine.SerializeToString(deterministic=True)) == expected, (
            f"report applied != oracle (from {'wire bytes' if serialized else 'the encoding'}): {data.hex()}"
        )
        assert result.modified == walked.modified
    native = scan_untouched(data, filt, check_points=check_points)
    if native is None:
        return False
    assert not walked.modified, f"the scan said untouched, the walk changed something: {walked}"
    assert (native.data_points, native.rejected_data_points, native.dropped_attributes) == (
        walked.data_points, 0, 0
    )
    return True


@pytest.mark.parametrize("check_points", [True, False])
def test_report_applied_agrees_with_the_walk_on_seeds_and_mutations(check_points: bool) -> None:
    """Given the fuzz seeds and wire-level mutations of them, then the scan's report applied leaves the
    message the walk leaves, with the same answer; and whenever the fast path answers, the walk agrees."""
    filt = AttributeFilter(PrivacyConfig())
    seeds = [bytes(r.SerializeToString()) for r in seed_requests()]
    mutator = _ProtoMutator(random.Random(714 + check_points))
    answered = parsed = changed = unfollowed = 0
    rng = random.Random(15)
    for i in range(MUTATIONS):
        data = seeds[i % len(seeds)] if i < len(seeds) else mutator.mutate(rng.choice(seeds))
        outcome = _agree(data, filt, check_points)
        parsed += outcome is not None
        answered += bool(outcome)
        if outcome is False:
            changed += 1
            unfollowed += _otlpscan.scan(data, True, check_points) is None
    # Both sides of the comparison are exercised: pushes left as sent, pushes changed, and wire bytes the
    # scan does not follow (asked again about the canonical encoding).
    assert parsed > MUTATIONS // 4 and answered > 0 and changed > 0 and unfollowed > 0, (
        parsed, answered, changed, unfollowed
    )


def test_scan_answers_for_a_clean_push_and_counts_its_points() -> None:
    """Given a valid push without private keys, then the scan answers (the fast path is taken) with its points."""
    filt = AttributeFilter(PrivacyConfig())
    data = bytes(_clean_push().SerializeToString())
    assert _agree(data, filt, True) is True
    result = scan_untouched(data, filt)
    assert result is not None and result.data_points == 101


@pytest.mark.parametrize(
    "spoil",
    ["private_point_key", "private_resource_key", "private_scope_key", "point_without_value", "nameless_metric",
     "metric_without_data", "histogram_buckets_mismatch"],
)
def test_scan_declines_whenever_the_walk_would_change_something(spoil: str) -> None:
    """Given a push with one thing the walk drops or rejects, then the scan declines (returns None)."""
    req = _clean_push()
    sm = req.resource_metrics[0].scope_metrics[0]
    if spoil == "private_point_key":
        kv = sm.metrics[0].gauge.data_points[3].attributes.add()
        kv.key, kv.value.string_value = "host.name", "h1"
    elif spoil == "private_resource_key":
        kv = req.resource_metrics[0].resource.attributes.add()
        kv.key, kv.value.string_value = "process.command_line", "java -jar app.jar"
    elif spoil == "private_scope_key":
        kv = sm.scope.attributes.add()
        kv.key, kv.value.string_value = "host.name", "h1"
    elif spoil == "point_without_value":
        sm.metrics[1].sum.data_points.add()
    elif spoil == "nameless_metric":
        sm.metrics[2].name = ""
    elif spoil == "metric_without_data":
        sm.metrics.add().name = "empty"
    else:
        sm.metrics[-1].histogram.data_points[0].explicit_bounds.append(3.0)
    data = bytes(req.SerializeToString())
    filt = AttributeFilter(PrivacyConfig())
    assert scan_untouched(data, filt) is None
    assert sanitize(ExportMetricsServiceRequest.FromString(data), filt, serialized=data).modified
    assert _agree(data, filt, True) is False


def test_report_names_what_to_drop_by_position_and_the_reasons_read_as_before() -> None:
    """Given a push with one of each invalid thing in the second scope of the second resource, then the
    scan reports each at its position with its reason code and rejected points, in message order, and
    `sanitize` drops exactly those and words the partial-success reasons as the receiver always has."""
    req = ExportMetricsServiceRequest()
    req.resource_metrics.add().CopyFrom(_clean_push(10).resource_metrics[0])
    rm = req.resource_metrics.add()
    rm.CopyFrom(_clean_push(10).resource_metrics[0])
    sm = rm.scope_metrics.add()
    sm.CopyFrom(rm.scope_metrics[0])
    sm.metrics[1].sum.data_points.add()  # m1, a sum: two points without a value after its valid one
    sm.metrics[1].sum.data_points.add()
    sm.metrics[2].name = ""  # a gauge with one point
    sm.metrics.add().name = "empty"  # index 11 (10 numbers, the histogram): no data
    sm.metrics[10].histogram.data_points[0].explicit_bounds.append(3.0)
    data = req.SerializeToString()
    found = _otlpscan.scan(data, True, True)
    assert found is not None
    points, _, drops = found
    assert drops == (
        (1, 1, 1, _otlpscan.NUMBER_WITHOUT_VALUE, 2, (1, 2)),
        (1, 1, 2, _otlpscan.NO_NAME, 1, ()),
        (1, 1, 10, _otlpscan.HISTOGRAM_BUCKETS, 1, (0,)),
        (1, 1, 11, _otlpscan.NO_DATA, 0, ()),
    )
    assert points == 2 * 11 + 9  # two clean scopes of 11 points; the third keeps m0, m1's valid one, m3..m9
    result = sanitize(req, AttributeFilter(PrivacyConfig()), serialized=data)
    assert result.reasons == [
        "metric 'org.apache.kafka.m1': number data point without a value",
        "metric without a name",
        "metric 'latency': histogram bucket_counts must have len(explicit_bounds) + 1 entries",
        "metric 'empty' has no data",
    ]
    assert (result.data_points, result.rejected_data_points, result.dropped_metrics) == (points, 4, 2)
    assert [m.name for m in req.resource_metrics[1].scope_metrics[1].metrics] == [
        f"org.apache.kafka.m{i}" for i in (0, 1, 3, 4, 5, 6, 7, 8, 9)
    ] + ["latency"]
    assert len(req.resource_metrics[1].scope_metrics[1].metrics[1].sum.data_points) == 1
    assert not req.resource_metrics[1].scope_metrics[1].metrics[-1].histogram.data_points


def _field(number: int, value: bytes) -> bytes:
    """A length-delimited field on the wire (tag and length below 128 * 128)."""
    def varint(n: int) -> bytes:
        return bytes([n]) if n < 0x80 else bytes([n & 0x7F | 0x80, n >> 7])
    return varint(number << 3 | 2) + varint(len(value)) + value


@pytest.mark.parametrize("unfollowed", ["unknown_group", "data_set_twice"])
def test_bytes_the_scan_does_not_follow_are_reported_from_the_canonical_encoding(unfollowed: str) -> None:
    """Given a push with a number point without a value and wire data the scan does not follow (a group
    among a metric's unknown fields, which upb keeps; or a metric's data oneof sent twice, which upb
    replaces), then the scan declines the bytes, and `sanitize` still drops what the oracle drops, from the
    wire bytes and from the message's own encoding (which keeps the unknown group)."""
    req = _clean_push(10)
    sm = req.resource_metrics[0].scope_metrics[0]
    sm.metrics[1].sum.data_points.add()
    if unfollowed == "unknown_group":
        # field 99, start group (wire 3), a varint field inside, end group (wire 4)
        sm.metrics[3].MergeFromString(bytes([0x9B, 0x06, 0x08, 0x01, 0x9C, 0x06]))
        data = req.SerializeToString()
    else:
        twice = Metric(name="twice")
        twice.gauge.data_points.add().as_int = 1
        replacing = Sum()
        replacing.data_points.add().as_int = 2
        metric = twice.SerializeToString() + _field(7, replacing.SerializeToString())  # upb keeps the sum
        scope = sm.SerializeToString() + _field(2, metric)
        resource = req.resource_metrics[0].resource.SerializeToString()
        data = _field(1, _field(1, resource) + _field(2, scope)) + _field(1, b"")
    assert _otlpscan.scan(data, True, True) is None
    assert _agree(data, AttributeFilter(PrivacyConfig()), True) is False
    result = sanitize(ExportMetricsServiceRequest.FromString(data), AttributeFilter(PrivacyConfig()), serialized=data)
    assert result.reasons == ["metric 'org.apache.kafka.m1': number data point without a value"]
    assert result.data_points == 11 + (unfollowed == "data_set_twice")  # the clean push's, less one, + the sum's


def test_validator_table_mirrors_the_installed_protobuf_descriptors() -> None:
    """Given the installed opentelemetry-proto, then the C validator's table names every field of every
    message reachable from ExportMetricsServiceRequest with the matching kind, repetition and message type
    (a field the table lacked would only send pushes to the slow path; a wrong kind could accept bytes upb
    rejects)."""
    from google.protobuf.descriptor import FieldDescriptor as FD

    from kct.receiver import _otlpscan

    kinds = {FD.TYPE_STRING: 1, FD.TYPE_BYTES: 2, FD.TYPE_MESSAGE: 6, FD.TYPE_DOUBLE: 4, FD.TYPE_FIXED64: 4,
             FD.TYPE_SFIXED64: 4, FD.TYPE_FLOAT: 5, FD.TYPE_FIXED32: 5, FD.TYPE_SFIXED32: 5}
    expected: dict[str, dict[int, tuple[int, int, str]]] = {}
    todo = [ExportMetricsServiceRequest.DESCRIPTOR]
    while todo:
        message = todo.pop()
        if message.full_name in expected:
            continue
        expected[message.full_name] = {
            f.number: (kinds.get(f.type, 3), int(f.is_repeated), f.message_type.full_name if f.message_type else "")
            for f in message.fields
        }
        todo.extend(f.message_type for f in message.fields if f.message_type)
    assert _otlpscan.schema() == expected


@pytest.mark.parametrize("seed", [1, 2])
def test_validator_never_accepts_what_upb_rejects(seed: int) -> None:
    """Given the fuzz seeds, their wire-level mutations and byte-level damage (truncations, flipped bytes),
    whenever the validator says the bytes parse, upb parses them; and it accepts the clean seeds."""
    from kct.receiver import _otlpscan

    seeds = [bytes(r.SerializeToString()) for r in seed_requests()]
    assert all(_otlpscan.valid(s) for s in seeds)
    mutator = _ProtoMutator(random.Random(seed))
    rng = random.Random(seed * 7)
    accepted = rejected_by_upb = 0
    for _ in range(MUTATIONS):
        data = mutator.mutate(rng.choice(seeds))
        if rng.random() < 0.3 and data:
            i = rng.randrange(len(data))
            data = data[:i] + bytes([rng.randrange(256)]) + data[i + 1:] if rng.random() < 0.5 else data[:i]
        try:
            ExportMetricsServiceRequest.FromString(data)
            parses = True
        except DecodeError:
            parses = False
            rejected_by_upb += 1
        if _otlpscan.valid(data):
            accepted += 1
            assert parses, f"validator accepted bytes upb rejects: {data.hex()}"
    assert accepted > 0 and rejected_by_upb > 0


def test_unparsed_path_declines_empty_and_unparsable_bodies() -> None:
    """Given an empty body (refused as empty_body by the decoder) or bytes upb rejects, then the path that
    skips decoding declines them; a clean push it takes, with its points."""
    from kct.receiver.sanitize import untouched_unparsed

    filt = AttributeFilter(PrivacyConfig())
    assert untouched_unparsed(b"", filt) is None
    assert untouched_unparsed(b"\x0a\x05\x0a\x03\xff\xfe\xfd", filt) is None  # a nested length that lies
    clean = untouched_unparsed(bytes(_clean_push().SerializeToString()), filt)
    assert clean is not None and clean.data_points == 101


def test_without_the_extension_the_receiver_does_not_import_and_says_why() -> None:
    """Given an install where kct.receiver._otlpscan is missing, when the receiver's sanitising module is
    imported, then it fails naming the extension and how it is built (no silent slower engine)."""
    probe = ("import sys; sys.modules['kct.receiver._otlpscan'] = None\n"
             "try:\n    import kct.receiver.sanitize\nexcept ImportError as e:\n    print(e)\n"
             "else:\n    print('imported')")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60).stdout
    assert "the receiver's C extension, is not built" in out and "make venv" in out
