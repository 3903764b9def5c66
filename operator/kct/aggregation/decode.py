"""OTLP push records -> flat data points, on the JVM: the record and point schemas and the decoder's SQL.

Each Kafka record holds one push (`ExportMetricsServiceRequest` protobuf bytes) and the broker-added
labels in its headers (names in `kct.otlp.labels`). The decoder is our own Spark Java function
(`aggregation/jvm`, class `JVM_DECODER_CLASS`: protobuf-java and the OpenTelemetry proto classes, shaded),
which returns a push's data points as an array of structs; `jvm_points` explodes it and adds the record's
labels with Spark SQL, so no row crosses into Python. spark-protobuf's `from_protobuf` would do the parsing
too, but the package registry this project can reach does not serve that connector. An independent Python
decoder (over Arrow batches) checks it row for row from the tests (tests/aggregation_oracle).

Conventions: timestamps are kept both as nanoseconds (exact, for reset detection) and as Spark timestamps
(microseconds, for windows); integer values become doubles; attribute values become strings; a series'
identity within a client instance is (metric, attributes_key) where `attributes_key` is the attributes
sorted by key and joined (Spark cannot group by a map).
"""

from __future__ import annotations

from typing import Any, Final

from kct.otlp import labels as L

__all__ = [
    "JVM_DECODER_CLASS",
    "JVM_DECODER_FUNCTION",
    "JVM_POINTS_DDL",
    "LABEL_COLUMNS",
    "POINT_COLUMNS",
    "POINT_SCHEMA_DDL",
    "RAW_SCHEMA_DDL",
    "instance_id_sql",
    "jvm_points",
]

# The records as Spark's Kafka source (spark-sql-kafka-0-10, includeHeaders) presents them.
RAW_SCHEMA_DDL: Final = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, "
    "headers ARRAY<STRUCT<key: STRING, value: BINARY>>"
)

# One row per data point. Histogram columns are null for other types; `value` is null for histograms.
_POINT_FIELDS: Final[tuple[str, ...]] = (
    "client_instance_id STRING",
    "client_id STRING",
    "client_software_name STRING",
    "client_software_version STRING",
    "client_source_address STRING",
    "client_source_port STRING",
    "principal STRING",
    "broker_id STRING",
    "terminating BOOLEAN",
    "push_interval_ms BIGINT",
    "resource_attributes MAP<STRING, STRING>",
    "metric STRING",
    "unit STRING",
    "type STRING",
    "temporality STRING",
    "monotonic BOOLEAN",
    "attributes MAP<STRING, STRING>",
    "attributes_key STRING",
    "start_time_unix_nano BIGINT",
    "time_unix_nano BIGINT",
    "start_time TIMESTAMP",
    "time TIMESTAMP",
    "value DOUBLE",
    "count BIGINT",
    "sum DOUBLE",
    "bucket_counts ARRAY<BIGINT>",
    "explicit_bounds ARRAY<DOUBLE>",
    "topic STRING",
    "partition INT",
    "offset BIGINT",
)
POINT_SCHEMA_DDL: Final = ", ".join(_POINT_FIELDS)
POINT_COLUMNS: Final[tuple[str, ...]] = tuple(part.split(" ", 1)[0] for part in _POINT_FIELDS)

