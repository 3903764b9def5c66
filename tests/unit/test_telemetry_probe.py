"""The e2e tests' GetTelemetrySubscriptions probe (tests/e2e/telemetry_probe.py) encodes and decodes the wire
format of KIP-714's version 0 as the protocol defines it (a wrong byte would leave the e2e waits timing out)."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from telemetry_probe import ServedSubscription, decode_response, encode_request


def test_the_request_is_header_v2_and_a_zero_instance_id() -> None:
    """Given a client id, When the request is encoded, Then it is the size, api key 71 version 0, the
    correlation id, the client id, no tagged fields, 16 zero bytes and no tagged fields."""
    frame = encode_request("app-1", correlation_id=7)
    body = struct.pack(">hhih", 71, 0, 7, 5) + b"app-1" + b"\x00" + bytes(16) + b"\x00"
    assert frame == struct.pack(">i", len(body)) + body


def _response(correlation_id: int, metrics: list[str], interval_ms: int = 1000, delta: bool = True) -> bytes:
    compact = b"".join(bytes([len(m) + 1]) + m.encode() for m in metrics)
    return (struct.pack(">i", correlation_id) + b"\x00"  # header v1: no tagged fields
            + struct.pack(">ih", 0, 0) + bytes(range(16)) + struct.pack(">i", 42)
            + bytes([3, 0, 4])  # two accepted compression types
            + struct.pack(">ii", interval_ms, 1048576) + (b"\x01" if delta else b"\x00")
            + bytes([len(metrics) + 1]) + compact + b"\x00")


def test_the_response_yields_interval_metrics_and_temporality() -> None:
    """Given a response serving two metric prefixes every second as DELTA sums, When decoded, Then all are read."""
    served = decode_response(_response(1, ["org.apache.kafka.producer.", "org.apache.kafka.consumer."]), 1)
    assert served == ServedSubscription(0, 42, 1000, ("org.apache.kafka.producer.", "org.apache.kafka.consumer."),
                                        delta_temporality=True)
    assert not decode_response(_response(1, ["a."], delta=False), 1).delta_temporality


def test_a_response_serving_nothing_and_a_truncated_one() -> None:
    """Given no subscription, Then no metrics; Given a truncated response or another correlation id, Then an error."""
    assert decode_response(_response(1, [], 300000), 1).requested_metrics == ()
    with pytest.raises(ValueError, match="truncated"):
        decode_response(_response(1, ["a."])[:-3], 1)
    with pytest.raises(ValueError, match="another request"):
        decode_response(_response(2, ["a."]), 1)
