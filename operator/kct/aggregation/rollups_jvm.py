"""The roll-ups table on the JVM: `transforms.rollups` without Spark SQL's Expand and ObjectHashAggregate.

`transforms.rollups` (the reference, and the path without the decoder jar) groups client_metrics by grouping
sets: Spark expands every row once per dimension and aggregates with an ObjectHashAggregate (`collect_list`
of the bucket counts, `first` of a map and an array), ~28 % of a warm `run_batch`'s task CPU. Here one
Java class of the decoder jar (`JVM_CLASS`) merges each partition's rows into partial aggregates per
(window, dimension value, series key) in a hash map, Spark shuffles those, and a second merge finishes them,
quantiles included (ClientWindows' code): the same rows and columns
(tests/unit/aggregation/test_rollups_jvm.py), doubles summed in another order. Rows that one task merges in
reasonable time (`in_one_task`) are read by one task and merged once, without partial rows or a shuffle: a
dimension's value (a client id) is spread over every partition by instance id, so the first merge leaves
many partial rows (1M points: 107,100 from 180,000 rows, for 46,800 roll-ups), each built, shuffled and
merged again.
"""

from __future__ import annotations

from typing import Any, Final

from pyspark.sql import DataFrame

from kct.aggregation.client_windows import quantile_spec
from kct.aggregation.transforms import ROLLUP_COLUMNS, ROLLUP_DIMENSIONS

__all__ = ["JVM_CLASS", "dimension_spec", "rollups_on_jvm"]

JVM_CLASS: Final = "dev.kct.otlp.Rollups"


def dimension_spec(dimensions: dict[str, tuple[str, ...]]) -> str:
    """The dimensions as the Java class reads them: `name:column,column;...`, in order."""
    for name, cols in dimensions.items():
        if not cols or any(c == "" or set(c) & set(":;,") for c in (name, *cols)):
            raise ValueError(f"roll-up dimension {name!r} {cols!r}: names must be non-empty, without : ; ,")
    return ";".join(f"{name}:{','.join(cols)}" for name, cols in dimensions.items())


def rollups_on_jvm(client_metrics: Any, dimensions: dict[str, tuple[str, ...]] | None = None, *,
                   in_one_task: bool = False) -> Any:
    """client_metrics -> the rollups rows, as `transforms.rollups(client_metrics, dimensions)` computes them
    (default dimensions: `transforms.ROLLUP_DIMENSIONS`); `in_one_task`: merged once, by one task (for as
    many rows as one task should take), else in two merges around a shuffle. Needs the decoder jar on the
    session's classpath."""
    spark = client_metrics.sparkSession
    jdf = spark._jvm.dev.kct.otlp.Rollups.rollups(
        client_metrics._jdf, dimension_spec(dimensions or ROLLUP_DIMENSIONS), quantile_spec(), in_one_task)
    rows = DataFrame(jdf, spark)
    if tuple(rows.columns) != ROLLUP_COLUMNS:  # the jar and this checkout disagree
        raise RuntimeError(f"{JVM_CLASS} returned columns {rows.columns}, expected {ROLLUP_COLUMNS}")
    return rows
