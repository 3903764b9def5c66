"""Pure DataFrame -> DataFrame transforms of the aggregation job (Spark SQL only, no Python per row).

    points (decode.POINT_SCHEMA_DDL)
      └─ aggregate_client_metrics ─▶ client_metrics   one row per window x client instance x series
            ├─ rollups ──────────────▶ rollups          per client id / software name+version / principal
            └─ alerts ───────────────▶ alerts           threshold rules over consecutive windows
    points ─ terminations ──────────▶ terminations     one row per terminating push

`aggregate_client_metrics` is a single streaming aggregation (watermark + tumbling window), so the same
function runs in Structured Streaming (append mode) and in batch (tests, backfills). `rollups`,
`terminations` and `alerts` are batch transforms: the streaming job applies them in `foreachBatch` to each
micro-batch of finalized windows (in append mode every row of a window leaves the aggregation in the same
micro-batch, so per-batch roll-ups are complete).

Counter deltas need the previous point of a series, which may sit in an earlier window (or an earlier
micro-batch). Instead of a per-series state store in Python, every point of a cumulative series is also
sent, as a "carry" row, to the next `lookback` windows. A window then sees its own points plus the latest
earlier point of the series (the carry with the highest time), and the delta is computed in Spark SQL over
the consecutive pairs (carry, p1, p2, ...):

    increment(prev, cur) = cur.value              if cur.value < prev.value or cur.start != prev.start
                                                  (counter reset: it restarted from 0 at cur.start)
                         = cur.value - prev.value otherwise

A series seen for the first time (no carry) contributes its whole value when its start time lies within
the lookback horizon (the counter started recently, so everything it counted happened since) and is only
a baseline otherwise (a long-running client we started watching late: its lifetime total is not put into
one window). Delta-temporality sums are summed; cumulative histograms get the same pairwise treatment,
bucket by bucket. The cost is `lookback` extra rows per cumulative point, all inside one JVM aggregation;
the state stays bounded by the watermark. Carry rows also move the event-time maximum ahead by up to
`lookback` windows, so the watermark delay is widened by as much: late points are still accepted for
`watermark_seconds` (measured at window granularity: a point is late when its window starts before the
newest window minus the delay), and a window is emitted `watermark + lookback x size` after it ends.
Gauges are last/min/max/avg; histograms get p50/p95/p99 by
linear interpolation within the bucket that holds the rank (the first bucket's lower edge is 0 or its
upper bound if negative; the overflow bucket's upper edge is the highest finite bound).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from kct.aggregation.config import ThresholdRule
from kct.aggregation.decode import LABEL_COLUMNS  # the broker labels the decoder emits, one column each

__all__ = [
    "CLIENT_METRICS_COLUMNS",
    "LABEL_COLUMNS",
    "LAST_POINT_COLUMNS",
    "QUANTILES",
    "ROLLUP_DIMENSIONS",
    "aggregate_client_metrics",
    "alerts",
    "hourly",
    "last_points",
    "rollups",
    "terminations",
]

SERIES_KEYS: tuple[str, ...] = (
    "client_instance_id", "metric", "type", "temporality", "monotonic", "attributes_key", "explicit_bounds",
)
QUANTILES: tuple[tuple[str, float], ...] = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))
ROLLUP_DIMENSIONS: dict[str, tuple[str, ...]] = {
    "client_id": ("client_id",),
    "client_software": ("client_software_name", "client_software_version"),
    "principal": ("principal",),
}
CLIENT_METRICS_COLUMNS: tuple[str, ...] = (
    "window_start", "window_end", "date", "client_instance_id", *LABEL_COLUMNS, "resource_attributes",
    "metric", "unit", "type", "temporality", "monotonic", "attributes", "attributes_key", "points",
    "last_time", "value_last", "value_min", "value_max", "value_avg", "delta", "rate", "resets", "count",
    "sum", "explicit_bounds", "bucket_counts", "p50", "p95", "p99",
)

# The series keys as grouped on: bucket bounds as a string (`_bk`), not as an array of doubles, which Spark
# would normalize element by element (-0.0, NaN) with an interpreted higher-order function on every row.
_GROUP_KEYS: tuple[str, ...] = tuple("_bk" if k == "explicit_bounds" else k for k in SERIES_KEYS)


def _with_bounds_key(df: DataFrame) -> DataFrame:
    return df.withColumn("_bk", F.col("explicit_bounds").cast("string"))


# What a stream keeps of each cumulative series between micro-batches: its newest point.
LAST_POINT_COLUMNS: tuple[str, ...] = (
    *SERIES_KEYS, "time_unix_nano", "start_time_unix_nano", "value", "count", "sum", "bucket_counts",
)


def _with_quantiles(df: DataFrame, counts: str = "bucket_counts", bounds: str = "explicit_bounds") -> DataFrame:
    """Columns p50/p95/p99: estimates from OTLP explicit-bucket counts (SQL column names `counts`, `bounds`).

    Bucket i holds (bounds[i-1], bounds[i]]; the rank q*total falls in the first bucket whose cumulative
    count reaches it, and the estimate interpolates linearly inside that bucket. Built in steps (total and
    cumulative counts once, then each quantile's bucket index, then its value), each step a column the
    next one reads: written as one expression, the cumulative counts were repeated ~8 times per quantile
    and planning that expression tree cost about a second per job.
    """
    usable = f"{counts} IS NOT NULL AND {bounds} IS NOT NULL AND size({bounds}) > 0"
    df = df.withColumn("_q_total", F.expr(f"IF({usable}, aggregate({counts}, 0L, (a, y) -> a + y), NULL)"))
    df = df.withColumn("_q_cum", F.expr(
        f"IF(_q_total > 0, transform({counts}, (x, i) -> aggregate(slice({counts}, 1, i + 1), 0L, (a, y) -> a + y)),"
        " NULL)"))
    for name, q in QUANTILES:
        target = f"({q} * _q_total)"
        df = df.withColumn("_q_i", F.expr(f"array_position(transform(_q_cum, x -> x >= {target}), true) - 1"))
        lower = f"IF(_q_i = 0, LEAST(0D, get({bounds}, 0)), get({bounds}, _q_i - 1))"
        upper = f"IF(_q_i >= size({bounds}), get({bounds}, size({bounds}) - 1), get({bounds}, _q_i))"
        below = "IF(_q_i = 0, 0L, get(_q_cum, _q_i - 1))"
        df = df.withColumn("_q_lo", F.expr(lower)).withColumn("_q_hi", F.expr(upper)).withColumn(
            name, F.expr(f"IF(_q_cum IS NULL, CAST(NULL AS DOUBLE), _q_lo + (_q_hi - _q_lo) * "
                         f"(({target} - {below}) / get({counts}, _q_i)))"))
    return df.drop("_q_total", "_q_cum", "_q_i", "_q_lo", "_q_hi")


def _ws_expr(size: int) -> Column:
    """The start (epoch seconds) of the `size`-second window holding each point."""
    return F.expr(f"(time_unix_nano div {size * 1_000_000_000}) * {size}")


def _cumulative() -> Column:
    return (F.col("temporality") == "cumulative") & F.col("type").isin("sum", "histogram")


def _with_increments(points: DataFrame, previous: DataFrame | None, size: int, lookback: int) -> DataFrame:
    """Each cumulative point with what it adds over the series' previous point (`_inc`, `_inc_c`, `_inc_h`,
    `_inc_b`) and whether it is a reset (`_reset`); other points pass with nulls.

    The previous point is the series' point just before in time (one sort of the cumulative points by
    series and time, `lag`), or, for a series' first point here, its last point in `previous` (the state a
    stream keeps across micro-batches, LAST_POINT_COLUMNS). It counts only when it lies at most `lookback`
    windows before the point's window; otherwise the point is the first seen.
    """
    cumulative = points.where(_cumulative()).withColumn("_seed", F.lit(False))
    others = points.where(~_cumulative())
    if previous is not None:
        seeds = previous.select(*(F.col(c) for c in LAST_POINT_COLUMNS), "_bk", "_ws", F.lit(True).alias("_seed"))
        cumulative = cumulative.unionByName(seeds, allowMissingColumns=True)
    series = Window.partitionBy(*_GROUP_KEYS).orderBy("time_unix_nano")
    for name, col in (("_pt", "time_unix_nano"), ("_ps", "start_time_unix_nano"), ("_pv", "value"),
                      ("_pc", "count"), ("_ph", "sum"), ("_pb", "bucket_counts")):
        cumulative = cumulative.withColumn(name, F.lag(col).over(series))
    horizon_s = F.col("_ws") - F.lit(lookback * size)
    usable = F.col("_pt").isNotNull() & ((F.col("_pt") / F.lit(1e9)) >= horizon_s)
    fresh = (F.col("start_time_unix_nano") > 0) & ((F.col("start_time_unix_nano") / F.lit(1e9)) >= horizon_s)
    is_hist = F.col("type") == "histogram"
    level = F.when(is_hist, F.col("count") < F.col("_pc")).otherwise(F.col("value") < F.col("_pv"))
    reset = usable & (level | (F.col("start_time_unix_nano") != F.col("_ps")))
    monotonic = is_hist | F.col("monotonic")
    # Non-monotonic cumulative sums (up-down counters) have no resets: their delta is the change.
    whole = (~usable & fresh & monotonic) | (reset & monotonic)
    zeros = F.expr("array_repeat(0L, size(bucket_counts))")
    cumulative = (
        cumulative.withColumn("_reset", F.when(reset & monotonic, 1).otherwise(0))
        .withColumn("_inc", F.when(whole, F.col("value")).when(usable, F.col("value") - F.col("_pv"))
                    .otherwise(F.lit(0.0)))
        .withColumn("_inc_c", F.when(whole, F.col("count")).when(usable, F.col("count") - F.col("_pc"))
                    .otherwise(F.lit(0)))
        .withColumn("_inc_h", F.when(whole, F.coalesce("sum", F.lit(0.0)))
                    .when(usable, F.coalesce("sum", F.lit(0.0)) - F.coalesce("_ph", F.lit(0.0)))
                    .otherwise(F.lit(0.0)))
        .withColumn("_inc_b", F.when(~is_hist, F.lit(None)).when(whole, F.col("bucket_counts"))
                    .when(usable, F.expr("zip_with(bucket_counts, _pb, (x, y) -> x - y)")).otherwise(zeros))
        .where(~F.col("_seed"))
        .drop("_seed", "_pt", "_ps", "_pv", "_pc", "_ph", "_pb")
    )
    return cumulative.unionByName(others, allowMissingColumns=True)


def aggregate_client_metrics(points: DataFrame, *, window_seconds: int = 60, lookback_windows: int = 5,
                             previous: DataFrame | None = None) -> DataFrame:
    """Data points -> one row per (window, client instance, metric, data-point attributes), every window
    the points touch (a stream passes only the points of windows it finalizes, see `kct.aggregation.stream`).

    Two levels: cumulative points first get their increment over the series' previous point (one sort of
    those points, `_with_increments`), then one aggregation per (window, series) sums increments and takes
    last/min/max/avg; no point is copied into other windows. `previous` holds the series' last points from
    before these (LAST_POINT_COLUMNS), so deltas stay exact across micro-batches.
    """
    size, lookback = int(window_seconds), int(lookback_windows)
    df = _with_bounds_key(points).withColumn("_ws", _ws_expr(size))
    if previous is not None:
        previous = _with_bounds_key(previous).withColumn("_ws", _ws_expr(size))
    df = _with_increments(df, previous, size, lookback)
    at = F.col("time_unix_nano")
    described = F.struct(*LABEL_COLUMNS, "unit", "attributes", "resource_attributes", "explicit_bounds")
    aggs: list[Column] = [
        F.count(F.lit(1)).alias("points"),
        F.max_by(described, at).alias("_d"),
        F.max("time").alias("last_time"),
        F.max_by("value", at).alias("value_last"),
        F.min("value").alias("value_min"),
        F.max("value").alias("value_max"),
        F.avg("value").alias("value_avg"),
        F.sum("value").alias("_value_sum"),
        F.sum("count").alias("_count_sum"),
        F.sum("sum").alias("_sum_sum"),
        F.max_by("count", at).alias("_count_last"),
        F.max_by("sum", at).alias("_sum_last"),
        F.sum("_inc").alias("_inc"),
        F.sum("_inc_c").alias("_inc_c"),
        F.sum("_inc_h").alias("_inc_h"),
        F.sum("_reset").alias("_resets"),
        _sum_arrays(F.coalesce(F.col("_inc_b"), F.col("bucket_counts"))).alias("_buckets"),
    ]
    agg = df.groupBy("_ws", *_GROUP_KEYS).agg(*aggs)
    return _finish(agg, size)


def _finish(agg: DataFrame, size: int) -> DataFrame:
    is_cum = F.col("temporality") == "cumulative"
    is_sum, is_hist = F.col("type") == "sum", F.col("type") == "histogram"
    snapshot = F.col("type").isin("exponential_histogram", "summary")
    last_snapshot = is_cum | (F.col("type") == "summary")
    delta = F.when(is_sum & is_cum, F.col("_inc")).when(is_sum, F.col("_value_sum"))
    resets = F.when(is_cum & (is_sum | is_hist), F.col("_resets")).when(is_sum | is_hist, F.lit(0))
    count = F.when(is_hist & is_cum, F.col("_inc_c")).when(is_hist, F.col("_count_sum")).when(
        snapshot, F.when(last_snapshot, F.col("_count_last")).otherwise(F.col("_count_sum")))
    total = F.when(is_hist & is_cum, F.col("_inc_h")).when(is_hist, F.coalesce(F.col("_sum_sum"), F.lit(0.0))).when(
        snapshot, F.when(last_snapshot, F.col("_sum_last")).otherwise(F.col("_sum_sum")))
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
        .withColumn("bucket_counts", F.when(is_hist, F.col("_buckets")))
    )
    for name in (*LABEL_COLUMNS, "unit", "attributes", "resource_attributes", "explicit_bounds"):
        df = df.withColumn(name, F.col(f"_d.{name}"))
    for name in ("value_last", "value_min", "value_max", "value_avg"):
        df = df.withColumn(name, F.when(~not_value, F.col(name)))
    return _with_quantiles(df).select(*CLIENT_METRICS_COLUMNS)


def last_points(points: DataFrame, previous: DataFrame | None = None) -> DataFrame:
    """Each cumulative series' newest point (LAST_POINT_COLUMNS) among `points` and `previous`: the state a
    stream carries to the next micro-batch so the next window's delta starts from it."""
    cols = [F.col(c) for c in LAST_POINT_COLUMNS]
    df = points.where(_cumulative()).select(*cols)
    if previous is not None:
        df = df.unionByName(previous.select(*cols))
    keys = [k for k in _GROUP_KEYS if k != "_bk"]
    newest = F.max_by(F.struct(*(c for c in LAST_POINT_COLUMNS if c not in keys)), "time_unix_nano")
    return _with_bounds_key(df).groupBy(*keys, "_bk").agg(newest.alias("_p")).select(*keys, "_p.*")