LABEL_COLUMNS: Final[tuple[str, ...]] = (
    "client_id",
    "client_software_name",
    "client_software_version",
    "client_source_address",
    "client_source_port",
    "principal",
    "broker_id",
)
# The Java class (a Spark UDF1<byte[], Row>), the SQL name the job registers it under, and its return type:
# a push's data points column by column (an array per field), per-metric fields once per metric and the
# resource attributes once per resource, each point pointing at them by index (timestamps as nanoseconds).
JVM_DECODER_CLASS: Final = "dev.kct.otlp.OtlpPoints"
JVM_DECODER_FUNCTION: Final = "kct_otlp_points"
JVM_POINTS_DDL: Final = (
    "STRUCT<resources: ARRAY<MAP<STRING, STRING>>, metrics: ARRAY<STRUCT<metric: STRING, unit: STRING, "
    "type: STRING, temporality: STRING, monotonic: BOOLEAN>>, resource_ix: ARRAY<INT>, metric_ix: ARRAY<INT>, "
    "attributes: ARRAY<MAP<STRING, STRING>>, attributes_key: ARRAY<STRING>, start_time_unix_nano: ARRAY<BIGINT>, "
    "time_unix_nano: ARRAY<BIGINT>, value: ARRAY<DOUBLE>, count: ARRAY<BIGINT>, sum: ARRAY<DOUBLE>, "
    "bucket_counts: ARRAY<ARRAY<BIGINT>>, explicit_bounds: ARRAY<ARRAY<DOUBLE>>>"
)
_JVM_METRIC_FIELDS: Final = ("metric", "unit", "type", "temporality", "monotonic")


def _sql_label(name: str) -> str:
    """SQL for one broker label from the record headers: the last header whose lower-cased name is the
    label's KIP-714 name or its HTTP header name (the plugin's, so records of other writers decode the same),
    decoded as UTF-8."""
    label = next(lab for lab in L.BROKER_LABELS if lab.name == name)
    names = ", ".join(f"'{n}'" for n in sorted({label.name, label.http_header}))
    return (f"CAST(try_element_at(filter(headers, h -> lower(h.key) IN ({names}) AND h.value IS NOT NULL), -1)"
            f".value AS STRING)")


def instance_id_sql() -> str:
    """SQL for a record's client instance id: its header when not empty, else its key when not empty."""
    return (f"coalesce(nullif({_sql_label(L.CLIENT_INSTANCE_ID.name)}, ''), "
            "nullif(CAST(key AS STRING), ''))")


def jvm_points(records: Any, function: str = JVM_DECODER_FUNCTION) -> Any:
    """Records (RAW_SCHEMA_DDL) -> data points (POINT_SCHEMA_DDL) with the JVM decoder registered as
    `function` (session.require_jvm_engine registers it): one call per push returns its points as columns,
    one `posexplode` over the time column makes them rows (each field read at the point's index), labels
    come from the headers in Spark SQL. Same rows as the Python decoder the tests hold it to
    (tests/unit/aggregation/test_jvm_decoder.py); a record that is not a valid push yields no row."""
    from pyspark.sql import functions as F

    instance = instance_id_sql()
    interval = _sql_label(L.PUSH_INTERVAL_MS.name)
    labels = [
        F.expr(instance).alias("client_instance_id"),
        *(F.expr(_sql_label(name)).alias(name) for name in LABEL_COLUMNS),
        F.expr(f"coalesce(lower({_sql_label(L.TERMINATING.name)}) = 'true', false)").alias("terminating"),
        F.expr(f"CASE WHEN {interval} RLIKE '^[0-9]+$' THEN try_cast({interval} AS BIGINT) END")
        .alias("push_interval_ms"),
    ]
    # Labels once per record, before the explode (in the same select they would be evaluated once per point).
    per_record = records.select(*labels, "topic", "partition", "offset", F.expr(f"{function}(value)").alias("ps"))
    exploded = per_record.select("*", F.posexplode("ps.time_unix_nano").alias("i", "_t"))
    per_point = {
        "resource_attributes": "ps.resources[ps.resource_ix[i]]",
        **{name: f"ps.metrics[ps.metric_ix[i]].{name}" for name in _JVM_METRIC_FIELDS},
        "start_time": "CASE WHEN ps.start_time_unix_nano[i] = 0 THEN NULL "
                      "ELSE timestamp_micros(ps.start_time_unix_nano[i] div 1000) END",
        "time": "timestamp_micros(_t div 1000)",
    }
    out = []
    for part in _POINT_FIELDS:
        name, ddl_type = part.split(" ", 1)
        if name in per_point:
            expr = per_point[name]
        elif name in per_record.columns:
            expr = f"`{name}`"
        else:
            expr = f"ps.{name}[i]"
        out.append(F.expr(f"CAST({expr} AS {ddl_type})").alias(name))
    return exploded.select(*out)
