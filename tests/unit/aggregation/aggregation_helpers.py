"""Builders for the aggregation tests: data-point rows with hand-picked values."""

from __future__ import annotations

from typing import Any

S = 1_000_000_000  # nanoseconds per second
T0 = 1_700_000_040 * S  # a minute boundary: windows of 60 s start at T0 + k*60 s


def point(metric: str, t_s: float, value: float | None = None, **fields: Any) -> dict[str, Any]:
    """One data point row (decode.POINT_COLUMNS), times in seconds after T0."""
    t_ns = T0 + int(t_s * S)
    start_s = fields.pop("start_s", None)
    start_ns = fields.pop("start_ns", T0 + int(start_s * S) if start_s is not None else 0)
    row: dict[str, Any] = {
        "client_instance_id": "inst-1", "client_id": "producer-1", "client_software_name": "librdkafka",
        "client_software_version": "2.12.1", "client_source_address": "10.0.0.7", "client_source_port": "40000",
        "principal": "User:alice", "broker_id": "1", "terminating": False, "push_interval_ms": 10_000,
        "resource_attributes": {}, "metric": metric, "unit": "", "type": "gauge", "temporality": None,
        "monotonic": None, "attributes": {}, "attributes_key": "", "start_time_unix_nano": start_ns,
        "time_unix_nano": t_ns, "start_time": None, "time": None, "value": value, "count": None, "sum": None,
        "bucket_counts": None, "explicit_bounds": None, "topic": "client-telemetry", "partition": 0, "offset": 0,
    }
    row.update(fields)
    for name in ("value", "sum"):
        if row[name] is not None:
            row[name] = float(row[name])
    return row


def points_df(spark: Any, rows: list[dict[str, Any]]) -> Any:
    """A points DataFrame (decode.POINT_SCHEMA_DDL) from `point(...)` rows."""
    from datetime import UTC, datetime

    from kct.aggregation.decode import POINT_COLUMNS, POINT_SCHEMA_DDL

    def ts(ns: int) -> datetime | None:
        return datetime.fromtimestamp(ns / S, tz=UTC) if ns else None

    data = []
    for row in rows:
        row = dict(row, time=ts(row["time_unix_nano"]), start_time=ts(row["start_time_unix_nano"]))
        data.append(tuple(row[c] for c in POINT_COLUMNS))
    return spark.createDataFrame(data, POINT_SCHEMA_DDL)


def window(k: int) -> float:
    """Start of window k (60 s windows) in epoch seconds; compare with `row.window_start.timestamp()`."""
    return T0 / S + 60 * k


def records_df(spark: Any, rows: list[dict[str, Any]]) -> Any:
    """Kafka records (decode.RAW_SCHEMA_DDL) holding `point(...)` rows, one push per row, its broker labels in
    the headers: what the job reads, for tests that give it hand-picked points (the job decodes them back
    into these rows). Gauges and sums only; a row's `offset` is its record's."""
    import datetime as dt

    from kct.aggregation.decode import LABEL_COLUMNS, RAW_SCHEMA_DDL
    from kct.aggregation.synthetic import build_request
    from kct.otlp import labels as L

    records = []
    for row in rows:
        if row["type"] not in ("gauge", "sum"):
            raise ValueError(f"records_df: {row['type']} points are not supported")
        metric = {"name": row["metric"], "type": row["type"], "unit": row["unit"], "points": [{
            "time": row["time_unix_nano"], "start": row["start_time_unix_nano"], "value": row["value"],
            "attributes": row["attributes"]}]}
        if row["type"] == "sum":
            metric.update(temporality=row["temporality"], monotonic=bool(row["monotonic"]))
        value = build_request(row["resource_attributes"], [metric])
        headers = [(L.CLIENT_INSTANCE_ID.name, row["client_instance_id"].encode())]
        headers += [(name, row[name].encode()) for name in LABEL_COLUMNS if row[name] is not None]
        headers += [(L.TERMINATING.name, b"true" if row["terminating"] else b"false"),
                    (L.PUSH_INTERVAL_MS.name, str(row["push_interval_ms"]).encode())]
        stamp = dt.datetime.fromtimestamp(row["time_unix_nano"] / S, tz=dt.UTC)
        records.append((row["client_instance_id"].encode(), value, row["topic"], row["partition"], row["offset"],
                        stamp, headers))
    return spark.createDataFrame(records, RAW_SCHEMA_DDL)
