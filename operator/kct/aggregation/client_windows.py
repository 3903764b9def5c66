"""client_metrics straight from the topic's records, on the JVM, without a row per data point (a spike).

`transforms.aggregate_client_metrics` works on decoded points: every push is exploded into point rows, which
are sorted per series and aggregated per (window, series) in Spark SQL, so every point is a row shuffled
and sorted with its labels. Here the records are grouped per client instance with Spark's own shuffle
(repartitioned by instance id, sorted by it within partitions: the records move, ~100 points each), and one
Java loop per client (`spark/otlp-decoder`, class `JVM_CLASS`) decodes its pushes into per-series column arrays and aggregates
each series window by window: the same rows as the SQL path (tests/unit/aggregation/test_client_windows.py),
with the columns that are plain expressions of others (window bounds, date, rate, quantiles) added here with
the SQL path's own expressions.

Batch only for now: a stream's per-series last points from earlier micro-batches (the SQL path's `previous`)
are not taken yet.
"""

from __future__ import annotations

from typing import Any, Final

from kct.aggregation.decode import LABEL_COLUMNS, instance_id_sql
from kct.otlp import labels as L

__all__ = ["JVM_CLASS", "client_metrics_from_records", "client_windows_rows", "label_spec"]

JVM_CLASS: Final = "dev.kct.otlp.ClientWindows"


def label_spec() -> str:
    """The broker labels as ClientWindows reads them from record headers: `name:header,header;...`, the
    instance id first, then LABEL_COLUMNS in order (each label under its KIP-714 and its HTTP header name,
    as `decode._sql_label`)."""
    by_name = {label.name: label for label in L.BROKER_LABELS}
    names = (L.CLIENT_INSTANCE_ID.name, *LABEL_COLUMNS)
    return ";".join(f"{n}:{by_name[n].name},{by_name[n].http_header}" for n in names)


def client_windows_rows(records: Any, *, window_seconds: int = 60, lookback_windows: int = 5) -> Any:
    """ClientWindows' own rows for `records`: the client_metrics columns before those computed from others
    (`_ws` epoch seconds instead of the window, `_last_us` epoch microseconds instead of `last_time`)."""
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    spark = records.sparkSession
    keyed = records.select(F.expr(instance_id_sql()).alias("_cid"), "value", "headers")
    jvm_class = spark._jvm.dev.kct.otlp.ClientWindows
    return DataFrame(jvm_class.aggregate(keyed._jdf, int(window_seconds), int(lookback_windows), label_spec()),
                     spark)


def client_metrics_from_records(records: Any, *, window_seconds: int = 60, lookback_windows: int = 5) -> Any:
    """Records (decode.RAW_SCHEMA_DDL; key, value and headers are read) -> client_metrics rows
    (transforms.CLIENT_METRICS_COLUMNS), every window the points touch, as `aggregate_client_metrics`
    computes them from the decoded points. Needs the decoder jar on the session's classpath."""
    from pyspark.sql import functions as F

    from kct.aggregation.transforms import CLIENT_METRICS_COLUMNS, with_quantiles

    size = int(window_seconds)
    rows = client_windows_rows(records, window_seconds=size, lookback_windows=lookback_windows)
    out = (
        rows.withColumn("window_start", F.timestamp_seconds("_ws"))
        .withColumn("window_end", F.timestamp_seconds(F.col("_ws") + F.lit(size)))
        .withColumn("date", F.date_format(F.col("window_start"), "yyyy-MM-dd"))
        .withColumn("last_time", F.timestamp_micros("_last_us"))
        .withColumn("rate", F.col("delta") / F.lit(float(size)))
    )
    return with_quantiles(out).select(*CLIENT_METRICS_COLUMNS)
