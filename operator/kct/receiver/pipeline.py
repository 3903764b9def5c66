"""One push, from received bytes to an acknowledged Kafka record. Independent of the HTTP server.

Order (cheapest refusals first, nothing written unless everything passed):

    labels from headers -> push-interval rate limit (when the broker named the instance)
    -> decompress (bounded) -> in-flight bytes budget -> decode -> client instance id fallback
    -> rate limit (otherwise) -> quotas -> validate + drop private attributes
    -> value (the sender's bytes when untouched) -> attribution (resource attributes, when it finds any)
    -> sink, await Kafka's acknowledgement -> the client registry (`GET /v1/clients`; ids, not generated ones)

The client instance id (record key) comes from, in order: the broker plugin's `kct-client-instance-id`
header; the resource attributes `client_instance_id`, `client.instance.id`, `service.instance.id`; else a
fresh random id (then the push is not rate limited, having no identity). The client id for quotas comes
from `kct-client-id`, else the resource attributes `client_id` / `client.id`, else "". The quota user is
principal name of the push's principal ("User:alice" -> "alice", as Kafka's quota entities name users), else
"". Whose principal is believed is `principal_from` (set by the server, see kct.receiver.tls): `certificate`
(mTLS: the verified certificate's identity as `User:<CN>`, the header ignored), `header` (the broker's
`kct-principal`, from a sender that presented the token) or `none` (no authentication: the header is dropped).
"""

from __future__ import annotations

import itertools
import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from kct.attribution.attributor import Attributor
from kct.attribution.index import Attributes
from kct.attribution.resource_bytes import with_resource_attributes
from kct.otlp import labels as L
from kct.receiver.admission import Admission
from kct.receiver.clients import ClientRegistry
from kct.receiver.codec import Negotiated, decode_request, decompress
from kct.receiver.config import ReceiverConfig
from kct.receiver.errors import BadRequest, PushRejected
from kct.receiver.privacy import AttributeFilter
from kct.receiver.quota import QuotaManager
from kct.receiver.ratelimit import PushIntervalLimiter, Ticket
from kct.receiver.sanitize import (
    SanitizeResult,
    resource_attribute,
    sanitize,
    untouched_unparsed,
)
from kct.receiver.sink import Sink
from kct.receiver.telemetry import Telemetry

__all__ = ["Pipeline", "Push", "PushOutcome"]

# Stands for the message when the native path proved it is not needed (never read, never modified).
_NOT_DECODED = ExportMetricsServiceRequest()

INSTANCE_ID_ATTRIBUTES = ("client_instance_id", "client.instance.id", "service.instance.id")
CLIENT_ID_ATTRIBUTES = ("client_id", "client.id")


@dataclass(frozen=True)
class Push:
    headers: Mapping[str, str]  # looked up by lower-case name
    body: bytes
    negotiated: Negotiated
    content_type: str
    content_encoding: str
    peer_principal: str | None = None


@dataclass(frozen=True)
class PushOutcome:
    rejected_data_points: int
    error_message: str
    client_instance_id: str
    data_points: int


class _PushIds:
    """Push ids: 32 hex digits, a random per-process prefix then a counter. Unique per record like a uuid4
    (the prefix has 64 random bits) at a tenth of uuid4's cost, which was ~2 % of a push's CPU."""

    def __init__(self) -> None:
        self._prefix = os.urandom(8).hex()
        self._counter = itertools.count(int.from_bytes(os.urandom(4), "big"))

    def next(self) -> bytes:
        return f"{self._prefix}{next(self._counter) & 0xFFFFFFFFFFFFFFFF:016x}".encode()


