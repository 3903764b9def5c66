"""A finished window's client_metrics rows as OTLP metrics: names, units, labels, the series cap. Pure.

What a row becomes (one data point per series and window, stamped with the window's end):

- **Names**: KIP-714's `org.apache.kafka.<client>.<metric>` loses its `org.apache.` prefix, so producers and
  consumers land under `kafka.producer.*` / `kafka.consumer.*`, the namespace OpenTelemetry's semantic
  conventions use for Kafka clients; Prometheus's OTLP translation then writes `kafka_producer_..._total`
  for counters and appends the unit (`_milliseconds`). Names outside that prefix are kept as sent.
- **Units**: the client's unit when it sent one; KIP-714 clients mostly send none, and their latencies
  (`*.time.avg`, `*.latency.max`, ...) are milliseconds by the Kafka metric definitions, so those get `ms`.
- **Counters** (monotonic cumulative sums) are exported as OTLP cumulative sums with the client's own counter
  value at the window's newest point (`value_last`), not the window's `delta`: the same window always gives
  the same sample (series, window end, value), so a replayed micro-batch or a re-run batch sends a duplicate
  the backend ignores, never a doubled count, and `rate()` / `increase()` work on it as on a scraped counter
  (resets included). Non-monotonic cumulative sums likewise (Prometheus: gauges). Delta-temporality sums
  (what Java and librdkafka clients send when the broker asks for deltas) are sent as delta sums of the
  window's `delta`, start = window start, time = window end: one sample per window, which a replay sends again
  unchanged. Backends that store deltas take them as they are (Prometheus with `otlp-native-delta-ingestion`:
  `sum_over_time` gives the increase; Mimir; the Collector to a delta backend); a delta-to-cumulative
  conversion downstream (Prometheus's `otlp-deltatocumulative`, the Collector's processor) would add a
  replayed window twice. Turning them into cumulative counters needs a running total per series in the
  stream's state (kept per batch id, so replay-safe): not done yet.
- **Gauges**: the newest value of the window (`value_last`), as a scrape at the window's end would see it.
- **Histograms**: the window's `p50`/`p95`/`p99` as a gauge with a `quantile` attribute (the window's bucket
  increments are a delta histogram, which Prometheus refuses without a feature flag).
- **Labels**: only the attributes in the allow-list (broker labels by their KIP-714 names, plus the metric's
  own data-point attributes); rows that coincide once the others are dropped are merged (sums added; a
  gauge's `.max` / `.min` / `.avg` the max / min / mean; other gauges added; quantiles the max).
- **Per workload**: when the allow-list holds a workload label (`k8s_namespace_name`, `k8s_workload_kind`,
  `k8s_workload_name`, the client_metrics columns kct.aggregation.workloads derives), each window also gets a
  series per workload and metric: every client of the workload merged by the rules above (counters' and
  sums' values added, `.max`/`.min`/`.avg` gauges the max/min/mean, quantiles the max), labelled with the
  workload labels and the metric's allowed attributes only (no `client_instance_id`: that is how a query tells
  them from the per-client series, `client_instance_id=""`), and `kct.aggregation.workload.instances`, the
  clients merged. Clients without a workload merge into one series without workload labels. A workload's
  cumulative counter is its clients' values added: a client that goes away makes it drop, which `rate()`
  reads as a reset (the per-client series, summed after `rate()`, stay exact).
- **Cardinality**: at most `max_series_per_window` series per window: the workloads' first (whole workloads,
  in workload order), then whole clients in client order; the series beyond are dropped and counted (the
  caller exports the count as a counter).
- **Stopped clients** have no row in a window they sent nothing in, so nothing is sent for them and their
  series go stale in the backend.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2 as pb

from kct.aggregation.config import ExportSettings
from kct.aggregation.decode import LABEL_COLUMNS
from kct.aggregation.workloads import WORKLOAD_COLUMNS, WORKLOAD_KEY_COLUMNS

__all__ = [
    "EXPORT_COLUMNS",
    "INSTANCE_LABEL",
    "SCOPE_NAME",
    "WORKLOAD_INSTANCES",
    "Point",
    "WindowPoints",
    "export_name",
    "export_unit",
    "requests_for",
    "window_points",
]

INSTANCE_LABEL: Final = "client_instance_id"
# The client_metrics columns the export reads (the caller selects only these before collecting).
EXPORT_COLUMNS: Final[tuple[str, ...]] = (
    "window_start", "window_end", INSTANCE_LABEL, *LABEL_COLUMNS, *WORKLOAD_COLUMNS, "metric", "unit", "type",
    "temporality", "monotonic", "attributes", "value_last", "delta", "p50", "p95", "p99",
)
# Per workload and window: how many clients its series merge.
WORKLOAD_INSTANCES: Final = "kct.aggregation.workload.instances"
SCOPE_NAME: Final = "kct.aggregation"
_KIP714_PREFIX: Final = "org.apache."
_MILLISECOND_SUFFIXES: Final = (".time.avg", ".time.max", ".time.min", ".latency.avg", ".latency.max",
                                ".latency.min")
_QUANTILES: Final = (("p50", "0.5"), ("p95", "0.95"), ("p99", "0.99"))
# Data points per request: a window of many clients is split so that no request nears a receiver's body
# limit (~60 bytes a point: ~1.2 MB).
POINTS_PER_REQUEST: Final = 20_000

GAUGE, COUNTER, UPDOWN, DELTA = "gauge", "counter", "updown", "delta"


def export_name(metric: str) -> str:
    """`org.apache.kafka.producer.record.queue.time.max` -> `kafka.producer.record.queue.time.max`."""
    return metric.removeprefix(_KIP714_PREFIX) if metric.startswith(_KIP714_PREFIX + "kafka.") else metric


def export_unit(metric: str, unit: str | None) -> str:
    """The client's unit, or `ms` for KIP-714 latencies sent without one."""
    if unit:
        return unit
    return "ms" if metric.endswith(_MILLISECOND_SUFFIXES) else ""


