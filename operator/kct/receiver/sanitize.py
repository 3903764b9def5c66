"""Validate a push, count its data points, drop private attributes: who owns which part.

- The verdict "this protobuf push needs no change" (every metric named and with data, every point valid,
  no attribute key the privacy filter drops) and its point count: `kct.receiver._otlpscan` (C), one pass
  over the wire bytes, reached through `scan_untouched` and `untouched_unparsed`. `_otlpscan.valid` also
  proves that the protobuf runtime would parse the bytes, so a clean push with both ids in the broker's
  headers is stored as sent, never decoded. The extension is part of the product (setup.py builds it,
  not optionally): importing this module without it fails, naming what to do.
- Everything that changes or explains a push: `sanitize` here, the walk over the decoded message. It runs
  for JSON pushes and whenever the scan declines, drops invalid pieces rather than the whole push (OTLP
  "partial success": a metric without a name or without data, a number point without a value, a
  histogram point whose bucket counts do not fit its bounds), removes private attributes
  (`kct.receiver.privacy` decides per key) and says how many points were rejected and why. A push in
  which nothing valid remains is a 400 (`kct.receiver.pipeline`).
- The walk is also the oracle the scan is checked against: tests/unit/receiver/test_receiver_native_scan.py
  asserts that whenever the scan answers, the walk over the same bytes changes nothing and counts the same
  points, on the fuzz seeds and thousands of mutations of them.

The walk touches each point once and only looks at point attributes when the privacy filter asks for it.
"""

from __future__ import annotations

from collections.abc import Callable, MutableSequence
from dataclasses import dataclass, field
from typing import Any

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
    would change nothing, found in one native pass over the bytes; None when something may have to be
    rejected or dropped: then `sanitize` must run.

    This is the common case (valid points, no private attribute keys) and costs a fraction of the walk
    over the decoded message, whose per-point method calls were most of a push's CPU."""
    found = _otlpscan.scan(serialized, attribute_filter.check_data_points, check_points)
    if found is None:
        return None
    points, keys = found
    if not attribute_filter.keeps_all_raw(keys):
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


def _check_points(kind: str, points: Any, metric_name: str, result: SanitizeResult) -> None:
    """Drop invalid points of one metric in place."""
    if kind in ("gauge", "sum"):
        bad = [i for i, point in enumerate(points) if point.WhichOneof("value") is None]
        reason = f"metric {metric_name!r}: number data point without a value"
    elif kind == "histogram":
        bad = [
            i
            for i, point in enumerate(points)
            if point.bucket_counts and len(point.bucket_counts) != len(point.explicit_bounds) + 1
        ]
        reason = f"metric {metric_name!r}: histogram bucket_counts must have len(explicit_bounds) + 1 entries"
    else:
        return
    if bad:
        for i in reversed(bad):
            del points[i]
        result.reject(len(bad), reason)


def sanitize(
    request: ExportMetricsServiceRequest,
    attribute_filter: AttributeFilter,
    *,
    point_attributes: bool = True,
    check_points: bool = True,
) -> SanitizeResult:
    """Validate and filter `request` in place; return what was kept, rejected and dropped.

    `point_attributes=False` skips the data point attribute walk (the caller's prefilter proved it
    useless); resource and scope attributes are always filtered.
    """
    result = SanitizeResult()
    filt = attribute_filter.filter
    filter_points = attribute_filter.check_data_points and point_attributes
    for rm in request.resource_metrics:
        if rm.HasField("resource"):
            result.dropped_attributes += filt(rm.resource.attributes)
        for sm in rm.scope_metrics:
            if sm.HasField("scope"):
                result.dropped_attributes += filt(sm.scope.attributes)
            _sanitize_metrics(sm.metrics, result, filt if filter_points else None, check_points)
    return result


def _sanitize_metrics(
    metrics: Any, result: SanitizeResult, filt: Callable[[MutableSequence[Any]], int] | None, check_points: bool
) -> None:
    """One scope's metrics: drop those without data or name, check and count their points, and filter the
    points' attributes (`filt` None: not needed)."""
    dropped: list[int] = []
    for i, metric in enumerate(metrics):
        kind = metric.WhichOneof("data")
        if kind is None:
            dropped.append(i)
            result.reject(0, f"metric {metric.name!r} has no data")
            continue
        points = getattr(metric, kind).data_points
        if not metric.name:
            dropped.append(i)
            result.reject(len(points), "metric without a name")
            continue
        if check_points:
            _check_points(kind, points, metric.name, result)
        result.data_points += len(points)
        if filt is not None:
            result.dropped_attributes += sum(filt(point.attributes) for point in points if point.attributes)
    for i in reversed(dropped):
        del metrics[i]
    result.dropped_metrics += len(dropped)


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
