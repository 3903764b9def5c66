"""Ask the broker for a client's telemetry subscription, as a KIP-714 client does (GetTelemetrySubscriptions v0).

What a client is served is not what `describe_configs` shows: the broker answers describes from its metadata
image and a client's GetTelemetrySubscriptions from its subscription cache, updated a moment later from the
same metadata. A client served nothing asks again only after the default 5-minute interval, so tests that start
clients after an alter wait until this probe, with the clients' own client.id, is served the subscription.

The probe sends the request with a zero client instance id, so the broker assigns a new instance each time,
and never pushes: nothing of it reaches a telemetry endpoint. kafka-python has no message for this API, so the
request and response (flexible version 0) are encoded here from the protocol's definition.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

__all__ = ["ServedSubscription", "get_telemetry_subscription"]

API_KEY = 71  # GetTelemetrySubscriptions
API_VERSION = 0


@dataclass(frozen=True)
class ServedSubscription:
    """The broker's answer: `requested_metrics` empty when no subscription selects the client."""

    error_code: int
    subscription_id: int
    push_interval_ms: int
    requested_metrics: tuple[str, ...]
    delta_temporality: bool = False  # whether the broker asks for DELTA sums (KIP-714's DeltaTemporality)


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, size: int) -> bytes:
        chunk = self.data[self.at:self.at + size]
        if len(chunk) != size:
            raise ValueError(f"GetTelemetrySubscriptions response truncated at byte {self.at}")
        self.at += size
        return chunk

    def unpack(self, fmt: str) -> int:
        value: int = struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]
        return value

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


def encode_request(client_id: str, correlation_id: int) -> bytes:
    """Request header v2 (api key, version, correlation id, client id, no tagged fields), then the body:
    a zero client instance id and no tagged fields; framed with its length."""
    name = client_id.encode()
    header = struct.pack(">hhih", API_KEY, API_VERSION, correlation_id, len(name)) + name + _uvarint(0)
    body = bytes(16) + _uvarint(0)
    return struct.pack(">i", len(header) + len(body)) + header + body


def decode_response(payload: bytes, correlation_id: int) -> ServedSubscription:
    """Response header v1 (correlation id, tagged fields), then the body of version 0."""
    reader = _Reader(payload)
    if reader.unpack(">i") != correlation_id:
        raise ValueError("GetTelemetrySubscriptions response for another request")
    reader.skip_tagged_fields()
    reader.unpack(">i")  # throttle time
    error_code = reader.unpack(">h")
    reader.take(16)  # the client instance id the broker assigned
    subscription_id = reader.unpack(">i")
    reader.take(reader.uvarint() - 1)  # accepted compression types, one int8 each
    push_interval_ms = reader.unpack(">i")
    reader.unpack(">i")  # telemetry max bytes
    delta_temporality = reader.take(1) != b"\x00"
    metrics = tuple(reader.take(reader.uvarint() - 1).decode() for _ in range(reader.uvarint() - 1))
    return ServedSubscription(error_code, subscription_id, push_interval_ms, metrics, delta_temporality)


def get_telemetry_subscription(bootstrap: str, client_id: str, *, timeout: float = 10.0) -> ServedSubscription:
    """What the broker at `bootstrap` (host:port, plaintext) serves a new client instance named `client_id`."""
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as sock:
        sock.sendall(encode_request(client_id, correlation_id=1))
        size = struct.unpack(">i", _receive(sock, 4))[0]
        return decode_response(_receive(sock, size), correlation_id=1)


def _receive(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the broker closed the connection (GetTelemetrySubscriptions unsupported?)")
        data += chunk
    return bytes(data)
