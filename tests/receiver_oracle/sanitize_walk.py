"""The receiver's validity rules, walked in Python over the decoded message (the oracle, see __init__).

A metric without data or without a name is dropped (its points rejected), a number point without a value
and a histogram point whose bucket counts do not fit its bounds are dropped (when points are checked), and
the privacy filter removes private attributes from resources, scopes and the points that remain.
"""

from __future__ import annotations

from collections.abc import Callable, MutableSequence
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from kct.receiver.privacy import AttributeFilter
from kct.receiver.sanitize import SanitizeResult

__all__ = ["walk"]


def walk(
    request: ExportMetricsServiceRequest,
    attribute_filter: AttributeFilter,
    *,
    point_attributes: bool = True,
    check_points: bool = True,
) -> SanitizeResult:
    """Validate and filter `request` in place; return what was kept, rejected and dropped."""
    result = SanitizeResult()
    filt = attribute_filter.filter
    filter_points = attribute_filter.check_data_points and point_attributes
    for rm in request.resource_metrics:
        if rm.HasField("resource"):
            result.dropped_attributes += filt(rm.resource.attributes)
        for sm in rm.scope_metrics:
            if sm.HasField("scope"):
                result.dropped_attributes += filt(sm.scope.attributes)
            _walk_metrics(sm.metrics, result, filt if filter_points else None, check_points)
    return result


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


def _walk_metrics(
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