def _monotonic_ms() -> float:
    return time.monotonic() * 1000.0


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class Pipeline:
    def __init__(
        self,
        config: ReceiverConfig,
        sink: Sink,
        telemetry: Telemetry,
        *,
        monotonic_ms: Callable[[], float] = _monotonic_ms,
        wall_ms: Callable[[], int] = _wall_ms,
    ) -> None:
        self.config = config
        self.sink = sink
        self.telemetry = telemetry
        self.filter = AttributeFilter(config.privacy)
        self.limiter = PushIntervalLimiter(config.rate_limit)
        self.quotas = QuotaManager(config.quotas)
        self.principal_from: Literal["certificate", "header", "none"] = "header"
        lim = config.limits
        self.admission = Admission(
            lim.max_inflight_requests, lim.max_inflight_bytes, lim.overload_retry_after_seconds,
            max_queue_wait_s=lim.max_queue_wait_ms / 1000.0, max_queued=lim.max_queued_requests,
        )
        self._monotonic_ms = monotonic_ms
        self._wall_ms = wall_ms
        self._push_ids = _PushIds()
        # Fed by the watch `kct.attribution.kube_source.start_in_cluster` starts on `attributor.index`.
        self.attributor = Attributor(config.attribution) if config.attribution.enabled else None
        if self.attributor is not None:
            telemetry.track_attribution()
        telemetry.track_state(lambda: len(self.limiter), lambda: len(self.quotas))
        self.clients = ClientRegistry()

    def _labels(self, push: Push) -> _Labels:
        return _believed_principal(self.principal_from, push, _broker_labels(push.headers))

    async def process(self, push: Push) -> PushOutcome:
        """Store `push` as one record or raise PushRejected; the caller holds a place (`admission.enter()`)."""
        try:
            return await self._process(push, _TicketBox())
        except PushRejected as rejected:
            if rejected.status == 429:
                self.telemetry.throttled(rejected.reason, float(rejected.retry_after_s or 0))
            raise

    async def _process(self, push: Push, box: _TicketBox) -> PushOutcome:
        cfg = self.config
        tel = self.telemetry
        perf = time.perf_counter
        received_ms = self._wall_ms()
        headers = push.headers

        record_headers, instance_id, client_id, principal, interval_ms, terminating = self._labels(push)
        user = _quota_user(principal) if principal is not None else ""
        # A push a broker forwarded (our plugin names the broker) passed the broker's own push-interval check
        # when it arrived there. Checked again here, on arrival at the receiver, it looks early whenever the
        # plugin's queue delayed its predecessor (a broker restart, a 503 pause): pushes the broker accepted
        # and acknowledged were refused, and with DELTA sums (what brokers ask clients for) a refused push the
        # plugin gives up on is data lost. So the interval is enforced once, by the broker, for these.
        if instance_id is not None and headers.get(L.BROKER_ID.http_header) is None:
            box.ticket = self.limiter.acquire(instance_id, interval_ms, terminating, self._monotonic_ms())
        try:
            self.admission.reserve(len(push.body))
            box.reserved = len(push.body)
            t0 = perf()
            data = decompress(push.body, push.negotiated.encoding, cfg.limits.max_decompressed_bytes)
            t1 = perf()
            if data is not push.body:
                self.admission.reserve(len(data))
                box.reserved += len(data)
            is_protobuf = push.negotiated.fmt == "protobuf"
            untouched = self._untouched(data, is_protobuf and instance_id is not None and client_id is not None)
            # Proven parsable and needing no change, with the ids from headers: nothing reads the message.
            request = _NOT_DECODED if untouched is not None else decode_request(data, push.negotiated.fmt)
            t2 = perf()
            if push.negotiated.encoding:
                tel.stage("decompress", t1 - t0)
            tel.stage("decode", t2 - t1)

            id_source = "header"
            if instance_id is None:
                instance_id, id_source = self._instance_id_from(request, box, interval_ms, terminating)
                record_headers.append((L.CLIENT_INSTANCE_ID.name, instance_id.encode()))
            if client_id is None:
                client_id = resource_attribute(request, CLIENT_ID_ATTRIBUTES) or ""

            self.quotas.admit(user, client_id, len(data), self._monotonic_ms())

            t3 = perf()
            result = untouched or self._sanitize(request, data, is_protobuf)
            if result.data_points == 0 and (result.rejected_data_points or result.dropped_metrics):
                raise BadRequest("no_valid_data", f"nothing valid in the push: {result.error_message}")
            modified = result.modified or not is_protobuf
            value = request.SerializeToString() if modified else data
            # The decoded message (several times the wire size) is not needed while awaiting Kafka's ack:
            # freed now, hundreds of pushes in flight hold only their bytes.
            del request
            t4 = perf()
            tel.stage("sanitize", t4 - t3)
            value, modified, attributes = self._attribute(value, modified, headers, principal, client_id, received_ms)

            record_headers.extend(
                (
                    (L.RECORD_META_PUSH_ID, self._push_ids.next()),
                    (L.RECORD_META_RECEIVED_MS, str(received_ms).encode()),
                    (L.RECORD_META_FORMAT, L.RECORD_VALUE_FORMAT.encode()),
                    (L.RECORD_META_CONTENT_TYPE, push.content_type.encode("utf-8", "replace")),
                    (L.RECORD_META_CONTENT_ENCODING, push.content_encoding.encode("utf-8", "replace")),
                    (L.RECORD_META_MODIFIED, b"true" if modified else b"false"),
                    (L.RECORD_META_DATA_POINTS, str(result.data_points).encode()),
                    (L.RECORD_META_INSTANCE_ID_SOURCE, id_source.encode()),
                )
            )
            t5 = perf()
            try:
                await self.sink.send(instance_id.encode(), value, record_headers)
            except PushRejected as exc:
                tel.sent(perf() - t5, exc.reason)
                raise
            tel.sent(perf() - t5, None)
            self._remember(id_source, instance_id, record_headers, attributes, value, received_ms)
            tel.push_accepted(result.data_points, result.rejected_data_points, result.dropped_attributes, modified)
            box.ticket = None  # keep the rate-limit state: the push is stored
            return PushOutcome(result.rejected_data_points, result.error_message, instance_id, result.data_points)
        finally:
            if box.ticket is not None:
                self.limiter.release(box.ticket)
            if box.reserved:
                self.admission.release(box.reserved)

    def _attribute(
        self, value: bytes, modified: bool, headers: Mapping[str, str], principal: str | None, client_id: str,
        at_ms: int,
    ) -> tuple[bytes, bool, Attributes]:
        """(value, modified, attributes added) with the resource attributes naming the push's workload, when
        found; the outcome is counted either way. Off: as given."""
        if self.attributor is None:
            return value, modified, ()
        started = time.perf_counter()
        raw = headers.get(L.CLIENT_SOURCE_ADDRESS.http_header)
        address = L.decode_header_value(raw) if raw else None  # `_broker_labels` has checked it decodes
        found = self.attributor.attribute(address, principal, client_id, at_ms)
        self.telemetry.attributed(found.outcome)
        if found.attributes:
            value, modified = with_resource_attributes(value, found.attributes), True
        self.telemetry.stage("attribute", time.perf_counter() - started)
        return value, modified, found.attributes

    def _remember(
        self, id_source: str, instance_id: str, record_headers: list[tuple[str, bytes]], attributes: Attributes,
        value: bytes, at_ms: int,
    ) -> None:
        """A stored push into the client registry, unless its id was made up here (one entry per push)."""
        if id_source != "generated":
            self.clients.observe(instance_id, record_headers, attributes, value, at_ms)

    def _untouched(self, data: bytes, eligible: bool) -> SanitizeResult | None:
        """The native path's result for protobuf bytes it proves parsable and in need of no change."""
        if not eligible:
            return None
        return untouched_unparsed(data, self.filter, check_points=self.config.validation.check_data_points)

    def _sanitize(self, request: ExportMetricsServiceRequest, data: bytes, is_protobuf: bool) -> SanitizeResult:
        """Validate and filter: the native scan's report on the push, applied to the decoded message (nothing
        walked in Python when the scan finds nothing to drop)."""
        return sanitize(
            request,
            self.filter,
            serialized=data if is_protobuf else None,
            check_points=self.config.validation.check_data_points,
        )

    def _instance_id_from(
        self, request: ExportMetricsServiceRequest, box: _TicketBox, interval_ms: int | None, terminating: bool
    ) -> tuple[str, str]:
        """(client instance id, its source) for a push without the broker's header: the resource attribute
        (then rate-limited like a header's), else a fresh id."""
        found = resource_attribute(request, INSTANCE_ID_ATTRIBUTES)
        if found is None:
            return uuid.uuid4().hex, "generated"
        box.ticket = self.limiter.acquire(found, interval_ms, terminating, self._monotonic_ms())
        return found, "resource"


