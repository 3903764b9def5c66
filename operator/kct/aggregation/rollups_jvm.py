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
from pyspark.sql import functions as F

from kct.aggregation.client_windows import quantile_spec
from kct.aggregation.transforms import (
    ROLLUP_COLUMNS,
    ROLLUP_DIMENSIONS,
    WORKLOAD_KEY_COLUMNS,
    WORKLOAD_ROLLUP_COLUMNS,
)

__all__ = [
    "JVM_CLASS",
    "ROLLUP_ROWS_PER_TASK",
    "dimension_spec",
    "rollups_of",
    "rollups_on_jvm",
    "workload_rollups_of",
]

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


# The workload as the roll-up's one dimension column: its three columns as a JSON array, read back exactly (a
# name given by an attribution rule may hold the '/' the Java class joins a dimension's columns with; JSON also
# keeps a null apart from an empty string).
_WORKLOAD_KEY: Final = "_workload"


def workload_rollups_of(client_metrics: Any, rows: int) -> Any:
    """The per-workload roll-up (transforms.WORKLOAD_ROLLUP_COLUMNS) of `rows` client_metrics rows: every
    instance of one workload (namespace, kind, name) merged per window and series as `rollups_on_jvm` merges a
    dimension's (counters' deltas and rates summed, gauges' min of mins, max of maxes, mean of means,
    histograms merged), `instances` the clients merged. Unattributed clients roll up under null kind and name
    (per namespace when a rule gave one)."""
    keyed = client_metrics.withColumn(_WORKLOAD_KEY, F.to_json(F.array(*WORKLOAD_KEY_COLUMNS)))
    merged = rollups_on_jvm(keyed, {"workload": (_WORKLOAD_KEY,)}, in_one_task=rows <= ROLLUP_ROWS_PER_TASK)
    key = F.from_json("dimension_value", "array<string>")
    return merged.select(*(key.getItem(WORKLOAD_KEY_COLUMNS.index(c)).alias(c) if c in WORKLOAD_KEY_COLUMNS
                           else F.col(c) for c in WORKLOAD_ROLLUP_COLUMNS))