@dataclass(frozen=True)
class Point:
    """One exported data point: a series (name, kind, unit, labels) and its value in a window."""

    name: str
    kind: str  # GAUGE, COUNTER, UPDOWN or DELTA
    unit: str
    labels: tuple[tuple[str, str], ...]
    value: float


@dataclass
class WindowPoints:
    """A window's points after merging and the cap, with what the cap dropped."""

    window_start_ns: int
    window_end_ns: int
    points: list[Point] = field(default_factory=list)
    dropped_series: int = 0
    dropped_clients: int = 0


def _ns(value: Any) -> int:
    """Nanoseconds since the epoch of a window bound. PySpark hands timestamps out as naive datetimes in the
    driver's local time zone, which `timestamp()` reads back the same way."""
    if isinstance(value, dt.datetime):
        return round(value.timestamp() * 1_000_000) * 1_000
    return int(value)


def _workload_labels(row: Mapping[str, Any], allowed: frozenset[str]) -> dict[str, str]:
    return {name: str(row[name]) for name in WORKLOAD_KEY_COLUMNS if name in allowed and row.get(name) is not None}


def _labels(row: Mapping[str, Any], allowed: frozenset[str], per_client: bool = True) -> dict[str, str]:
    """A row's labels: per client, the allowed broker and workload columns and the instance id; per workload,
    the allowed workload columns only; then the metric's allowed attributes."""
    if per_client:
        labels = {name: str(row[name]) for name in (INSTANCE_LABEL, *LABEL_COLUMNS, *WORKLOAD_COLUMNS)
                  if name in allowed and row.get(name) is not None}
        labels[INSTANCE_LABEL] = str(row[INSTANCE_LABEL])
    else:
        labels = _workload_labels(row, allowed)
    attributes = row.get("attributes") or {}
    # A map column is a dict in a Spark Row and a list of (key, value) pairs in Arrow's rows.
    for key, value in attributes.items() if isinstance(attributes, Mapping) else attributes:
        if key in allowed and value is not None:
            labels[key] = str(value)
    return labels


