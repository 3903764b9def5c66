"""The job's per-client JVM aggregation (ClientWindows, kct.aggregation.client_windows) against the oracle's
Spark SQL path (tests/aggregation_oracle/sql_engine.py).

Both run in the shared local SparkSession on the same records: the oracle's path decodes them into point
rows (`decode.jvm_points`, itself held to the oracle's Python decoder by test_jvm_decoder.py) and aggregates
them with `aggregate_client_metrics`; the job groups the records per client instance and aggregates each
client's pushes in one Java loop. Every
client_metrics row must be the same, column for column (doubles bit for bit, NaN included).
"""

from __future__ import annotations

import datetime as dt
import math
import random
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from aggregation_oracle.sql_engine import aggregate_client_metrics, client_metrics_and_last, rollups
from test_jvm_decoder import _exotic_push

from kct.aggregation.client_windows import (
    client_metrics_and_last_rows,
    client_metrics_from_records,
    last_points_of,
    metrics_of,
)
from kct.aggregation.config import AggregationConfig
from kct.aggregation.decode import RAW_SCHEMA_DDL, jvm_points
from kct.aggregation.synthetic import LATENCY_BOUNDS, SyntheticClient, build_request
from kct.aggregation.transforms import CLIENT_METRICS_COLUMNS, LAST_POINT_COLUMNS
from kct.otlp import labels as L

pytestmark = pytest.mark.spark

S = 1_000_000_000
REPO = Path(__file__).resolve().parents[3]
T0 = 1_700_000_040 * S  # a minute boundary
LOOKBACK = 5


@pytest.fixture(scope="module")
def jvm(jvm_decoder: Any) -> Any:
    """The session with the decoder jar, which holds ClientWindows (conftest.py)."""
    return jvm_decoder


def _record(offset: int, value: bytes | None, key: bytes | None,
            headers: list[tuple[str, bytes | None]] | None) -> tuple[Any, ...]:
    ts = dt.datetime(2023, 11, 14, tzinfo=dt.UTC)
    return (key, value, "client-telemetry", offset % 2, offset, ts, headers)


def _synthetic() -> list[Any]:
    """Producers pushing every 10 s for 12 minutes: a restart (new start time, counters from zero), a
    counter drop without a new start time, a long-running client first seen now (start beyond the
    look-back: a baseline), one started 200 s before its first push, a client silent for longer than the
    look-back and one for less, per-partition series."""
    clients = [SyntheticClient(f"producer-{i}", started_ns=T0 - 2 * S, seed=i + 1, partitions=3 * (i % 2))
               for i in range(7)]
    clients[3].started_ns = T0 - 3600 * S  # running for an hour before we see it
    clients[6].started_ns = T0 - 200 * S  # started 200 s before we see it: within 5 windows, not within 1
    records = []
    for k in range(72):
        now = T0 + k * 10 * S + 3 * S
        if k == 18:  # restart: same instance id, counters from zero, new start time
            c = clients[1]
            c.started_ns, c.records_sent, c.connections, c.latency_sum = now - S, 0, 0, 0.0
            c.latency_buckets = [0] * (len(LATENCY_BOUNDS) + 1)
        if k == 30:  # counter drop, same start time
            clients[2].records_sent //= 3
        for i, c in enumerate(clients):
            if i == 4 and 20 <= k < 60:  # silent for 400 s > look-back (300 s)
                continue
            if i == 5 and 30 <= k < 45:  # silent for 150 s: within 5 windows, not within 1
                continue
            records.append(c.push(now, terminating=(k == 71 and i == 0), reason="bye"))
    return records


