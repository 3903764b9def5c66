"""Broker-added labels (KIP-714) on the wire: one place for every name.

The broker knows things about a push that the client does not put in its payload: the client instance id,
the client id, the software name and version, the source address and port, the principal, the broker id,
and whether the client is terminating (KIP-714 "broker added labels"). The broker plugin forwards them to
the receiver as HTTP headers, the receiver writes them as Kafka record headers, the Spark job reads them
from there. The three must agree, so the names live here and nowhere else.

HTTP header values are ASCII: the UTF-8 bytes of a value outside visible ASCII (<= 0x20, >= 0x7f) and `%`
itself are percent-encoded (`%XX`), everything else is sent as is; a plain URL-unquote decodes them. This
matches the plugin's `PushLabels.encode` (plugin/src/main/java/dev/kct/telemetry/PushLabels.java); see
`encode_header_value` / `decode_header_value`. The principal is KafkaPrincipal's string form, `User:alice`.
Record header values are plain UTF-8 (Kafka headers are bytes; no encoding is needed there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import unquote

__all__ = [
    "BROKER_LABELS",
    "HEADER_PREFIX",
    "RECORD_META_CONTENT_ENCODING",
    "RECORD_META_CONTENT_TYPE",
    "RECORD_META_DATA_POINTS",
    "RECORD_META_FORMAT",
    "RECORD_META_INSTANCE_ID_SOURCE",
    "RECORD_META_MODIFIED",
    "RECORD_META_PUSH_ID",
    "RECORD_META_RECEIVED_MS",
    "RECORD_VALUE_FORMAT",
    "BrokerLabel",
    "decode_header_value",
    "encode_header_value",
]

HEADER_PREFIX: Final = "kct-"


@dataclass(frozen=True)
class BrokerLabel:
    """One broker-added label: its KIP-714 name (also the record header name) and its HTTP header name."""

    name: str
    http_header: str


CLIENT_INSTANCE_ID: Final = BrokerLabel("client_instance_id", "kct-client-instance-id")
CLIENT_ID: Final = BrokerLabel("client_id", "kct-client-id")
CLIENT_SOFTWARE_NAME: Final = BrokerLabel("client_software_name", "kct-client-software-name")
CLIENT_SOFTWARE_VERSION: Final = BrokerLabel("client_software_version", "kct-client-software-version")
CLIENT_SOURCE_ADDRESS: Final = BrokerLabel("client_source_address", "kct-client-source-address")
CLIENT_SOURCE_PORT: Final = BrokerLabel("client_source_port", "kct-client-source-port")
PRINCIPAL: Final = BrokerLabel("principal", "kct-principal")
BROKER_ID: Final = BrokerLabel("broker_id", "kct-broker-id")
LISTENER: Final = BrokerLabel("listener", "kct-listener")  # the broker listener the push came in on
TERMINATING: Final = BrokerLabel("terminating", "kct-terminating")  # "true" / "false"
PUSH_INTERVAL_MS: Final = BrokerLabel("push_interval_ms", "kct-push-interval-ms")  # decimal milliseconds
# The client's payload content type as the broker saw it (KIP-714 ClientTelemetryPayload.contentType()).
PAYLOAD_CONTENT_TYPE: Final = BrokerLabel("payload_content_type", "kct-payload-content-type")

BROKER_LABELS: Final[tuple[BrokerLabel, ...]] = (
    CLIENT_INSTANCE_ID,
    CLIENT_ID,
    CLIENT_SOFTWARE_NAME,
    CLIENT_SOFTWARE_VERSION,
    CLIENT_SOURCE_ADDRESS,
    CLIENT_SOURCE_PORT,
    PRINCIPAL,
    BROKER_ID,
    LISTENER,
    TERMINATING,
    PUSH_INTERVAL_MS,
    PAYLOAD_CONTENT_TYPE,
)

# Metadata the receiver adds to every record, next to the broker labels.
RECORD_META_PUSH_ID: Final = "kct.push_id"  # 32 hex digits, unique per record (random prefix + counter)
RECORD_META_RECEIVED_MS: Final = "kct.received_ms"  # receive time, Unix epoch milliseconds
RECORD_META_CONTENT_TYPE: Final = "kct.content_type"  # the request's Content-Type
RECORD_META_CONTENT_ENCODING: Final = "kct.content_encoding"  # the request's Content-Encoding
RECORD_META_FORMAT: Final = "kct.format"  # always RECORD_VALUE_FORMAT
RECORD_META_MODIFIED: Final = "kct.modified"  # "false" when the value is the sender's bytes, untouched
RECORD_META_DATA_POINTS: Final = "kct.data_points"  # data points in the stored value
RECORD_META_INSTANCE_ID_SOURCE: Final = "kct.client_instance_id_source"  # header | resource | generated

RECORD_VALUE_FORMAT: Final = "otlp_proto"  # ExportMetricsServiceRequest (== MetricsData on the wire)

def _plain(byte: int) -> bool:
    return 0x20 < byte < 0x7F and byte != 0x25  # visible ASCII except '%'


def encode_header_value(value: str) -> str:
    """Percent-encode `value` for an HTTP header exactly as the plugin does (see the module docstring)."""
    raw = value.encode("utf-8")
    if all(_plain(b) for b in raw):
        return value
    return "".join(chr(b) if _plain(b) else f"%{b:02X}" for b in raw)


def decode_header_value(value: str) -> str:
    """Inverse of `encode_header_value` (values without `%` come back unchanged)."""
    if "%" not in value:
        return value
    return unquote(value, encoding="utf-8", errors="strict")
