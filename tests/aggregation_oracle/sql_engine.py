"""The Spark SQL engine of client_metrics and roll-ups: the oracle the job's JVM engine is checked against.

    records ─ python_decoder.decode_points (or decode.jvm_points) ─▶ points (decode.POINT_SCHEMA_DDL)
      └─ aggregate_client_metrics ─▶ client_metrics   one row per window x client instance x series
            └─ rollups ──────────────▶ rollups          per client id / software name+version / principal

The job computes both on the JVM (kct.aggregation.client_windows: one Java loop per client instance over its
records; kct.aggregation.rollups_jvm), for less CPU (bench/client_windows_ab.py measures both). This is the same
computation written once more in Spark SQL over decoded points, a second implementation of the semantics
that shares no code with the Java one: the tests hold ClientWindows and the JVM roll-ups to it, bit for bit
(tests/unit/aggregation/test_client_windows*.py, test_rollups_jvm.py), and to a plain Python recomputation
(test_aggregation_recompute.py). `aggregate_client_metrics` aggregates every window its points touch; the
stream oracle (aggregation_oracle.sql_stream) passes it only the points of the windows a micro-batch
finalizes, plus each series' last point from earlier micro-batches.

Counter deltas need the previous point of a series, which may sit in an earlier window (or an earlier
micro-batch). The points are sorted once per series (a window function partitioned by series): a `lag`
pairs each cumulative point with the series' previous point (in the same window, an earlier one at most
`lookback` windows back, or the stream's state), and one aggregation per (window, series) adds the
increments up with the other measures; the same sort marks each window's last point (`lead`), so the
aggregation takes the labels and the last value from that one row instead of comparing times:

    increment(prev, cur) = cur.value              if cur.value < prev.value or cur.start != prev.start
                                                  (counter reset: it restarted from 0 at cur.start)
                         = cur.value - prev.value otherwise

A series seen for the first time (no previous point) contributes its whole value when its start time lies
within the lookback horizon (the counter started recently, so everything it counted happened since) and is
only a baseline otherwise (a long-running client we started watching late: its lifetime total is not put
into one window). Delta-temporality sums are summed; cumulative histograms get the same pairwise treatment,
bucket by bucket. Gauges are last/min/max/avg; histograms get p50/p95/p99 by
linear interpolation within the bucket that holds the rank (the first bucket's lower edge is 0 or its
upper bound if negative; the overflow bucket's upper edge is the highest finite bound).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from kct.aggregation.decode import LABEL_COLUMNS
from kct.aggregation.terminating import TERMINATING_HEADERS, TERMINATING_METRIC
from kct.aggregation.transforms import (
    LAST_POINT_COLUMNS,
    ROLLUP_COLUMNS,
    ROLLUP_DIMENSIONS,
    SERIES_KEYS,
    with_quantiles,
    with_workload_columns,
)

__all__ = ["aggregate_client_metrics", "client_metrics_and_last", "may_terminate_sql", "rollups", "sorted_points_of"]

# The series keys as grouped on: bucket bounds as a string (`_bk`), not as an array of doubles, which Spark
# would normalize element by element (-0.0, NaN) with an interpreted higher-order function on every row.
_GROUP_KEYS: tuple[str, ...] = tuple("_bk" if k == "explicit_bounds" else k for k in SERIES_KEYS)


def _with_bounds_key(df: DataFrame) -> DataFrame:
    return df.withColumn("_bk", F.col("explicit_bounds").cast("string"))


def _with_quantiles(df: DataFrame) -> DataFrame:
    return with_quantiles(df)


def _ws_expr(size: int) -> Column:
    """The start (epoch seconds) of the `size`-second window holding each point."""
    return F.expr(f"(time_unix_nano div {size * 1_000_000_000}) * {size}")


def _cumulative() -> Column:
    return (F.col("temporality") == "cumulative") & F.col("type").isin("sum", "histogram")


_POINT = ("named_struct('t', time_unix_nano, 's', start_time_unix_nano, 'v', value, 'c', count, 'h', sum, "
          "'b', bucket_counts)")
# Point order within a series: by time, ties broken by the rest of the point (what the increments pair up).
_POINT_ORDER: tuple[str, ...] = ("time_unix_nano", "start_time_unix_nano", "value", "count", "sum")


def _with_increments(points: DataFrame, previous: DataFrame | None, size: int, lookback: int) -> DataFrame:
    """Every point sorted within its series (one window function, partitioned by series, ordered by window
    and time), with what it adds over the series' previous point (`_prev`, a `lag`; for a series' first
    point here, its last point in `previous`, the state a stream keeps across micro-batches) and whether it
    is its window's last point (`_is_last`, a `lead`) or its series' newest (`_is_newest`).

    The previous point counts only when it lies at most `lookback` windows before the point's window (a
    point of the same window always does); otherwise the point is the first seen: its whole value counts
    when its start time is recent (a new client), nothing when older (a long-running client seen late).
    A reset (the level dropped or the start time changed) of a monotonic series counts the whole value.
    Increments are null for points that are not cumulative sums or histograms. `previous` rows
    (LAST_POINT_COLUMNS) come out with `_seed` true: they are not points of these windows.
    """
    rows = points.withColumn("_seed", F.lit(False))
    if previous is not None:
        seeds = _with_bounds_key(previous.select(*LAST_POINT_COLUMNS)).withColumn("_ws", _ws_expr(size))
        rows = rows.unionByName(seeds.withColumn("_seed", F.lit(True)), allowMissingColumns=True)
    series = Window.partitionBy(*_GROUP_KEYS).orderBy("_ws", *_POINT_ORDER)
    rows = (
        rows.withColumn("_prev", F.lag(F.expr(_POINT)).over(series))
        .withColumn("_next_ws", F.lead("_ws", 1, -1).over(series))
        .withColumn("_is_last", F.col("_next_ws") != F.col("_ws"))
        .withColumn("_is_newest", F.col("_next_ws") == F.lit(-1))
    )
    horizon_ns = f"((_ws - {lookback * size}) * 1000000000L)"
    usable = f"(_prev IS NOT NULL AND _prev.t >= {horizon_ns})"
    fresh = f"(start_time_unix_nano > 0 AND start_time_unix_nano >= {horizon_ns})"
    monotonic = "(type = 'histogram' OR monotonic)"
    dropped = "IF(type = 'histogram', count < _prev.c, value < _prev.v)"
    reset = f"({usable} AND ({dropped} OR start_time_unix_nano != _prev.s))"
    whole = f"((NOT {usable} AND {fresh} AND {monotonic}) OR ({reset} AND {monotonic}))"
    cumulative = "(temporality = 'cumulative' AND type IN ('sum', 'histogram'))"
    return (
        rows.withColumn("_whole", F.expr(whole)).withColumn("_usable", F.expr(usable))
        .withColumn("_cum", F.expr(cumulative))
        .withColumn("_inc_r", F.expr(f"IF(_cum, IF({reset} AND {monotonic}, 1, 0), NULL)"))
        .withColumn("_inc_v", F.expr(
            "IF(_cum, CASE WHEN _whole THEN value WHEN _usable THEN value - _prev.v ELSE 0D END, NULL)"))
        .withColumn("_inc_c", F.expr(
            "IF(_cum, CASE WHEN _whole THEN count WHEN _usable THEN count - _prev.c ELSE 0L END, NULL)"))
        .withColumn("_inc_h", F.expr(
            "IF(_cum, CASE WHEN _whole THEN coalesce(sum, 0D) "
            "WHEN _usable THEN coalesce(sum, 0D) - coalesce(_prev.h, 0D) ELSE 0D END, NULL)"))
        .withColumn("_inc_b", F.expr(
            "CASE WHEN NOT _cum OR type != 'histogram' THEN NULL WHEN _whole THEN bucket_counts "
            "WHEN _usable THEN zip_with(bucket_counts, _prev.b, (x, y) -> x - y) "
            "ELSE array_repeat(0L, size(bucket_counts)) END"))
        .drop("_whole", "_usable", "_next_ws", "_prev")
    )


_DESCRIBED: tuple[str, ...] = (*LABEL_COLUMNS, "unit", "attributes", "resource_attributes", "explicit_bounds")


def _level1(incremented: DataFrame) -> DataFrame:
    """One row per (window, series) from the sorted points of `_with_increments`: counts, min/max/avg, the
    window's last point (the one row `_is_last` marks, so `first(..., ignorenulls)` picks it without
    comparing times), and the increments added up. Histogram buckets, the only arrays to add up, are
    summed in an aggregation of their own over the histogram points alone, so the aggregation of every
    other point holds no array and needs no `collect_list`."""
    last = F.col("_is_last")

    def at_last(col: str | Column) -> Column:
        return F.first(F.when(last, F.col(col) if isinstance(col, str) else col), ignorenulls=True)

    keys = (*_GROUP_KEYS, "_ws")
    points = incremented.where(~F.col("_seed"))
    numbers = points.groupBy(*keys).agg(
        F.count(F.lit(1)).alias("points"),
        at_last(F.struct(*_DESCRIBED)).alias("_d"),
        F.max("time").alias("last_time"),
        at_last("value").alias("value_last"),
        F.min("value").alias("value_min"),
        F.max("value").alias("value_max"),
        F.avg("value").alias("value_avg"),
        F.sum("value").alias("_value_sum"),
        F.sum("count").alias("_count_sum"),
        F.sum("sum").alias("_sum_sum"),
        at_last("count").alias("_count_last"),
        at_last("sum").alias("_sum_last"),
        F.sum("_inc_v").alias("_inc_v"),
        F.sum("_inc_c").alias("_inc_c"),
        F.sum("_inc_h").alias("_inc_h"),
        F.sum("_inc_r").alias("_inc_r"),
    )
    buckets = points.where(F.col("type") == "histogram").groupBy(*keys).agg(
        _sum_arrays(F.when(F.col("_cum"), F.col("_inc_b")).otherwise(F.col("bucket_counts"))).alias("_buckets"))
    # Null-safe: temporality, monotonicity and bounds are null for some types.
    return _join_null_safe(numbers, buckets, keys)


def aggregate_client_metrics(points: DataFrame, *, window_seconds: int = 60, lookback_windows: int = 5,
                             previous: DataFrame | None = None) -> DataFrame:
    """Data points -> one row per (window, client instance, metric, data-point attributes), every window
    the points touch (a stream passes only the points of windows it finalizes, see `aggregation_oracle.sql_stream`).

    No point is copied into other windows: the points are sorted once per series, each cumulative point
    gets its increment over the series' previous point (`_with_increments`: a `lag`, the previous point
    possibly in an earlier window or in `previous`, the series' last points from before these,
    LAST_POINT_COLUMNS), then one aggregation per (window, series) adds them up with the other measures.
    """
    return client_metrics_and_last(points, window_seconds=window_seconds, lookback_windows=lookback_windows,
                                   previous=previous)[0]


def client_metrics_and_last(points: DataFrame, *, window_seconds: int = 60, lookback_windows: int = 5,
                            previous: DataFrame | None = None,
                            sorted_points: DataFrame | None = None) -> tuple[DataFrame, DataFrame]:
    """`aggregate_client_metrics` and `last_points(points, previous)` from one sort of the points: the
    series' newest row of `_with_increments` (a point, or the `previous` row of a series without points
    here) is its last point. `sorted_points`: `sorted_points_of(...)` already computed (and persisted)."""
    size, lookback = int(window_seconds), int(lookback_windows)
    incremented = sorted_points if sorted_points is not None else _with_increments(
        _with_bounds_key(points).withColumn("_ws", _ws_expr(size)), previous, size, lookback)
    metrics = _finish(_level1(incremented), size)
    newest = incremented.where(F.col("_is_newest") & F.expr("temporality = 'cumulative' AND type IN "
                                                              "('sum', 'histogram')"))
    return metrics, newest.select(*LAST_POINT_COLUMNS)


def sorted_points_of(points: DataFrame, *, window_seconds: int = 60, lookback_windows: int = 5,
                     previous: DataFrame | None = None) -> DataFrame:
    """The points sorted per series with their increments (what `client_metrics_and_last` derives both of its
    results from): persist it to compute that sort once."""
    size = int(window_seconds)
    return _with_increments(_with_bounds_key(points).withColumn("_ws", _ws_expr(size)), previous, size,
                            int(lookback_windows))


def _finish(agg: DataFrame, size: int) -> DataFrame:
    is_cum = F.col("temporality") == "cumulative"
    is_sum, is_hist = F.col("type") == "sum", F.col("type") == "histogram"
    snapshot = F.col("type").isin("exponential_histogram", "summary")
    last_snapshot = is_cum | (F.col("type") == "summary")
    # Cumulative series: the first point's increment (level 2) plus the window's own (level 1).
    cum = is_cum & (is_sum | is_hist)
    delta = F.when(is_sum & is_cum, F.col("_inc_v")).when(is_sum, F.col("_value_sum"))
    resets = F.when(cum, F.col("_inc_r")).when(is_sum | is_hist, F.lit(0))
    count = F.when(is_hist & is_cum, F.col("_inc_c")).when(is_hist, F.col("_count_sum")).when(
        snapshot, F.when(last_snapshot, F.col("_count_last")).otherwise(F.col("_count_sum")))
    total = F.when(is_hist & is_cum, F.col("_inc_h")).when(
        is_hist, F.coalesce(F.col("_sum_sum"), F.lit(0.0))).when(
        snapshot, F.when(last_snapshot, F.col("_sum_last")).otherwise(F.col("_sum_sum")))
    buckets = F.when(is_hist, F.col("_buckets"))
    not_value = is_hist | snapshot
    df = (
        agg.withColumn("window_start", F.timestamp_seconds("_ws"))
        .withColumn("window_end", F.timestamp_seconds(F.col("_ws") + F.lit(size)))
        .withColumn("date", F.date_format(F.col("window_start"), "yyyy-MM-dd"))
        .withColumn("delta", delta)
        .withColumn("rate", delta / F.lit(float(size)))
        .withColumn("resets", resets.cast("int"))
        .withColumn("count", count.cast("long"))
        .withColumn("sum", total.cast("double"))
        .withColumn("bucket_counts", buckets)
    )
    for name in (*LABEL_COLUMNS, "unit", "attributes", "resource_attributes", "explicit_bounds"):
        df = df.withColumn(name, F.col(f"_d.{name}"))
    for name in ("value_last", "value_min", "value_max", "value_avg"):
        df = df.withColumn(name, F.when(~not_value, F.col(name)))
    return with_workload_columns(_with_quantiles(df))


def _sum_arrays(col: str | Column) -> Column:
    """Element-wise sum of the arrays collected from `col` (one bucket layout per group)."""
    return F.aggregate(
        F.collect_list(col), F.lit(None).cast("array<bigint>"),
        lambda acc, b: F.when(acc.isNull(), b).otherwise(F.zip_with(acc, b, lambda x, y: x + y)),
    )


def _join_null_safe(left: DataFrame, right: DataFrame, keys: Sequence[str]) -> DataFrame:
    """`left` with `right`'s other columns, left join on `keys` where null equals null."""
    renamed = right.select(*(F.col(k).alias(f"_r_{k}") for k in keys), *(c for c in right.columns if c not in keys))
    on = [left[k].eqNullSafe(renamed[f"_r_{k}"]) for k in keys]
    return left.join(renamed, on, "left").drop(*(f"_r_{k}" for k in keys))


