"""client_metrics straight from the topic's records, on the JVM, without a row per data point: the job's engine.

The records are grouped per client instance with Spark's own shuffle (repartitioned by instance id, sorted by
it within partitions: the records move, ~100 points each, not a row per point with its labels), and one Java
loop per client (`aggregation/jvm`, class `JVM_CLASS`) decodes its pushes into per-series column arrays
and aggregates each series window by window, quantiles included; rows go in and out as Spark's InternalRow.
How deltas, resets and first sightings count: docs/architecture.md. The tests hold it, bit for bit, to an
oracle that decodes the pushes into point rows and aggregates them in Spark SQL (tests/aggregation_oracle,
tests/unit/aggregation/test_client_windows.py).

For a stream, `client_metrics_and_last_rows` also takes each cumulative series' last point from earlier
micro-batches (the stream state's `last`), only the points of a time range (the windows a micro-batch
finalizes), and returns each series' newest point for the next micro-batch; `with_push_times` gives each
record its points' time range (a Java UDF, no point rows), which kct.aggregation.stream.advance_records
keeps records and finalizes windows by.
"""

from __future__ import annotations

from typing import Any, Final

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kct.aggregation.decode import LABEL_COLUMNS, instance_id_sql
from kct.aggregation.time_bounds import time_bound
from kct.aggregation.transforms import (
    CLIENT_METRICS_COLUMNS,
    JVM_CLIENT_METRICS_COLUMNS,
    LAST_POINT_COLUMNS,
    QUANTILES,
    with_workload_columns,
)
from kct.otlp import labels as L

__all__ = [
    "JVM_CLASS",
    "client_metrics_and_last_rows",
    "client_metrics_from_records",
    "label_spec",
    "last_points_of",
    "metrics_of",
    "points_before",
    "quantile_spec",
    "with_push_times",
]

JVM_CLASS: Final = "dev.kct.otlp.ClientWindows"
# Java UDFs of the decoder jar: a push's [earliest, newest] point time_unix_nano, and its points before a time.
PUSH_TIMES_FUNCTION: Final = "kct_push_times"
POINTS_BEFORE_FUNCTION: Final = "kct_push_points_before"
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


def label_spec() -> str:
    """The broker labels as ClientWindows reads them from record headers: `name:header,header;...`, the
    instance id first, then LABEL_COLUMNS in order (each label under its KIP-714 and its HTTP header name,
    as `decode._sql_label`)."""
    by_name = {label.name: label for label in L.BROKER_LABELS}
    names = (L.CLIENT_INSTANCE_ID.name, *LABEL_COLUMNS)
    return ";".join(f"{n}:{by_name[n].name},{by_name[n].http_header}" for n in names)


def quantile_spec() -> str:
    """The quantile columns as ClientWindows computes them: `name=q;...`, q written as the Spark SQL of
    `transforms.with_quantiles` writes it (a decimal literal), so both give the same doubles."""
    return ";".join(f"{name}={q}" for name, q in QUANTILES)


def client_metrics_from_records(records: Any, *, window_seconds: int = 60, lookback_windows: int = 5) -> Any:
    """Records (decode.RAW_SCHEMA_DDL; key, value and headers are read) -> client_metrics rows
    (transforms.CLIENT_METRICS_COLUMNS), every window the points touch; the workload columns derived from
    the resource attributes in the projection that follows the JVM's rows. Needs the decoder jar on the
    session's classpath."""
    rows = _aggregate(records, None, False, window_seconds, lookback_windows)
    if tuple(rows.columns) != JVM_CLIENT_METRICS_COLUMNS:  # the jar and this checkout disagree
        raise RuntimeError(f"{JVM_CLASS} returned columns {rows.columns}, expected {JVM_CLIENT_METRICS_COLUMNS}")
    return with_workload_columns(rows)


def client_metrics_and_last_rows(records: Any, *, window_seconds: int = 60, lookback_windows: int = 5,
                                 previous: Any | None = None, from_ns: int | None = None,
                                 until_ns: int | None = None) -> Any:
    """For a stream: the client_metrics rows (`_kind` 0) and each cumulative series' newest point (`_kind`
    1) in one DataFrame; `previous` holds LAST_POINT_COLUMNS rows from earlier micro-batches; only the
    points with `from_ns <= time_unix_nano < until_ns` are taken (None: no bound). Persist it, then split it
    with `metrics_of` and `last_points_of` (each is a filter of it)."""
    return _aggregate(records, previous, True, window_seconds, lookback_windows,
                      _LONG_MIN if from_ns is None else from_ns, _LONG_MAX if until_ns is None else until_ns)


def with_push_times(records: Any) -> Any:
    """`records` with column `_times`: [earliest, newest] time_unix_nano of each push's data points (null: no
    points, or not a push), read in Java off the push's bytes without a row per point (`dev.kct.otlp.PushWire`;
    protobuf parses the pushes it is not sure of). Needs the decoder jar."""
    _register_time_functions(records.sparkSession)
    return records.withColumn("_times", F.expr(f"{PUSH_TIMES_FUNCTION}(value)"))


def points_before(records: Any, before_ns: int) -> Any:
    """A column: the number of each record's data points with time_unix_nano before `before_ns` (passed as
    kct.aggregation.time_bounds.time_bound: the generated code then does not change with it)."""
    _register_time_functions(records.sparkSession)
    return F.call_function(POINTS_BEFORE_FUNCTION, F.col("value"), time_bound(records.sparkSession, before_ns))


def _register_time_functions(spark: Any) -> None:
    spark.udf.registerJavaFunction(PUSH_TIMES_FUNCTION, "dev.kct.otlp.PushTimes", "array<bigint>")
    spark.udf.registerJavaFunction(POINTS_BEFORE_FUNCTION, "dev.kct.otlp.PushTimes$Before", "bigint")


def metrics_of(rows: Any) -> Any:
    """The client_metrics rows of `client_metrics_and_last_rows`."""
    return with_workload_columns(rows.where("_kind = 0"), CLIENT_METRICS_COLUMNS)


def last_points_of(rows: Any) -> Any:
    """The series' newest points (LAST_POINT_COLUMNS) of `client_metrics_and_last_rows`."""
    return rows.where("_kind = 1").select(*LAST_POINT_COLUMNS)


def _aggregate(records: Any, previous: Any | None, with_last: bool, window_seconds: int,
               lookback_windows: int, from_ns: int = _LONG_MIN, until_ns: int = _LONG_MAX) -> Any:
    spark = records.sparkSession
    keyed = records.select(F.expr(instance_id_sql()).alias("_cid"), "value", "headers")
    zone = spark.conf.get("spark.sql.session.timeZone")
    jdf = spark._jvm.dev.kct.otlp.ClientWindows.aggregate(
        keyed._jdf, None if previous is None else previous._jdf, with_last, int(from_ns), int(until_ns),
        int(window_seconds),
        int(lookback_windows), label_spec(), quantile_spec(), zone)
    return DataFrame(jdf, spark)
