"""The job's aggregation (records -> ClientWindows on the JVM) and the oracle's (records -> the Python decoder
over Arrow batches -> Spark SQL, tests/aggregation_oracle) against an independent recomputation in plain
Python straight from the protobuf messages (no pyspark, no kct decode code).

Spec shared by both (docs/user-guide.md, "The aggregates"): windows [k*60, k*60+60) on the point time; a cumulative
monotonic sum's window delta is the sum of increments between consecutive points of the series (the first
point of the window paired with the series' previous point, at most `lookback` windows back), an increment
being `cur` after a reset (value drops or start time changes) and `cur - prev` otherwise; a series' first
point counts its whole value when its start time is within the look-back horizon. Gauges: last/min/max/avg.
Histograms (cumulative): bucket-wise increments, p50 by linear interpolation within the rank's bucket.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any

import pytest

from kct.aggregation.synthetic import LATENCY_BOUNDS, SyntheticClient

pytestmark = pytest.mark.spark

S = 1_000_000_000
WINDOW = 60
LOOKBACK = 5
T0 = 1_700_000_040 * S


def make_records() -> list[Any]:
    """3 producers pushing every 10 s for 6 minutes; the second restarts (counter reset) after 3 minutes."""
    clients = [SyntheticClient(f"producer-{i}", started_ns=T0 - 2 * S, seed=i + 1) for i in range(3)]
    records = []
    for k in range(36):
        now = T0 + k * 10 * S + 3 * S
        if k == 18:  # restart: same instance id, counters from zero, new start time
            c = clients[1]
            c.started_ns, c.records_sent, c.connections, c.latency_sum = now - S, 0, 0, 0.0
            c.latency_buckets = [0] * (len(LATENCY_BOUNDS) + 1)
        records.extend(c.push(now) for c in clients)
    return records


def recompute(records: list[Any]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Plain Python over the protobuf messages."""
    series, kinds = _series(records)
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for key, pts in series.items():
        pts.sort()
        by_window: dict[int, list[int]] = defaultdict(list)
        for i, (t, _, _) in enumerate(pts):
            by_window[t // S // WINDOW * WINDOW].append(i)
        for w, idxs in by_window.items():
            out[(*key, w)] = _window_row(kinds[key], pts, idxs, w)
    return out


def _series(records: list[Any]) -> tuple[dict[tuple[Any, ...], list[tuple[int, int, Any]]], dict[tuple[Any, ...], str]]:
    """(time, start time, value) per (instance, metric, attributes), and each series' kind."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    series: dict[tuple[Any, ...], list[tuple[int, int, Any]]] = defaultdict(list)
    kinds: dict[tuple[Any, ...], str] = {}
    for rec in records:
        instance = dict(rec.headers)["client_instance_id"].decode()
        req = ExportMetricsServiceRequest.FromString(rec.value)
        metrics = [m for rm in req.resource_metrics for sm in rm.scope_metrics for m in sm.metrics]
        for m in metrics:
            kind = m.WhichOneof("data")
            for p in getattr(m, kind).data_points:
                pairs = sorted((a.key, a.value.string_value) for a in p.attributes)
                key = (instance, m.name, ",".join(f"{k}={v}" for k, v in pairs))
                kinds[key] = kind
                series[key].append((p.time_unix_nano, p.start_time_unix_nano, _point_value(kind, p)))
    return series, kinds


def _point_value(kind: str, p: Any) -> Any:
    if kind == "histogram":
        return (list(p.bucket_counts), p.count, p.sum)
    return p.as_double if p.WhichOneof("value") == "as_double" else float(p.as_int)


def _window_row(kind: str, pts: list[tuple[int, int, Any]], idxs: list[int], w: int) -> dict[str, Any]:
    if kind == "gauge":
        vals = [pts[i][2] for i in idxs]
        return {"last": vals[-1], "min": min(vals), "max": max(vals), "avg": sum(vals) / len(vals)}
    delta: Any = 0.0 if kind == "sum" else None
    first = idxs[0]
    prev = first - 1 if first > 0 and pts[first - 1][0] // S >= w - LOOKBACK * WINDOW else None
    for i in idxs:
        inc = _increment(kind, pts, prev, i, w)
        if kind == "sum":
            delta += inc
        else:
            delta = inc if delta is None else (
                [a + b for a, b in zip(delta[0], inc[0], strict=True)], delta[1] + inc[1], delta[2] + inc[2])
        prev = i
    if kind == "sum":
        return {"delta": delta}
    return {"buckets": delta[0], "count": delta[1], "sum": delta[2], "p50": quantile(0.5, delta[0])}


def _increment(kind: str, pts: list[tuple[int, int, Any]], prev: int | None, i: int, w: int) -> Any:
    """How much point `i` adds over point `prev` (None: the first point seen in the lookback)."""
    _, start, cur = pts[i]
    if prev is None:
        fresh = start > 0 and start // S >= w - LOOKBACK * WINDOW
        return cur if fresh else (0.0 if kind == "sum" else ([0] * len(cur[0]), 0, 0.0))
    _, pstart, pv = pts[prev]
    if kind == "sum":
        return cur if cur < pv or start != pstart else cur - pv
    if cur[1] < pv[1] or start != pstart:
        return cur
    return ([a - b for a, b in zip(cur[0], pv[0], strict=True)], cur[1] - pv[1], cur[2] - pv[2])


def quantile(q: float, counts: list[int]) -> float | None:
    total = sum(counts)
    if total == 0:
        return None
    rank, seen = q * total, 0
    bounds = list(LATENCY_BOUNDS)
    for i, c in enumerate(counts):
        if seen + c >= rank and c > 0:
            lower = min(0.0, bounds[0]) if i == 0 else bounds[i - 1]
            upper = bounds[-1] if i >= len(bounds) else bounds[i]
            return lower + (upper - lower) * (rank - seen) / c
        seen += c
    return None


def _job_rows(raw: Any) -> list[Any]:
    from kct.aggregation.client_windows import client_metrics_from_records

    return list(client_metrics_from_records(raw, window_seconds=WINDOW, lookback_windows=LOOKBACK).collect())


def _oracle_rows(raw: Any) -> list[Any]:
    from aggregation_oracle.python_decoder import decode_points
    from aggregation_oracle.sql_engine import aggregate_client_metrics

    return list(aggregate_client_metrics(decode_points(raw), window_seconds=WINDOW,
                                         lookback_windows=LOOKBACK).collect())


@pytest.mark.parametrize("engine", ["job", "oracle"])
def test_spark_pipeline_agrees_with_a_plain_python_recomputation(jvm_decoder: Any, engine: str) -> None:
    """Given 324 realistic pushes (3 producers, one restarting mid-way) as Kafka records,
    When the job (ClientWindows) or the oracle (Python decoder, Spark SQL) aggregates them and plain Python
    recomputes from the protobuf messages,
    Then every (instance, metric, attributes, window) row agrees within floating-point tolerance."""
    from kct.aggregation.decode import RAW_SCHEMA_DDL

    spark = jvm_decoder
    records = make_records()
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    raw = spark.createDataFrame(
        [(r.key, r.value, "t", 0, i, now, r.headers) for i, r in enumerate(records)], RAW_SCHEMA_DDL
    )
    rows = _job_rows(raw) if engine == "job" else _oracle_rows(raw)
    expected = recompute(records)
    got = {(r.client_instance_id, r.metric, r.attributes_key, int(r.window_start.timestamp())): r for r in rows}
    assert set(got) == set(expected)
    resets = 0
    for key, want in expected.items():
        row = got[key]
        if "delta" in want:
            assert row.delta == pytest.approx(want["delta"], rel=1e-9), key
            resets += row.resets
        elif "last" in want:
            assert (row.value_last, row.value_min, row.value_max) == (want["last"], want["min"], want["max"]), key
            assert row.value_avg == pytest.approx(want["avg"], rel=1e-9), key
        else:
            assert (list(row.bucket_counts), row["count"]) == (want["buckets"], want["count"]), key
            assert row.sum == pytest.approx(want["sum"], rel=1e-9, abs=1e-9), key
            assert row.p50 == pytest.approx(want["p50"], rel=1e-9), key
    assert resets >= 2  # the restart shows up as a reset of each of its counters