def _hand_made() -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]] | None]]:
    """Pushes the synthetic clients do not make: delta and non-monotonic sums, delta histograms, integer
    values, a NaN gauge, exponential histograms, summaries, two resources, header variants."""
    out: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]] | None]] = []
    for k in range(14):
        t = T0 + k * 25 * S
        value = build_request({"service.name": "orders"}, [
            {"name": "sum.delta", "type": "sum", "temporality": "delta",
             "points": [{"time": t, "start": t - 25 * S, "value": k % 4, "attributes": {"topic": "a"}},
                        {"time": t, "start": t - 25 * S, "value": 0.1 * k, "attributes": {"topic": "b"}}]},
            {"name": "sum.nonmono", "type": "sum", "temporality": "cumulative", "monotonic": False,
             "points": [{"time": t, "start": T0 - S, "value": math.sin(k) * 10}]},
            {"name": "gauge.int", "type": "gauge", "points": [{"time": t, "value": (k * 7) % 5}]},
            {"name": "gauge.nan", "type": "gauge",
             "points": [{"time": t, "value": float("nan") if k % 5 == 2 else -0.0 if k % 5 == 3 else k / 3}]},
            {"name": "hist.delta", "type": "histogram", "temporality": "delta", "unit": "ms",
             "points": [{"time": t, "start": t - 25 * S, "count": k + 1, "sum": 2.5 * k,
                         "buckets": [k, 1], "bounds": [10.0]}]},
        ])
        headers: list[tuple[str, bytes | None]] = [(L.CLIENT_INSTANCE_ID.name, b"hand-made"),
                                                    (L.CLIENT_ID.http_header.upper(), f"hm-{k % 2}".encode()),
                                                    (L.PRINCIPAL.name, None)]
        out.append((b"ignored-key", value, headers))
    out.append((b"key-only", _exotic_push(), None))  # no headers: the instance id is the record key
    out.append((None, b"not a protobuf", [(L.CLIENT_INSTANCE_ID.name, b"hand-made")]))  # skipped
    out.append((b"hand-made", None, None))  # no value: no points
    out.append((None, build_request({}, [{"name": "anonymous", "type": "gauge",
                                          "points": [{"time": T0, "value": 1.0}]}]), None))  # no instance id
    return out


def _raw_records() -> list[tuple[Any, ...]]:
    rows: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]] | None]] = [
        (r.key, r.value, list(r.headers)) for r in _synthetic()]
    rows.extend(_hand_made())
    rows.append(rows[7])  # a record delivered twice
    random.Random(13).shuffle(rows)  # pushes out of time order within each client
    return [_record(i, value, key, headers) for i, (key, value, headers) in enumerate(rows)]