def _row_points(row: Mapping[str, Any], allowed: frozenset[str],
                per_client: bool = True) -> Iterable[tuple[Point, str]]:
    """A row's points (before merging) with the merge rule of each: `sum`, `max`, `min` or `mean`."""
    name = export_name(str(row["metric"]))
    unit = export_unit(str(row["metric"]), row.get("unit"))
    labels = _labels(row, allowed, per_client)
    kind_of_row = row["type"]
    if kind_of_row == "gauge" and row.get("value_last") is not None:
        merge = next((rule for suffix, rule in ((".max", "max"), (".min", "min"), (".avg", "mean"))
                      if name.endswith(suffix)), "sum")
        yield Point(name, GAUGE, unit, tuple(sorted(labels.items())), float(row["value_last"])), merge
    elif kind_of_row == "sum":
        if row.get("temporality") == "delta":
            if row.get("delta") is not None:
                yield Point(name, DELTA, unit, tuple(sorted(labels.items())), float(row["delta"])), "sum"
        elif row.get("value_last") is not None:
            kind = COUNTER if row.get("monotonic") else UPDOWN
            yield Point(name, kind, unit, tuple(sorted(labels.items())), float(row["value_last"])), "sum"
    elif kind_of_row == "histogram":
        for column, quantile in _QUANTILES:
            if row.get(column) is not None:
                with_q = tuple(sorted({**labels, "quantile": quantile}.items()))
                yield Point(name, GAUGE, unit, with_q, float(row[column])), "max"


def _merged(values: list[float], rule: str) -> float:
    if rule == "max":
        return max(values)
    if rule == "min":
        return min(values)
    if rule == "mean":
        return sum(values) / len(values)
    return sum(values)


def _client_points(rows: Sequence[Mapping[str, Any]], allowed: frozenset[str], per_client: bool = True) -> list[Point]:
    """One client's rows of one window (per workload: all its clients' rows) -> its points, rows that coincide
    merged."""
    merged: dict[tuple[str, str, str, tuple[tuple[str, str], ...]], tuple[list[float], str]] = {}
    for row in rows:
        for point, rule in _row_points(row, allowed, per_client):
            key = (point.name, point.kind, point.unit, point.labels)
            merged.setdefault(key, ([], rule))[0].append(point.value)
    return [Point(name, kind, unit, labels, _merged(values, rule))
            for (name, kind, unit, labels), (values, rule) in merged.items()]


def window_points(rows: Iterable[Mapping[str, Any]], settings: ExportSettings) -> list[WindowPoints]:
    """client_metrics rows (EXPORT_COLUMNS; any windows, any order) -> each window's points, oldest window first,
    clients in instance-id order, at most `max_series_per_window` series per window (whole clients)."""
    allowed = frozenset((*settings.labels, INSTANCE_LABEL))
    per_workload = not allowed.isdisjoint(WORKLOAD_KEY_COLUMNS)
    by_window: dict[tuple[int, int], dict[str, list[Mapping[str, Any]]]] = {}
    for row in rows:
        key = (_ns(row["window_start"]), _ns(row["window_end"]))
        by_window.setdefault(key, {}).setdefault(str(row[INSTANCE_LABEL]), []).append(row)
    out: list[WindowPoints] = []
    for (start_ns, end_ns), clients in sorted(by_window.items()):
        window = WindowPoints(start_ns, end_ns)
        if per_workload:
            for points in _workload_points(clients, allowed):
                if len(window.points) + len(points) > settings.max_series_per_window:
                    window.dropped_series += len(points)
                    continue
                window.points.extend(points)
        for instance in sorted(clients):
            points = _client_points(clients[instance], allowed)
            if len(window.points) + len(points) > settings.max_series_per_window:
                window.dropped_series += len(points)
                window.dropped_clients += 1
                continue
            window.points.extend(points)
        out.append(window)
    return out


