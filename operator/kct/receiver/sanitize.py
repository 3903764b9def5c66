"""Validate a push, count its data points, drop private attributes: who owns which part.

- Which pieces of a push are invalid (OTLP "partial success": a metric without data or without a name, a
  number point without a value, a histogram point whose bucket counts do not fit its bounds), how many
  points each rejects, and how many points stay: `kct.receiver._otlpscan` (C), the one owner of these
  rules, in one pass over the protobuf bytes. It reports what to drop by position (resource, scope,
  metric, point indices) with a reason code, and the distinct attribute keys it saw. The extension is
  part of the product (setup.py builds it, not optionally): importing this module without it fails,
  naming what to do.
- Which attribute keys are private: `kct.receiver.privacy`.
- The mechanics, here: `scan_untouched` / `untouched_unparsed` give the fast answer "nothing to change,
  N points" when the report is empty and the privacy filter keeps every key seen (`_otlpscan.valid` also
  proves that the protobuf runtime would parse the bytes, so a clean push with both ids in the broker's
  headers is stored as sent, never decoded). Otherwise `sanitize` applies the report to the decoded
  message (deletes the reported metrics and points, words each reason code as the partial-success
  message says it) and, only when a key seen is private, removes private attributes from resources,
  scopes and the points that remain. A JSON push is scanned through its protobuf encoding; wire bytes
  the scan does not follow (a group among unknown fields, a metric's data set twice) through the
  message's canonical encoding. A push in which nothing valid remains is a 400 (`kct.receiver.pipeline`).

The rules walked in Python over the decoded message, the receiver's engine before the scan reported what
to drop, are the oracle in tests/receiver_oracle: tests/unit/receiver/test_receiver_native_scan.py holds
the report applied here to it, bit for bit, on the fuzz seeds and thousands of mutations of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from kct.receiver.privacy import AttributeFilter

try:
    from kct.receiver import _otlpscan
except ImportError as missing:  # pragma: no cover - a broken install
    raise ImportError(
        "kct.receiver._otlpscan, the receiver's C extension, is not built: install the package where a C "
        "compiler and the Python headers are available (`make venv`, or `pip install .` in the image's build "
        f"stage) ({missing})"
    ) from missing

__all__ = ["SanitizeResult", "resource_attribute", "sanitize", "scan_untouched", "untouched_unparsed"]

_MAX_REASONS = 5


@dataclass
class SanitizeResult:
    data_points: int = 0  # kept
    rejected_data_points: int = 0
    dropped_metrics: int = 0
    dropped_attributes: int = 0
    reasons: list[str] = field(default_factory=list)

    @property
    def modified(self) -> bool:
        return bool(self.rejected_data_points or self.dropped_metrics or self.dropped_attributes)

    def reject(self, points: int, reason: str) -> None:
        self.rejected_data_points += points
        if len(self.reasons) < _MAX_REASONS:
            self.reasons.append(reason)

    @property
    def error_message(self) -> str:
        if not self.reasons:
            return ""
        more = "" if len(self.reasons) < _MAX_REASONS else "; ..."
        return "; ".join(self.reasons) + more


def scan_untouched(
    serialized: bytes, attribute_filter: AttributeFilter, *, check_points: bool = True
) -> SanitizeResult | None:
    """The result `sanitize` would give for these protobuf bytes (already parsed successfully) when it
    would change nothing, found in one native pass over the bytes; None when something must be rejected or
    dropped (or the scan does not follow these bytes): then `sanitize` must run on the decoded message.

    This is the common case (valid points, no private attribute keys): nothing is walked in Python."""
    found = _otlpscan.scan(serialized, attribute_filter.check_data_points, check_points)
    if found is None:
        return None
    points, keys, drops = found
    if drops or not attribute_filter.keeps_all_raw(keys):
        return None
    return SanitizeResult(data_points=points)


def untouched_unparsed(
    serialized: bytes, attribute_filter: AttributeFilter, *, check_points: bool = True
) -> SanitizeResult | None:
    """As `scan_untouched`, for bytes not parsed yet: None unless the native validator proves that the
    protobuf runtime parses them (then storing them undecoded is what decoding them would have allowed).
    An empty body parses but is refused by `decode_request` (400 empty_body): not taken here either."""
    if not serialized or not _otlpscan.valid(serialized):
        return None
    return scan_untouched(serialized, attribute_filter, check_points=check_points)


def sanitize(
    request: ExportMetricsServiceRequest,
    attribute_filter: AttributeFilter,
    *,
    serialized: bytes | None = None,
    check_points: bool = True,
) -> SanitizeResult:
    """Validate and filter `request` in place; return what was kept, rejected and dropped.

    `serialized`: the protobuf bytes `request` was parsed from, scanned instead of re-encoding the message
    (None for a JSON push). The attributes are walked only when the scan saw a key the filter drops.
    """
    points, keys, drops = _report(request, serialized, attribute_filter.check_data_points, check_points)
    result = SanitizeResult(data_points=points)
    if drops:
        _delete(request, drops, result)
    if not attribute_filter.keeps_all_raw(keys):
        result.dropped_attributes = _drop_private(request, attribute_filter, attribute_filter.check_data_points)
    return result


def _report(
    request: ExportMetricsServiceRequest, serialized: bytes | None, point_keys: bool, check_points: bool
) -> tuple[int, set[bytes], tuple[_otlpscan.Drop, ...]]:
    """The scan's report on the message's bytes (those it was parsed from, else its own encoding), or when
    the scan does not follow those, on its canonical encoding without unknown fields (same elements at the
    same indices, each oneof once)."""
    found = _otlpscan.scan(
        serialized if serialized is not None else request.SerializeToString(), point_keys, check_points
    )
    if found is None:
        canonical = ExportMetricsServiceRequest()
        canonical.CopyFrom(request)
        canonical.DiscardUnknownFields()
        found = _otlpscan.scan(canonical.SerializeToString(), point_keys, check_points)
    if found is None:  # pragma: no cover - the fuzz test holds the scan to every canonical encoding
        raise RuntimeError("kct.receiver._otlpscan did not follow a canonical ExportMetricsServiceRequest")
    return found


# The scan's reason codes in the words of the partial-success message; {!r}: the metric's name.
_METRIC_REASONS = {
    _otlpscan.NO_DATA: "metric {!r} has no data",
    _otlpscan.NO_NAME: "metric without a name",
}
_POINT_REASONS = {
    _otlpscan.NUMBER_WITHOUT_VALUE: "metric {!r}: number data point without a value",
    _otlpscan.HISTOGRAM_BUCKETS: "metric {!r}: histogram bucket_counts must have len(explicit_bounds) + 1 entries",
}


def _delete(request: ExportMetricsServiceRequest, drops: tuple[_otlpscan.Drop, ...], result: SanitizeResult) -> None:
    """Delete what the scan reported, by position, and record each rejection with its reason (in message
    order, as the reasons are listed). Points first, then whole metrics from the last, so that no deletion
    moves an index another one uses."""
    dropped_metrics: dict[tuple[int, int], list[int]] = {}
    for r, s, m, reason, rejected, bad_points in drops:
        metrics = request.resource_metrics[r].scope_metrics[s].metrics
        metric = metrics[m]
        if reason in _METRIC_REASONS:
            result.reject(rejected, _METRIC_REASONS[reason].format(metric.name))
            dropped_metrics.setdefault((r, s), []).append(m)
            continue
        result.reject(rejected, _POINT_REASONS[reason].format(metric.name))
        data_points = getattr(metric, metric.WhichOneof("data")).data_points
        for i in reversed(bad_points):
            del data_points[i]
    for (r, s), indices in dropped_metrics.items():
        metrics = request.resource_metrics[r].scope_metrics[s].metrics
        for m in reversed(indices):
            del metrics[m]
        result.dropped_metrics += len(indices)


def _drop_private(request: ExportMetricsServiceRequest, attribute_filter: AttributeFilter, points: bool) -> int:
    """Remove the attributes the privacy filter drops from resources, scopes and (`points`) the data points
    that remain; return how many were removed."""
    filt = attribute_filter.filter
    dropped = 0
    for rm in request.resource_metrics:
        if rm.HasField("resource"):
            dropped += filt(rm.resource.attributes)
        for sm in rm.scope_metrics:
            if sm.HasField("scope"):
                dropped += filt(sm.scope.attributes)
            if not points:
                continue
            for metric in sm.metrics:  # every metric left has data: those without were deleted
                data_points = getattr(metric, metric.WhichOneof("data")).data_points
                dropped += sum(filt(point.attributes) for point in data_points if point.attributes)
    return dropped


def resource_attribute(request: ExportMetricsServiceRequest, keys: tuple[str, ...]) -> str | None:
    """The non-empty string value of the first of `keys` (in that priority) among the resource attributes;
    the first resource that has any of them wins."""
    for rm in request.resource_metrics:
        found: dict[str, str] = {}
        for kv in rm.resource.attributes:
            if kv.key in keys and kv.value.WhichOneof("value") == "string_value" and kv.value.string_value:
                found[kv.key] = kv.value.string_value
        for key in keys:
            if key in found:
                return found[key]
    return None