def _sum_arrays(col: str | Column) -> Column:
    """Element-wise sum of the arrays collected from `col` (one bucket layout per group)."""
    return F.aggregate(
        F.collect_list(col), F.lit(None).cast("array<bigint>"),
        lambda acc, b: F.when(acc.isNull(), b).otherwise(F.zip_with(acc, b, lambda x, y: x + y)),
    )


def rollups(client_metrics: DataFrame, dimensions: dict[str, tuple[str, ...]] | None = None) -> DataFrame:
    """Per-window aggregates of client_metrics per client id, software name/version and principal.

    Counters: deltas and rates summed over instances. Gauges: sum of the instances' last values, min of
    mins, max of maxes, mean of means. Histograms: buckets, counts and sums merged, quantiles recomputed.
    All dimensions come out of one aggregation (grouping sets: one shuffle, not one per dimension).
    `instances` counts the client_metrics rows merged: one per client instance, since a series' row is
    unique per window and instance (type, temporality and bounds are grouped on, unit and monotonicity
    belong to the metric).
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
    return out.select(
        "window_start", "window_end", "date", "dimension", "dimension_value", "metric", "unit", "type",
        "temporality", "attributes", "attributes_key", "instances", "points", "value_last_sum", "value_min",
        "value_max", "value_avg", "delta", "rate", "resets", "count", "sum", "explicit_bounds", "bucket_counts",
        "p50", "p95", "p99",
    )


def hourly(client_metrics: DataFrame, hours: int = 1) -> DataFrame:
    """client_metrics rows (any window size) re-aggregated into windows of `hours` hours, same columns.

    Deltas, counts, sums and buckets add up; rate = delta / window; last is the newest window's last;
    avg is weighted by points; quantiles are recomputed from the merged buckets. Exponential histograms
    and summaries (count and sum are snapshots there) keep the newest window's values.
    """
    size = 3600 * int(hours)
    w = F.window("window_start", f"{size} seconds")
    newest = F.col("window_start")
    snapshot = F.col("type").isin("exponential_histogram", "summary")
    grouped = _with_bounds_key(client_metrics).groupBy(w.alias("w"), *_GROUP_KEYS).agg(
        *(F.max_by(c, newest).alias(c)
          for c in (*LABEL_COLUMNS, "unit", "attributes", "resource_attributes", "explicit_bounds")),
        F.sum("points").alias("points"),
        F.max("last_time").alias("last_time"),
        F.max_by("value_last", newest).alias("value_last"),
        F.min("value_min").alias("value_min"),
        F.max("value_max").alias("value_max"),
        (F.sum(F.col("value_avg") * F.col("points")) / F.sum(F.when(F.col("value_avg").isNotNull(), F.col("points"))))
        .alias("value_avg"),
        F.sum("delta").alias("delta"),
        F.sum("resets").alias("resets"),
        F.when(F.max(snapshot), F.max_by("count", newest)).otherwise(F.sum("count")).alias("count"),
        F.when(F.max(snapshot), F.max_by("sum", newest)).otherwise(F.sum("sum")).alias("sum"),
        _sum_arrays("bucket_counts").alias("bucket_counts"),
    )
    out = (
        grouped.withColumn("window_start", F.col("w.start"))
        .withColumn("window_end", F.col("w.end"))
        .withColumn("date", F.date_format(F.col("w.start"), "yyyy-MM-dd"))
        .withColumn("rate", F.col("delta") / F.lit(float(size)))
    )
    return _with_quantiles(out).select(*CLIENT_METRICS_COLUMNS)


def terminations(points: DataFrame) -> DataFrame:
    """One row per terminating push: the instance, its labels, when, and the `client.terminating` reason."""
    is_reason = F.col("metric").endswith("client.terminating")
    reason_time = F.when(is_reason, F.col("time_unix_nano"))
    df = points.where(F.col("terminating") | is_reason).groupBy("client_instance_id", "topic", "partition", "offset")
    out = df.agg(
        *(F.max_by(c, F.col("time_unix_nano")).alias(c) for c in LABEL_COLUMNS),
        F.max("terminating").alias("terminating"),
        F.max("time").alias("terminated_at"),
        F.max_by(F.col("attributes").getItem("reason"), reason_time).alias("reason"),
    )
    return out.withColumn("date", F.date_format("terminated_at", "yyyy-MM-dd")).select(
        "terminated_at", "date", "client_instance_id", *LABEL_COLUMNS, "terminating", "reason", "topic",
        "partition", "offset",
    )


_OPS = {">": "__gt__", ">=": "__ge__", "<": "__lt__", "<=": "__le__"}
# Rule fields -> client_metrics columns.
RULE_FIELDS = {"last": "value_last", "min": "value_min", "max": "value_max", "avg": "value_avg", "delta": "delta",
               "rate": "rate", "p50": "p50", "p95": "p95", "p99": "p99"}


def alerts(client_metrics: DataFrame, rules: Sequence[ThresholdRule]) -> DataFrame | None:
    """Rows for every window in which a rule has held for longer than its `forSeconds`.

    A breach run is a sequence of consecutive windows (each starting where the previous ended) of one
    series whose `field` satisfies the rule; `breach_seconds` counts from the start of the run's first
    window to the end of the current one, so resolution is the window size. One row per firing window:
    an alert manager reads the newest, and a run's first row says when it started firing.
    """
    if not rules:
        return None
    series = ("client_instance_id", "metric", "attributes_key")
    parts: list[DataFrame] = []
    for rule in rules:
        value = F.col(RULE_FIELDS[rule.field]).cast("double")
        breach = getattr(value, _OPS[rule.op])(F.lit(float(rule.threshold)))
        df = client_metrics.where(F.col("metric") == rule.metric).withColumn("value", value).where(
            F.col("value").isNotNull()
        ).withColumn("_breach", breach)
        w = Window.partitionBy(*series).orderBy("window_start")
        new_run = F.col("_breach") & (
            F.lag("_breach").over(w).isNull()
            | ~F.lag("_breach").over(w)
            | (F.lag("window_end").over(w) != F.col("window_start"))
        )
        running = w.rowsBetween(Window.unboundedPreceding, 0)
        df = df.withColumn("_run", F.sum(F.when(new_run, 1).otherwise(0)).over(running))
        df = df.where("_breach").withColumn(
            "breach_started_at", F.min("window_start").over(Window.partitionBy(*series, "_run"))
        ).withColumn("breach_seconds", F.col("window_end").cast("long") - F.col("breach_started_at").cast("long"))
        parts.append(
            df.where(F.col("breach_seconds") > rule.for_seconds).select(
                F.lit(rule.name).alias("rule"), F.lit(rule.severity).alias("severity"),
                "window_start", "window_end", "date", "client_instance_id", *LABEL_COLUMNS, "metric", "attributes",
                "attributes_key", F.lit(rule.field).alias("field"), F.lit(rule.op).alias("op"),
                F.lit(float(rule.threshold)).alias("threshold"), F.lit(rule.for_seconds).alias("for_seconds"),
                "value", "breach_started_at", "breach_seconds",
            )
        )
    out = parts[0]
    for part in parts[1:]:
        out = out.unionByName(part)
    return out