def _believed_principal(principal_from: str, push: Push, labels: _Labels) -> _Labels:
    """The labels with the principal this receiver believes (see the module docstring): the header's when the
    sender proved the token, the certificate's with mTLS, none without authentication."""
    if principal_from == "header":
        return labels
    record_headers, instance_id, client_id, _, interval_ms, terminating = labels
    principal = f"User:{push.peer_principal}" if principal_from == "certificate" and push.peer_principal else None
    return _with_principal(record_headers, principal), instance_id, client_id, principal, interval_ms, terminating


def _with_principal(record_headers: list[tuple[str, bytes]], principal: str | None) -> list[tuple[str, bytes]]:
    """The record headers with the sender-supplied principal replaced by the believed one (or dropped)."""
    kept = [(name, value) for name, value in record_headers if name != L.PRINCIPAL.name]
    return kept if principal is None else [*kept, (L.PRINCIPAL.name, principal.encode())]


def _quota_user(principal: str) -> str:
    """Kafka quotas name users by principal name: "User:alice" -> "alice" (KafkaPrincipal "type:name")."""
    _, sep, name = principal.partition(":")
    return name if sep else principal


class _TicketBox:
    __slots__ = ("reserved", "ticket")

    def __init__(self) -> None:
        self.ticket: Ticket | None = None
        self.reserved = 0