def _workload_points(clients: Mapping[str, Sequence[Mapping[str, Any]]], allowed: frozenset[str]) -> list[list[Point]]:
    """A window's clients (rows by instance id) -> each workload's points, in workload order (the unattributed
    first): the merged series and the instance count."""
    by_workload: dict[tuple[tuple[str, str], ...], tuple[list[Mapping[str, Any]], set[str]]] = {}
    for instance, rows in clients.items():
        for row in rows:
            rows_of, instances = by_workload.setdefault(tuple(sorted(_workload_labels(row, allowed).items())),
                                                        ([], set()))
            rows_of.append(row)
            instances.add(instance)
    return [[*_client_points(rows_of, allowed, per_client=False),
             Point(WORKLOAD_INSTANCES, GAUGE, "{instance}", labels, float(len(instances)))]
            for labels, (rows_of, instances) in sorted(by_workload.items())]


def _attributes(items: Iterable[tuple[str, str]]) -> list[KeyValue]:
    return [KeyValue(key=key, value=AnyValue(string_value=value)) for key, value in items]


def _metric(name: str, kind: str, unit: str, points: list[Point], start_ns: int, end_ns: int,
            encoded: dict[tuple[tuple[str, str], ...], bytes]) -> pb.Metric:
    """One metric's points; `encoded`: label sets already serialized (shared by a request's metrics)."""
    metric = pb.Metric(name=name, unit=unit)
    if kind == GAUGE:
        data_points = metric.gauge.data_points
    else:
        data_points = metric.sum.data_points
        metric.sum.is_monotonic = kind in (COUNTER, DELTA)
        metric.sum.aggregation_temporality = (
            pb.AGGREGATION_TEMPORALITY_DELTA if kind == DELTA else pb.AGGREGATION_TEMPORALITY_CUMULATIVE)
    # A client's labels are the same on most of its points: each label set is built as messages once and
    # merged in from its serialized form (upb parses it in C), faster than building the messages per point.
    for p in points:
        labels = encoded.get(p.labels)
        if labels is None:
            labels = encoded[p.labels] = pb.NumberDataPoint(attributes=_attributes(p.labels)).SerializeToString()
        point = data_points.add()
        point.MergeFromString(labels)
        point.time_unix_nano = end_ns
        point.as_double = p.value
        if kind == DELTA:
            point.start_time_unix_nano = start_ns
    return metric


def requests_for(window: WindowPoints, resource_attributes: Mapping[str, str],
                 extra: Sequence[pb.Metric] = (),
                 points_per_request: int = POINTS_PER_REQUEST) -> list[ExportMetricsServiceRequest]:
    """A window's points as requests of at most `points_per_request` points each (a series' points are never
    split across requests: a window has one point per series); `extra` metrics (the exporter's own counters)
    ride in the first request."""
    chunks = [window.points[i:i + points_per_request]
              for i in range(0, len(window.points), points_per_request)] or [[]]
    requests: list[ExportMetricsServiceRequest] = []
    encoded: dict[tuple[tuple[str, str], ...], bytes] = {}
    for index, chunk in enumerate(chunks):
        by_metric: dict[tuple[str, str, str], list[Point]] = {}
        for point in chunk:
            by_metric.setdefault((point.name, point.kind, point.unit), []).append(point)
        metrics = [_metric(name, kind, unit, points, window.window_start_ns, window.window_end_ns, encoded)
                   for (name, kind, unit), points in sorted(by_metric.items())]
        if index == 0:
            metrics.extend(extra)
        if not metrics:
            continue
        request = ExportMetricsServiceRequest()
        resource_metrics = request.resource_metrics.add()
        resource_metrics.resource.attributes.extend(_attributes(sorted(resource_attributes.items())))
        scope_metrics = resource_metrics.scope_metrics.add()
        scope_metrics.scope.name = SCOPE_NAME
        scope_metrics.metrics.extend(metrics)
        requests.append(request)
    return requests
