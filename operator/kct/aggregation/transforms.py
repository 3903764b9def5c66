"""Pure DataFrame -> DataFrame transforms of the job's tables besides client_metrics, and the tables' columns.

    client_metrics (kct.aggregation.client_windows, on the JVM)
      ├─ rollups (kct.aggregation.rollups_jvm) ─▶ rollups   per client id / software name+version / principal
      ├─ workload_rollups (rollups_jvm) ─────────▶ workload_rollups   per namespace + workload kind + name
      ├─ alerts ─────────────────────────────────▶ alerts    threshold rules over consecutive windows
      └─ hourly ─────────────────────────────────▶ client_metrics_hourly
    points (decode.jvm_points) ─ terminations ──▶ terminations   one row per terminating push

client_metrics and the roll-ups are computed on the JVM (ClientWindows and Rollups of the decoder jar); their
columns, series keys, quantiles and roll-up dimensions are defined here, where `hourly`, `alerts` and the
JVM calls read them. How a counter's delta, a reset and a first-seen series are counted is described in
docs/architecture.md; tests/aggregation_oracle holds the same computation in Spark SQL, the oracle the JVM
code is checked against. Quantiles are estimated by linear interpolation within the bucket that holds the
rank (the first bucket's lower edge is 0 or its upper bound if negative; the overflow bucket's upper edge is
the highest finite bound), here for `hourly` and in Java for the rest: the same doubles.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from kct.aggregation.config import ThresholdRule
from kct.aggregation.decode import LABEL_COLUMNS  # the broker labels the decoder emits, one column each
from kct.aggregation.workloads import WORKLOAD_COLUMNS, WORKLOAD_KEY_COLUMNS, workload_sql

__all__ = [
    "CLIENT_METRICS_COLUMNS",
    "JVM_CLIENT_METRICS_COLUMNS",
    "LABEL_COLUMNS",
    "LAST_POINT_COLUMNS",
    "QUANTILES",
    "ROLLUP_COLUMNS",
    "ROLLUP_DIMENSIONS",
    "SERIES_KEYS",
    "WORKLOAD_COLUMNS",
    "WORKLOAD_KEY_COLUMNS",
    "WORKLOAD_ROLLUP_COLUMNS",
    "alerts",
    "hourly",
    "terminations",
    "with_quantiles",
    "with_workload_columns",
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
ROLLUP_COLUMNS: tuple[str, ...] = (
    "window_start", "window_end", "date", "dimension", "dimension_value", "metric", "unit", "type",
    "temporality", "attributes", "attributes_key", "instances", "points", "value_last_sum", "value_min",
    "value_max", "value_avg", "delta", "rate", "resets", "count", "sum", "explicit_bounds", "bucket_counts",
    "p50", "p95", "p99",
)
# The per-workload roll-up: the roll-ups' columns with the workload in three columns for the dimension's two.
WORKLOAD_ROLLUP_COLUMNS: tuple[str, ...] = (
    *ROLLUP_COLUMNS[:3], *WORKLOAD_KEY_COLUMNS, *ROLLUP_COLUMNS[ROLLUP_COLUMNS.index("metric"):],
)
CLIENT_METRICS_COLUMNS: tuple[str, ...] = (
    "window_start", "window_end", "date", "client_instance_id", *LABEL_COLUMNS, "resource_attributes",
    *WORKLOAD_COLUMNS, "metric", "unit", "type", "temporality", "monotonic", "attributes", "attributes_key", "points",
    "last_time", "value_last", "value_min", "value_max", "value_avg", "delta", "rate", "resets", "count",
    "sum", "explicit_bounds", "bucket_counts", "p50", "p95", "p99",
)

# ClientWindows' columns (the JVM's rows): client_metrics' but the workload columns, which
# `with_workload_columns` derives from `resource_attributes`.
JVM_CLIENT_METRICS_COLUMNS: tuple[str, ...] = tuple(c for c in CLIENT_METRICS_COLUMNS if c not in WORKLOAD_COLUMNS)


def with_workload_columns(df: DataFrame, columns: Sequence[str] = CLIENT_METRICS_COLUMNS) -> DataFrame:
    """`columns` of `df`, the WORKLOAD_COLUMNS among them computed from its `resource_attributes`
    (kct.aggregation.workloads); one projection."""
    sql = workload_sql()
    return df.select(*(F.expr(sql[c]).alias(c) if c in sql else F.col(c) for c in columns))


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
    count reaches it, and the estimate interpolates linearly inside that bucket. One expression: each
    intermediate value (the total, the cumulative counts, each quantile's bucket index) is computed once and
    bound to a lambda variable (`transform(array(value), name -> ...)[0]`), so it is neither repeated in
    the expression tree (planning it cost about a second per job) nor a column of its own (each one was a
    projection copying every row: ~1.7 CPU-seconds for 180k client_metrics rows, most of them no histogram).
    """
    usable = f"{counts} IS NOT NULL AND {bounds} IS NOT NULL AND size({bounds}) > 0"

    def let(value: str, name: str, body: str) -> str:
        return f"transform(array({value}), {name} -> {body})[0]"

    def quantile(q: float) -> str:
        target = f"({q} * _q_total)"
        lower = f"IF(_q_i = 0, LEAST(0D, get({bounds}, 0)), get({bounds}, _q_i - 1))"
        upper = f"IF(_q_i >= size({bounds}), get({bounds}, size({bounds}) - 1), get({bounds}, _q_i))"
        below = "IF(_q_i = 0, 0L, get(_q_cum, _q_i - 1))"
        value = let(lower, "_q_lo", let(upper, "_q_hi", f"_q_lo + (_q_hi - _q_lo) * (({target} - {below}) / "
                                                         f"get({counts}, _q_i))"))
        return let(f"array_position(transform(_q_cum, x -> x >= {target}), true) - 1", "_q_i", value)

    per_quantile = ", ".join(f"'{name}', CAST({quantile(q)} AS DOUBLE)" for name, q in QUANTILES)
    cumulative = f"transform({counts}, (x, i) -> aggregate(slice({counts}, 1, i + 1), 0L, (a, y) -> a + y))"
    estimates = let(f"IF({usable}, aggregate({counts}, 0L, (a, y) -> a + y), NULL)", "_q_total",
                    f"IF(_q_total > 0, {let(cumulative, '_q_cum', f'named_struct({per_quantile})')}, NULL)")
    # Rows without buckets (all but histograms) skip the lambdas, which Spark interprets row by row (no code
    # generation for higher-order functions): `estimates` is null for them anyway.
    df = df.withColumn("_q", F.expr(f"CASE WHEN {counts} IS NULL THEN NULL ELSE {estimates} END"))
    for name, _ in QUANTILES:
        df = df.withColumn(name, F.col(f"_q.{name}"))
    return df.drop("_q")


def with_quantiles(df: DataFrame) -> DataFrame:
    """Columns p50/p95/p99 from `bucket_counts` and `explicit_bounds` (`_with_quantiles`), for rows built
    elsewhere (kct.aggregation.client_windows) to get the very same doubles."""
    return _with_quantiles(df)


def _sum_arrays(col: str | Column) -> Column:
    """Element-wise sum of the arrays collected from `col` (one bucket layout per group)."""
    return F.aggregate(
        F.collect_list(col), F.lit(None).cast("array<bigint>"),
        lambda acc, b: F.when(acc.isNull(), b).otherwise(F.zip_with(acc, b, lambda x, y: x + y)),
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
    # The workload from the newest resource attributes, as client_metrics derives it (also for rows written
    # before client_metrics had the columns).
    return with_workload_columns(_with_quantiles(out))


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