def rollups(client_metrics: DataFrame, dimensions: dict[str, tuple[str, ...]] | None = None) -> DataFrame:
    """Per-window aggregates of client_metrics per client id, software name/version and principal.

    Counters: deltas and rates summed over instances. Gauges: sum of the instances' last values, min of
    mins, max of maxes, mean of means. Histograms: buckets, counts and sums merged, quantiles recomputed.
    All dimensions come out of one aggregation (grouping sets: one shuffle, not one per dimension).
    `instances` counts the client_metrics rows merged: one per client instance, since a series' row is
    unique per window and instance (type, temporality and bounds are grouped on, unit and monotonicity
    belong to the metric). The oracle of kct.aggregation.rollups_jvm, which computes the same rows on the
    JVM (the job's).
    """
    dims = dimensions or ROLLUP_DIMENSIONS
    keys = ("window_start", "window_end", "date", "metric", "unit", "type", "temporality", "attributes_key", "_bk")
    dim_columns = list(dict.fromkeys(c for cols in dims.values() for c in cols))
    source = _with_bounds_key(client_metrics)
    grouped = source.groupingSets([[*keys, *cols] for cols in dims.values()], *keys, *dim_columns).agg(
        *(F.grouping(c).alias(f"_g_{c}") for c in dim_columns),
        F.first("explicit_bounds").alias("explicit_bounds"),
        F.first("attributes").alias("attributes"),
        F.count(F.lit(1)).alias("instances"),
        F.sum("points").alias("points"),
        F.sum("value_last").alias("value_last_sum"),
        F.min("value_min").alias("value_min"),
        F.max("value_max").alias("value_max"),
        F.avg("value_avg").alias("value_avg"),
        F.sum("delta").alias("delta"),
        F.sum("rate").alias("rate"),
        F.sum("resets").alias("resets"),
        F.sum("count").alias("count"),
        F.sum("sum").alias("sum"),
        _sum_arrays("bucket_counts").alias("bucket_counts"),
    )
    # Which grouping set a row belongs to: the dimension whose columns are all grouped on in it.
    name = F.lit(None).cast("string")
    value = F.lit(None).cast("string")
    for dim, cols in dims.items():
        this = functools.reduce(lambda a, b: a & b, [F.col(f"_g_{c}") == 0 for c in cols])
        name = F.when(this, F.lit(dim)).otherwise(name)
        value = F.when(this, F.concat_ws("/", *(F.coalesce(F.col(c), F.lit("")) for c in cols))).otherwise(value)
    out = _with_quantiles(grouped.withColumn("dimension", name).withColumn("dimension_value", value))
    return out.select(*ROLLUP_COLUMNS)


def may_terminate_sql() -> Column:
    """`terminating.may_terminate` in Spark SQL: records with a terminating header saying true, or the
    termination metric's name in the push's bytes. Null where a header's value is null and no other part
    says true, which a filter and `count_if` take as false."""
    flag = "', '".join(TERMINATING_HEADERS)
    header = F.expr(f"exists(headers, h -> lower(h.key) IN ('{flag}') AND lower(CAST(h.value AS STRING)) = 'true')")
    return header | F.col("value").contains(F.lit(TERMINATING_METRIC))