_Labels = tuple[list[tuple[str, bytes]], str | None, str | None, str | None, int | None, bool]


def _broker_labels(headers: Mapping[str, str]) -> _Labels:
    """Record headers from the plugin's HTTP headers, plus the values the pipeline itself needs."""
    record_headers: list[tuple[str, bytes]] = []
    values: dict[str, str] = {}
    for label in L.BROKER_LABELS:
        raw = headers.get(label.http_header)
        if raw is None:
            continue
        try:
            value = L.decode_header_value(raw)
        except UnicodeDecodeError:
            raise BadRequest("bad_header", f"header {label.http_header}: invalid percent-encoded UTF-8") from None
        values[label.name] = value
        record_headers.append((label.name, value.encode()))
    interval_ms: int | None = None
    raw_interval = values.get(L.PUSH_INTERVAL_MS.name)
    if raw_interval is not None:
        if not raw_interval.isdigit() or not 0 < int(raw_interval) <= 86_400_000:
            raise BadRequest(
                "bad_header", f"header {L.PUSH_INTERVAL_MS.http_header}: {raw_interval!r} is not a positive integer"
            )
        interval_ms = int(raw_interval)
    raw_terminating = values.get(L.TERMINATING.name, "false").lower()
    if raw_terminating not in ("true", "false"):
        raise BadRequest("bad_header", f"header {L.TERMINATING.http_header}: {raw_terminating!r} is not true/false")
    instance_id = values.get(L.CLIENT_INSTANCE_ID.name) or None
    return (
        record_headers,
        instance_id,
        values.get(L.CLIENT_ID.name),
        values.get(L.PRINCIPAL.name),
        interval_ms,
        raw_terminating == "true",
    )