def _normal(value: Any) -> Any:
    """Comparable, exact: NaN equal to NaN, -0.0 told from 0.0, maps as sorted pairs."""
    if isinstance(value, float):
        return ("float", "nan" if math.isnan(value) else value.hex())
    if isinstance(value, dict):
        return sorted((k, _normal(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


def _rows(df: Any, columns: tuple[str, ...] = CLIENT_METRICS_COLUMNS) -> list[tuple[Any, ...]]:
    out = [tuple(_normal(row[c]) for c in columns) for row in df.collect()]
    return sorted(out, key=repr)


def test_client_windows_rows_equal_the_sql_path(jvm: Any) -> None:
    """Given synthetic producers (restarts, counter drops, late-seen clients, gaps beyond the look-back,
    per-partition series, cumulative histograms) and hand-made pushes (delta and non-monotonic sums, delta
    histograms, NaN and -0.0 gauges, exponential histograms, summaries, two resources, header variants,
    malformed and empty records, a duplicate record), in shuffled order,
    When client_metrics is computed by the oracle's SQL path (decoded points) and by ClientWindows (records),
    Then both have the same schema and the same rows, every column exact."""
    spark = jvm
    raw = spark.createDataFrame(_raw_records(), RAW_SCHEMA_DDL).repartition(2).persist()
    sql = aggregate_client_metrics(jvm_points(raw), window_seconds=60, lookback_windows=LOOKBACK)
    jvm_df = client_metrics_from_records(raw, window_seconds=60, lookback_windows=LOOKBACK)
    assert [(f.name, f.dataType) for f in jvm_df.schema] == [(f.name, f.dataType) for f in sql.schema]
    sql_rows, jvm_rows = _rows(sql), _rows(jvm_df)
    raw.unpersist()
    # The data exercise what they should: many series and windows, resets, baselines, histograms.
    ix = {c: i for i, c in enumerate(CLIENT_METRICS_COLUMNS)}
    assert len(sql_rows) > 500
    assert sum(r[ix["resets"]] or 0 for r in sql_rows) >= 3
    assert {r[ix["type"]] for r in sql_rows} == {"gauge", "sum", "histogram", "exponential_histogram", "summary"}
    assert len(jvm_rows) == len(sql_rows)
    for mine, theirs in zip(jvm_rows, sql_rows, strict=True):
        assert dict(zip(CLIENT_METRICS_COLUMNS, mine, strict=True)) == dict(
            zip(CLIENT_METRICS_COLUMNS, theirs, strict=True))


def test_client_windows_window_size_and_lookback_are_honoured(jvm: Any) -> None:
    """Given the synthetic producers, When both paths aggregate with 120 s windows and a 1-window look-back
    (the silent client's and the restarts' previous points fall out of it differently),
    Then they still agree row for row."""
    spark = jvm
    rows = [_record(i, r.value, r.key, list(r.headers)) for i, r in enumerate(_synthetic())]
    raw = spark.createDataFrame(rows, RAW_SCHEMA_DDL).persist()
    sql = aggregate_client_metrics(jvm_points(raw), window_seconds=120, lookback_windows=1)
    jvm_df = client_metrics_from_records(raw, window_seconds=120, lookback_windows=1)
    sql_rows, jvm_rows = _rows(sql), _rows(jvm_df)
    raw.unpersist()
    assert len(sql_rows) > 100
    assert jvm_rows == sql_rows


def test_each_window_carries_its_own_last_attributes_and_resource_in_their_order(jvm: Any) -> None:
    """Given one gauge series over five windows whose points carry maps with one attributes key but other
    entries ("a" = "1,b=2" reads like a=1 and b=2), the same entries in another order, and the first map again,
    and pushes whose resources differ in the same ways,
    When ClientWindows aggregates them (it converts a window's maps only when they differ from the previous
    window's, entry for entry and in order),
    Then every row holds its window's last point's attributes and resource, entries in their order, as the
    SQL path's rows hold them."""
    spark = jvm
    one_key = [{"a": "1,b=2"}, {"a": "1", "b": "2"}, {"b": "2", "a": "1"}, {"a": "1", "b": "2"}, {"a": "1,b=2"}]
    resources = [{"service.name": "x", "zone": "1"}, {"zone": "1", "service.name": "x"},
                 {"zone": "1", "service.name": "x"}, {"service.name": "x,zone=1"}, {"service.name": "x", "zone": "1"}]
    rows = []
    for w, (attributes, resource) in enumerate(zip(one_key, resources, strict=True)):
        value = build_request(resource, [{"name": "g", "type": "gauge", "points": [
            {"time": T0 + (60 * w + 5) * S, "value": float(w), "attributes": attributes}]}])
        rows.append(_record(w, value, b"one-client", [(L.CLIENT_INSTANCE_ID.name, b"one-client")]))
    raw = spark.createDataFrame(rows, RAW_SCHEMA_DDL).persist()
    sql = aggregate_client_metrics(jvm_points(raw), window_seconds=60, lookback_windows=LOOKBACK)
    jvm_df = client_metrics_from_records(raw, window_seconds=60, lookback_windows=LOOKBACK)

    def maps(df: Any) -> list[tuple[Any, ...]]:
        # As entry arrays: collect() hands maps over as hash maps, in no order.
        entries = df.orderBy("window_start").selectExpr(
            "map_entries(attributes) AS a", "map_entries(resource_attributes) AS r", "attributes_key").collect()
        return [([tuple(e) for e in row.a], [tuple(e) for e in row.r], row.attributes_key) for row in entries]

    mine = maps(jvm_df)
    raw.unpersist()
    assert mine == [(list(a.items()), list(r.items()), "a=1,b=2") for a, r in zip(one_key, resources, strict=True)]
    assert mine == maps(sql)


def test_client_windows_dates_follow_the_session_time_zone_across_local_midnight(jvm: Any) -> None:
    """Given the synthetic producers (22:14-22:26 UTC) and a session time zone of +01:45, whose midnight falls
    at 22:15 UTC, When both paths aggregate, Then their rows agree, `date` included, and hold both local dates
    (ClientWindows keeps the day it found last: the windows after midnight must not take the day before's)."""
    spark = jvm
    rows = [_record(i, r.value, r.key, list(r.headers)) for i, r in enumerate(_synthetic())]
    raw = spark.createDataFrame(rows, RAW_SCHEMA_DDL).persist()
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "+01:45")
    try:
        sql_rows = _rows(aggregate_client_metrics(jvm_points(raw), window_seconds=60,
                                                  lookback_windows=LOOKBACK))
        jvm_rows = _rows(client_metrics_from_records(raw, window_seconds=60, lookback_windows=LOOKBACK))
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
        raw.unpersist()
    at = CLIENT_METRICS_COLUMNS.index("date")
    assert {r[at] for r in sql_rows} == {"2023-11-14", "2023-11-15"}
    assert jvm_rows == sql_rows


def _odd_names(k: int) -> tuple[Any, ...]:
    """A client whose metric names sort one way by their UTF-16 units (Java's String order) and the other way
    by their UTF-8 bytes (Spark's): U+FF61 (EF BD A1) is below U+1F600 (F0 9F 98 80) in UTF-8, above its
    surrogates (D83D) in UTF-16; pushed at the synthetic producers' times, across their local midnight."""
    t = T0 + (k * 50 + 7) * S
    value = build_request({}, [{"name": name, "type": "gauge", "points": [{"time": t, "value": float(k)}]}
                               for name in ("\U0001f600.gauge", "\uff61.gauge", "a.gauge")])
    return _record(1000 + k, value, b"odd-names", [(L.CLIENT_INSTANCE_ID.name, b"odd-names")])


def _order_in_partitions(df: Any) -> list[list[tuple[Any, ...]]]:
    """Each partition's rows as ClientWindows hands them on: (kind, date, metric's UTF-8 bytes, window start,
    instance id), in that order (monotonically_increasing_id counts rows in a partition in iteration order)."""
    kind = "_kind" if "_kind" in df.columns else "0"
    rows = df.selectExpr("spark_partition_id() AS part", "monotonically_increasing_id() AS at",
                         f"{kind} AS kind", "date", "metric", "window_start", "client_instance_id").collect()
    parts: dict[int, list[Any]] = {}
    for r in sorted(rows, key=lambda r: r.at):
        parts.setdefault(r.part, []).append(
            (r.kind, r.date, (r.metric or "").encode(), r.window_start, r.client_instance_id))
    return list(parts.values())


def test_each_partition_comes_in_the_tables_order(jvm: Any) -> None:
    """Given the synthetic producers over a local midnight (session time zone +01:45) and a client whose
    metric names sort differently by UTF-16 units and by UTF-8 bytes,
    When ClientWindows aggregates them, in batch and as a stream's micro-batch (with each series' newest point),
    Then each partition's client_metrics rows come in the order the tables are written in (date, metric by its
    UTF-8 bytes, window start): the write's sort then merges a few runs instead of sorting rows of clients;
    a micro-batch's newest points come after them; every row has its date, a newest point its window's."""
    spark = jvm
    rows = [_record(i, r.value, r.key, list(r.headers)) for i, r in enumerate(_synthetic())]
    rows += [_odd_names(k) for k in range(14)]
    raw = spark.createDataFrame(rows, RAW_SCHEMA_DDL).repartition(2).persist()
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "+01:45")
    try:
        batch_df = client_metrics_from_records(raw, window_seconds=60, lookback_windows=LOOKBACK)
        stream_df = client_metrics_and_last_rows(raw, window_seconds=60, lookback_windows=LOOKBACK)
        batch, stream = _order_in_partitions(batch_df), _order_in_partitions(stream_df)
        last_points = stream_df.where("_kind = 1").select("date", "time_unix_nano").collect()
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
        raw.unpersist()
    for parts in (batch, stream):
        assert sum(len(p) for p in parts) > 500
        for part in parts:
            metrics = [r[1:4] for r in part if r[0] == 0]
            assert metrics == sorted(metrics)
            kinds = [r[0] for r in part]
            assert kinds == sorted(kinds)  # newest points (1) after the client_metrics rows (0)
        # The data make the order matter: both dates, clients interleaved, the odd names where Java's order differs.
        assert {d for p in parts for _, d, *_ in p if d} == {"2023-11-14", "2023-11-15"}
        assert any(sum(a[4] != b[4] for a, b in pairwise(p)) > len({r[4] for r in p}) for p in parts)
        odd = [r[2] for p in parts for r in p if r[4] == "odd-names" and r[1] == "2023-11-14"]
        assert odd.index("\uff61.gauge".encode()) < odd.index("\U0001f600.gauge".encode())
    assert any(r[0] == 1 for p in stream for r in p)
    # `date` is declared not nullable (a partitioned write then copies no row to turn "" into null), and holds:
    # a last point's is its window's date.
    assert not batch_df.schema["date"].nullable and not stream_df.schema["date"].nullable
    assert all(r[1] for parts in (batch, stream) for p in parts for r in p)
    local = dt.timezone(dt.timedelta(hours=1, minutes=45))
    assert last_points and all(
        r.date == dt.datetime.fromtimestamp(r.time_unix_nano // (60 * S) * 60, local).date().isoformat()
        for r in last_points)


def test_clients_past_a_chunk_are_all_there_each_chunk_in_the_tables_order(jvm: Any) -> None:
    """Given nine clients of 25 gauges over 90 windows each (2,250 rows a client, 20,250 in all: ClientWindows
    orders a partition's rows 16,384 at a time, at a client's end),
    When ClientWindows aggregates them,
    Then its rows are the oracle's SQL path's, all of them, and the partition comes as two runs in the tables' order
    (the first eight clients', then the ninth's)."""
    spark = jvm
    rows: list[tuple[Any, ...]] = []
    for c in range(9):
        for w in range(90):
            value = build_request({}, [{"name": f"m.{(7 * m + c) % 25:02d}", "type": "gauge",
                                        "points": [{"time": T0 + (60 * w + 1) * S, "value": float(m * w)}]}
                                       for m in range(25)])
            rows.append(_record(len(rows), value, f"c{c}".encode(), [(L.CLIENT_INSTANCE_ID.name, f"c{c}".encode())]))
    raw = spark.createDataFrame(rows, RAW_SCHEMA_DDL).persist()
    jvm_df = client_metrics_from_records(raw, window_seconds=60, lookback_windows=LOOKBACK)
    parts = [p for p in _order_in_partitions(jvm_df) if p]
    jvm_rows = _rows(jvm_df)
    sql_rows = _rows(aggregate_client_metrics(jvm_points(raw), window_seconds=60, lookback_windows=LOOKBACK))
    raw.unpersist()
    assert len(jvm_rows) == 20_250
    assert jvm_rows == sql_rows
    assert len(parts) == 1  # Spark's adaptive execution puts these few MB in one partition
    keys = [r[1:4] for r in parts[0]]
    breaks = [i for i in range(1, len(keys)) if keys[i] < keys[i - 1]]
    assert breaks == [18_000]
    assert keys[:18_000] == sorted(keys[:18_000]) and keys[18_000:] == sorted(keys[18_000:])


def _random_histograms(seed: int, layouts: int) -> list[tuple[Any, ...]]:
    """Delta histograms over random bucket layouts (negative, fractional and huge bounds, empty buckets,
    all-empty histograms, large counts), two pushes per window so buckets are also added up."""
    rng = random.Random(seed)
    points: list[list[dict[str, Any]]] = [[], []]
    for i in range(layouts):
        n = rng.randint(1, 12)
        start = rng.choice([-1000.0, -1.5, 0.0, 0.001, 3.0])
        bounds = sorted({round(start + rng.expovariate(0.1) * (k + 1), rng.randint(0, 6)) for k in range(n)})
        for push in points:
            counts = [rng.choice([0, 0, 1, rng.randint(0, 50), rng.randint(0, 1 << 40)])
                      for _ in range(len(bounds) + 1)]
            if rng.random() < 0.05:
                counts = [0] * len(counts)
            push.append({"time": T0 + (len(push) % 50) * S, "start": T0 - S, "count": sum(counts),
                         "sum": rng.uniform(0, 1e6), "buckets": counts, "bounds": bounds,
                         "attributes": {"layout": str(i)}})
    rows = []
    for k, push in enumerate(points):
        value = build_request({}, [{"name": "random.hist", "type": "histogram", "temporality": "delta",
                                    "points": push}])
        rows.append(_record(k, value, b"random-histograms", None))
    return rows


def test_client_windows_quantiles_equal_the_sql_path_on_random_bucket_layouts(jvm: Any) -> None:
    """Given 400 random bucket layouts (delta histograms, two pushes each in one window),
    When both paths aggregate them,
    Then p50/p95/p99 (decimal ranks and fractions in SQL, BigDecimal in Java) and every other column agree
    to the bit."""
    spark = jvm
    raw = spark.createDataFrame(_random_histograms(7, 400), RAW_SCHEMA_DDL).persist()
    sql_rows = _rows(aggregate_client_metrics(jvm_points(raw)))
    jvm_rows = _rows(client_metrics_from_records(raw))
    raw.unpersist()
    p95 = CLIENT_METRICS_COLUMNS.index("p95")
    assert len(sql_rows) == 400
    assert sum(r[p95] is not None for r in sql_rows) > 300
    assert jvm_rows == sql_rows


def test_client_windows_across_micro_batches_equals_the_sql_path(jvm: Any) -> None:
    """Given the synthetic producers' records split in three micro-batches (at 4 min, and at 8 min 30 s:
    inside a window), the second one also holding pushes of the first again (late, older than the last points
    kept from it, in the same window), When each path aggregates them in turn, each micro-batch with the
    series' last points of the one before (the oracle's `previous`, ClientWindows' `_kind` 1 rows),
    Then every micro-batch's client_metrics rows and last points agree, column for column."""
    spark = jvm
    records = [_record(i, r.value, r.key, list(r.headers)) for i, r in enumerate(_synthetic())]
    cuts = [T0 + 240 * S, T0 + 510 * S]

    def batch(k: int) -> Any:
        lo, hi = ([0, *cuts][k], [*cuts, 1 << 62][k])
        mine = [r for r in records if lo <= _push_time(r[1]) < hi]
        if k == 1:  # late: pushes of 223 s again, older than the previous batch's last points (233 s, same window)
            mine += [r for r in records if T0 + 220 * S <= _push_time(r[1]) < T0 + 230 * S]
        return spark.createDataFrame(mine, RAW_SCHEMA_DDL)

    sql_previous: Any = None
    jvm_previous: Any = None
    resets = 0
    for k in range(3):
        raw = batch(k).persist()
        sql_metrics, sql_last = client_metrics_and_last(jvm_points(raw), previous=sql_previous)
        sql_last = sql_last.persist()
        rows = client_metrics_and_last_rows(raw, previous=jvm_previous).persist()
        jvm_metrics, jvm_last = metrics_of(rows), last_points_of(rows)
        sql_m, jvm_m = _rows(sql_metrics), _rows(jvm_metrics)
        assert len(sql_m) > 100
        assert jvm_m == sql_m, f"micro-batch {k}"
        assert _rows(jvm_last, LAST_POINT_COLUMNS) == _rows(sql_last, LAST_POINT_COLUMNS), f"micro-batch {k}"
        if k == 1:  # the late windows end on a kept point: the SQL path takes no labels for them, nor do we
            assert any(r[CLIENT_METRICS_COLUMNS.index("client_id")] is None for r in sql_m)
        resets += sum(r[CLIENT_METRICS_COLUMNS.index("resets")] or 0 for r in sql_m)
        sql_previous, jvm_previous = sql_last, jvm_last.localCheckpoint()
        raw.unpersist()
    assert resets >= 3


def _push_time(value: bytes) -> int:
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    req = ExportMetricsServiceRequest.FromString(value)
    return int(req.resource_metrics[0].scope_metrics[0].metrics[0].sum.data_points[0].time_unix_nano)


def test_run_batch_writes_the_tables_of_the_oracle(jvm: Any, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Given the synthetic producers' records (the topic read stubbed out),
    When run_batch runs (ClientWindows, roll-ups on the JVM) and the oracle computes client_metrics and roll-ups
    from the same records in Spark SQL (written by the same writer),
    Then both hold the same client_metrics rows and the same rollups rows (doubles summed over instances up to
    the order of the sum), and run_batch's counts are the oracle's."""
    from pyspark.sql import functions as F

    from kct.aggregation import batch
    from kct.aggregation.outputs import write_table

    spark = jvm
    raw = spark.createDataFrame(
        [_record(i, r.value, r.key, list(r.headers)) for i, r in enumerate(_synthetic())], RAW_SCHEMA_DDL)
    monkeypatch.setattr(batch, "read_records", lambda *_a, **_k: raw)
    configs = {name: AggregationConfig.model_validate({"source": {"bootstrapServers": "unused"},
                                                       "parquet": {"path": str(tmp_path / name)}})
               for name in ("job", "oracle")}
    counts = batch.run_batch(spark, configs["job"])
    oracle_metrics = aggregate_client_metrics(jvm_points(raw), window_seconds=60, lookback_windows=LOOKBACK).persist()
    write_table(oracle_metrics, configs["oracle"], "client_metrics", "overwrite")
    write_table(rollups(oracle_metrics), configs["oracle"], "rollups", "overwrite")
    oracle_points = oracle_metrics.agg(F.sum("points")).first()[0]
    oracle_metrics.unpersist()
    tables: dict[str, dict[str, list[tuple[Any, ...]]]] = {}
    for name in ("job", "oracle"):
        tables[name] = {}
        for table in ("client_metrics", "rollups"):
            df = spark.read.parquet(str(tmp_path / name / table))
            tables[name][table] = _rows(df, tuple(df.columns))
    assert counts["client_metrics"] == len(tables["oracle"]["client_metrics"]) > 500
    assert counts["rollups"] == len(tables["oracle"]["rollups"])
    assert counts["points"] == oracle_points
    assert tables["job"]["client_metrics"] == tables["oracle"]["client_metrics"]
    # Roll-ups add doubles over instances in whatever order the rows arrive (partitioning differs between
    # the two): equal up to that order.
    mine, theirs = tables["job"]["rollups"], tables["oracle"]["rollups"]
    assert len(mine) == len(theirs) > 100
    for a, b in zip(mine, theirs, strict=True):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            if isinstance(x, tuple) and x[:1] == ("float",) and isinstance(y, tuple) and y[:1] == ("float",):
                fx, fy = (float.fromhex(v[1]) if v[1] != "nan" else math.nan for v in (x, y))
                assert fx == fy or math.isclose(fx, fy, rel_tol=1e-12) or (math.isnan(fx) and math.isnan(fy))
            else:
                assert x == y
