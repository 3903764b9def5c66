"""The roll-ups table on the JVM: client_metrics merged per window, dimension value and series.

One Java class of the decoder jar (`JVM_CLASS`) merges each partition's client_metrics rows into partial
aggregates per (window, dimension value, series key) in a hash map, Spark shuffles those, and a second merge
finishes them, quantiles included (ClientWindows' code). Rows that one task merges in reasonable time
(`ROLLUP_ROWS_PER_TASK`) are read by one task and merged once, without partial rows or a shuffle: a
dimension's value (a client id) is spread over every partition by instance id, so the first merge leaves
many partial rows (1M points: 107,100 from 180,000 rows, for 46,800 roll-ups), each built, shuffled and
merged again. Spark SQL's grouping sets (an Expand and an ObjectHashAggregate, ~28 % of a warm batch run's
task CPU) compute the same rows in the tests' oracle (tests/aggregation_oracle/sql_engine.py), which
tests/unit/aggregation/test_rollups_jvm.py holds this to (doubles summed in another order).
"""

from __future__ import annotations

from typing import Any, Final

from pyspark.sql import DataFrame

from kct.aggregation.client_windows import quantile_spec
from kct.aggregation.transforms import ROLLUP_COLUMNS, ROLLUP_DIMENSIONS

__all__ = ["JVM_CLASS", "ROLLUP_ROWS_PER_TASK", "dimension_spec", "rollups_of", "rollups_on_jvm"]

JVM_CLASS: Final = "dev.kct.otlp.Rollups"
# client_metrics rows whose roll-ups one task merges (`rollups_on_jvm`'s `in_one_task`): more are merged in two
# steps around a shuffle. One task over 180,000 rows (1M points) took 0.47-0.58 task CPU-s with its write where
# two merges took 0.81-0.84 (bench/spark_throughput.py). Its hash map then holds the groups of up to this many
# rows, as a first-merge task of a one-file write (outputs.ROWS_PER_FILE) over 4 shuffle partitions did.
ROLLUP_ROWS_PER_TASK: Final = 500_000


def dimension_spec(dimensions: dict[str, tuple[str, ...]]) -> str:
    """The dimensions as the Java class reads them: `name:column,column;...`, in order."""
    for name, cols in dimensions.items():
        if not cols or any(c == "" or set(c) & set(":;,") for c in (name, *cols)):
            raise ValueError(f"roll-up dimension {name!r} {cols!r}: names must be non-empty, without : ; ,")
    return ";".join(f"{name}:{','.join(cols)}" for name, cols in dimensions.items())


def rollups_on_jvm(client_metrics: Any, dimensions: dict[str, tuple[str, ...]] | None = None, *,
                   in_one_task: bool = False) -> Any:
    """client_metrics -> the rollups rows (transforms.ROLLUP_COLUMNS) per dimension (default:
    `transforms.ROLLUP_DIMENSIONS`): counters' deltas and rates summed over instances; gauges' last values
    summed, min of mins, max of maxes, mean of means; histograms' buckets, counts and sums merged, quantiles
    recomputed; `instances` counts the rows merged. `in_one_task`: merged once, by one task (for as many
    rows as one task should take), else in two merges around a shuffle. Needs the decoder jar on the
    session's classpath."""
    spark = client_metrics.sparkSession
    jdf = spark._jvm.dev.kct.otlp.Rollups.rollups(
        client_metrics._jdf, dimension_spec(dimensions or ROLLUP_DIMENSIONS), quantile_spec(), in_one_task)
    rows = DataFrame(jdf, spark)
    if tuple(rows.columns) != ROLLUP_COLUMNS:  # the jar and this checkout disagree
        raise RuntimeError(f"{JVM_CLASS} returned columns {rows.columns}, expected {ROLLUP_COLUMNS}")
    return rows


def rollups_of(client_metrics: Any, rows: int) -> Any:
    """The job's roll-ups of `rows` client_metrics rows: in one task up to ROLLUP_ROWS_PER_TASK rows."""
    return rollups_on_jvm(client_metrics, in_one_task=rows <= ROLLUP_ROWS_PER_TASK)
