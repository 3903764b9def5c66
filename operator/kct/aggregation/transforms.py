"""Pure DataFrame -> DataFrame transforms of the aggregation job (Spark SQL only, no Python per row).

    points (decode.POINT_SCHEMA_DDL)
      └─ aggregate_client_metrics ─▶ client_metrics   one row per window x client instance x series
            ├─ rollups ──────────────▶ rollups          per client id / software name+version / principal
            └─ alerts ───────────────▶ alerts           threshold rules over consecutive windows
    points ─ terminations ──────────▶ terminations     one row per terminating push

`aggregate_client_metrics` aggregates every window its points touch; it is a batch transform, and so are
`rollups`, `terminations` and `alerts`. The streaming job (kct.aggregation.stream) passes it only the points
of the windows a micro-batch finalizes, plus each series' last point from earlier micro-batches.

Counter deltas need the previous point of a series, which may sit in an earlier window (or an earlier
micro-batch). Two levels: one aggregation per (window, series) adds up the increments between the window's
own consecutive points; then a `lag` over those per-window rows pairs each window's first point with the
series' previous point (the last point of an earlier window at most `lookback` windows back, or the
stream's state):

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


_POINT = ("named_struct('t', time_unix_nano, 's', start_time_unix_nano, 'v', value, 'c', count, 'h', sum, "
          "'b', bucket_counts)")
# Within one window's sorted cumulative points `_seq`: is pair (i - 1, i) a reset (the level dropped or
# the start time changed), and what point i adds over point i - 1.
_PAIR_RESET = ("(IF(type = 'histogram', _seq[i].c < _seq[i - 1].c, _seq[i].v < _seq[i - 1].v) "
               "OR _seq[i].s != _seq[i - 1].s)")
_IN_WINDOW_SUM = (
    "aggregate(filter(sequence(0, size(_seq) - 1), i -> i > 0), named_struct('v', 0D, 'r', 0), "
    f"(acc, i) -> IF(monotonic AND {_PAIR_RESET}, named_struct('v', acc.v + _seq[i].v, 'r', acc.r + 1), "
    "named_struct('v', acc.v + _seq[i].v - _seq[i - 1].v, 'r', acc.r)))"
)
_IN_WINDOW_HISTOGRAM = (
    "aggregate(filter(sequence(0, size(_seq) - 1), i -> i > 0), "
    "named_struct('c', 0L, 'h', 0D, 'b', array_repeat(0L, size(_seq[0].b)), 'r', 0), "
    f"(acc, i) -> IF({_PAIR_RESET}, "
    "named_struct('c', acc.c + _seq[i].c, 'h', acc.h + coalesce(_seq[i].h, 0D), "
    "'b', zip_with(acc.b, _seq[i].b, (x, y) -> x + y), 'r', acc.r + 1), "
    "named_struct('c', acc.c + _seq[i].c - _seq[i - 1].c, "
    "'h', acc.h + coalesce(_seq[i].h, 0D) - coalesce(_seq[i - 1].h, 0D), "
    "'b', zip_with(acc.b, zip_with(_seq[i].b, _seq[i - 1].b, (x, y) -> x - y), (x, y) -> x + y), 'r', acc.r)))"
)


def _with_first_increment(level1: DataFrame, previous: DataFrame | None, size: int, lookback: int) -> DataFrame:
    """Level 2: each cumulative series' window row gets what its first point adds over the series' previous
    point, the last point of its previous window row (`lag` over the per-window rows, sorted by series and
    window) or, for a series' first window here, its last point in `previous` (the state a stream keeps
    across micro-batches, LAST_POINT_COLUMNS). That point counts only when it lies at most `lookback`
    windows before the window; otherwise the first point is the first seen: its whole value counts when
    its start time is recent (a new client), nothing when older (a long-running client seen late)."""
    rows = level1.withColumn("_seed", F.lit(False))
    if previous is not None:
        seeds = _with_bounds_key(previous).select(
            _ws_expr(size).alias("_ws"), *_GROUP_KEYS, F.expr(_POINT).alias("_last"), F.lit(True).alias("_seed"))
        rows = rows.unionByName(seeds, allowMissingColumns=True)
    series = Window.partitionBy(*_GROUP_KEYS).orderBy("_ws")
    rows = rows.withColumn("_prev", F.lag("_last").over(series)).where(~F.col("_seed")).drop("_seed")
    horizon_ns = f"((_ws - {lookback * size}) * 1000000000L)"
    usable = f"(_prev IS NOT NULL AND _prev.t >= {horizon_ns})"
    fresh = f"(_first.s > 0 AND _first.s >= {horizon_ns})"
    monotonic = "(type = 'histogram' OR monotonic)"
    dropped = "IF(type = 'histogram', _first.c < _prev.c, _first.v < _prev.v)"
    reset = f"({usable} AND ({dropped} OR _first.s != _prev.s))"
    whole = f"((NOT {usable} AND {fresh} AND {monotonic}) OR ({reset} AND {monotonic}))"
    return (
        rows.withColumn("_whole", F.expr(whole)).withColumn("_usable", F.expr(usable))
        .withColumn("_reset0", F.expr(f"IF({reset} AND {monotonic}, 1, 0)"))
        .withColumn("_first_inc", F.expr(
            "named_struct("
            "'v', CASE WHEN _whole THEN _first.v WHEN _usable THEN _first.v - _prev.v ELSE 0D END, "
            "'c', CASE WHEN _whole THEN _first.c WHEN _usable THEN _first.c - _prev.c ELSE 0L END, "
            "'h', CASE WHEN _whole THEN coalesce(_first.h, 0D) "
            "WHEN _usable THEN coalesce(_first.h, 0D) - coalesce(_prev.h, 0D) ELSE 0D END, "
            "'b', CASE WHEN type != 'histogram' THEN NULL WHEN _whole THEN _first.b "
            "WHEN _usable THEN zip_with(_first.b, _prev.b, (x, y) -> x - y) "
            "ELSE array_repeat(0L, size(_first.b)) END)"))
    )


def aggregate_client_metrics(points: DataFrame, *, window_seconds: int = 60, lookback_windows: int = 5,
                             previous: DataFrame | None = None) -> DataFrame:
    """Data points -> one row per (window, client instance, metric, data-point attributes), every window
    the points touch (a stream passes only the points of windows it finalizes, see `kct.aggregation.stream`).

    Two levels, no point copied into other windows. Level 1, one aggregation per (window, series):
    last/min/max/avg, sums, and for cumulative series the window's points (time, start, value, count,
    sum, buckets; a handful per window) whose consecutive increments are added up in the window. Level 2,
    on that much smaller table: each window's first point against the series' previous point
    (`_with_first_increment`). `previous` holds the series' last points from before these
    (LAST_POINT_COLUMNS), so deltas stay exact across micro-batches.
    """
    size, lookback = int(window_seconds), int(lookback_windows)
    df = _with_bounds_key(points).withColumn("_ws", _ws_expr(size))
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
        F.collect_list(F.when(_cumulative(), F.expr(_POINT))).alias("_pts"),
        _sum_arrays(F.when(~_cumulative(), F.col("bucket_counts"))).alias("_buckets"),
    ]
    level1 = (
        df.groupBy("_ws", *_GROUP_KEYS).agg(*aggs)
        .withColumn("_seq", F.expr("IF(size(_pts) = 0, NULL, array_sort(_pts))"))
        .withColumn("_first", F.expr("_seq[0]"))
        .withColumn("_last", F.expr("element_at(_seq, -1)"))
        .withColumn("_in_sum", F.expr(f"IF(_seq IS NULL OR type != 'sum', NULL, {_IN_WINDOW_SUM})"))
        .withColumn("_in_hist", F.expr(f"IF(_seq IS NULL OR type != 'histogram', NULL, {_IN_WINDOW_HISTOGRAM})"))
        .drop("_pts", "_seq")
    )
    return _finish(_with_first_increment(level1, previous, size, lookback), size)


def _finish(agg: DataFrame, size: int) -> DataFrame:
    is_cum = F.col("temporality") == "cumulative"
    is_sum, is_hist = F.col("type") == "sum", F.col("type") == "histogram"
    snapshot = F.col("type").isin("exponential_histogram", "summary")
    last_snapshot = is_cum | (F.col("type") == "summary")
    # Cumulative series: the first point's increment (level 2) plus the window's own (level 1).
    cum = is_cum & (is_sum | is_hist)
    delta = F.when(is_sum & is_cum, F.expr("_first_inc.v + _in_sum.v")).when(is_sum, F.col("_value_sum"))
    resets = F.when(cum, F.expr("_reset0 + coalesce(_in_sum.r, _in_hist.r)")).when(is_sum | is_hist, F.lit(0))
    count = F.when(is_hist & is_cum, F.expr("_first_inc.c + _in_hist.c")).when(is_hist, F.col("_count_sum")).when(
        snapshot, F.when(last_snapshot, F.col("_count_last")).otherwise(F.col("_count_sum")))
    total = F.when(is_hist & is_cum, F.expr("_first_inc.h + _in_hist.h")).when(
        is_hist, F.coalesce(F.col("_sum_sum"), F.lit(0.0))).when(
        snapshot, F.when(last_snapshot, F.col("_sum_last")).otherwise(F.col("_sum_sum")))
    buckets = F.when(is_hist & is_cum, F.expr("zip_with(_first_inc.b, _in_hist.b, (x, y) -> x + y)")).when(
        is_hist, F.col("_buckets"))
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

