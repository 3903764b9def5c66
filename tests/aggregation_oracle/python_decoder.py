"""The Python OTLP decoder: Kafka push records -> flat data points, one Arrow batch at a time (`mapInArrow`).

The job decodes on the JVM (kct.aggregation.decode.jvm_points, the decoder jar's `OtlpPoints`). This is an
independent second implementation, written against the protobuf runtime (upb) rather than the Java classes,
kept here as the oracle the JVM decoder is held to, row for row (tests/unit/aggregation/test_jvm_decoder.py),
and as the decoder of the Spark SQL oracle (aggregation_oracle.sql_engine).

Conventions (the JVM decoder's too): timestamps are kept both as nanoseconds (exact, for reset detection) and
as Spark timestamps (microseconds, for windows); integer values become doubles; attribute values become
strings; a series' identity within a client instance is (metric, attributes_key) where `attributes_key` is
the attributes sorted by key and joined (Spark cannot group by a map).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

from kct.aggregation.decode import LABEL_COLUMNS, POINT_COLUMNS, POINT_SCHEMA_DDL
from kct.otlp import labels as L

__all__ = [
    "OTLP_MESSAGE",
    "attributes_key",
    "decode_arrow_batches",
    "decode_points",
    "decode_push",
    "header_labels",
    "otlp_descriptor_set",
    "point_arrow_schema",
]

# The message each record value holds, by full name (what spark-protobuf's from_protobuf is given).
OTLP_MESSAGE: Final = "opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest"

# Record headers carry the KIP-714 label names (the receiver's choice); the plugin's HTTP header names
# (`kct-client-id`, ...) are accepted too, so records produced by other writers decode the same.
_HEADER_TO_LABEL: Final[dict[str, str]] = {
    **{label.name: label.name for label in L.BROKER_LABELS},
    **{label.http_header: label.name for label in L.BROKER_LABELS},
}
_TEMPORALITY: Final = {0: "unspecified", 1: "delta", 2: "cumulative"}


def header_labels(headers: Iterable[tuple[str, bytes | None]] | None) -> dict[str, str]:
    """The broker-added labels of one record, by KIP-714 name (later headers win, as Kafka clients do)."""
    out: dict[str, str] = {}
    for name, raw in headers or ():
        label = _HEADER_TO_LABEL.get(name.lower())
        if label is not None and raw is not None:
            out[label] = raw.decode("utf-8", "replace")
    return out


def _any_value(value: Any) -> str:
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return str(value.string_value)
    if kind is None:
        return ""
    if kind == "bool_value":
        return "true" if value.bool_value else "false"
    if kind in ("array_value", "kvlist_value"):
        return str(getattr(value, kind)).replace("\n", " ").strip()
    if kind == "bytes_value":
        return bytes(value.bytes_value).hex()
    return str(getattr(value, kind))


def _attributes(kvs: Iterable[Any]) -> dict[str, str]:
    return {kv.key: _any_value(kv.value) for kv in kvs}


def attributes_key(attrs: Mapping[str, str]) -> str:
    """A stable string for a set of attributes (Spark cannot group by a map): `k1=v1,k2=v2` sorted by key."""
    return ",".join(f"{k}={attrs[k]}" for k in sorted(attrs))


class _Columns:
    """Column lists for one output batch, filled column-wise: values shared by a push (labels) or by a
    metric (name, type) are extended once per metric, only the per-point values are appended per point."""

    def __init__(self) -> None:
        self.cols: dict[str, list[Any]] = {name: [] for name in POINT_COLUMNS}


_COMMON_COLUMNS: Final = (
    "client_instance_id", *LABEL_COLUMNS, "terminating", "push_interval_ms", "resource_attributes",
    "topic", "partition", "offset",
)
_METRIC_COLUMNS: Final = ("metric", "unit", "type", "temporality", "monotonic")
_HIST_COLUMNS: Final = ("count", "sum", "bucket_counts", "explicit_bounds")
_EMPTY: Final[dict[str, str]] = {}


def _numbers(cols: dict[str, list[Any]], points: Any) -> None:
    attrs_col, key_col = cols["attributes"].append, cols["attributes_key"].append
    start_col, time_col = cols["start_time_unix_nano"].append, cols["time_unix_nano"].append
    start_ts, time_ts, value_col = cols["start_time"].append, cols["time"].append, cols["value"].append
    for p in points:
        attrs = _attributes(p.attributes) if p.attributes else _EMPTY
        attrs_col(list(attrs.items()))
        key_col(attributes_key(attrs) if attrs else "")
        start, t = p.start_time_unix_nano, p.time_unix_nano
        start_col(start)
        time_col(t)
        start_ts(start // 1000 if start else None)
        time_ts(t // 1000)
        value_col(p.as_double if p.WhichOneof("value") == "as_double" else float(p.as_int))
    n = len(points)
    for name in _HIST_COLUMNS:
        cols[name].extend([None] * n)


def _distributions(cols: dict[str, list[Any]], points: Any, kind: str) -> None:
    for p in points:
        attrs = _attributes(p.attributes) if p.attributes else _EMPTY
        cols["attributes"].append(list(attrs.items()))
        cols["attributes_key"].append(attributes_key(attrs) if attrs else "")
        start, t = p.start_time_unix_nano, p.time_unix_nano
        cols["start_time_unix_nano"].append(start)
        cols["time_unix_nano"].append(t)
        cols["start_time"].append(start // 1000 if start else None)
        cols["time"].append(t // 1000)
        cols["value"].append(None)
        cols["count"].append(p.count)
        cols["sum"].append(p.sum if kind == "summary" or p.HasField("sum") else None)
        cols["bucket_counts"].append(list(p.bucket_counts) if kind == "histogram" else None)
        cols["explicit_bounds"].append(list(p.explicit_bounds) if kind == "histogram" else None)


def _decode_into(out: _Columns, value: bytes, key: bytes | None, headers: Iterable[tuple[str, bytes | None]] | None,
                 where: Sequence[Any]) -> None:
    request = _REQUEST()
    request.ParseFromString(value)
    lab = header_labels(headers)
    instance = lab.get(L.CLIENT_INSTANCE_ID.name) or (key.decode("utf-8", "replace") if key else None)
    terminating = lab.get(L.TERMINATING.name, "false").lower() == "true"
    interval_raw = lab.get(L.PUSH_INTERVAL_MS.name, "")
    interval = int(interval_raw) if interval_raw.isdigit() else None
    cols = out.cols
    for rm in request.resource_metrics:
        resource = list(_attributes(rm.resource.attributes).items())
        common = (instance, *(lab.get(name) for name in LABEL_COLUMNS), terminating, interval, resource, *where)
        before = len(cols["time_unix_nano"])
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                kind = metric.WhichOneof("data")
                if kind is None:
                    continue
                data = getattr(metric, kind)
                points = data.data_points
                if not points:
                    continue
                if kind == "gauge":
                    part: tuple[Any, ...] = (metric.name, metric.unit, "gauge", None, None)
                    _numbers(cols, points)
                elif kind == "sum":
                    temporality: str | None = _TEMPORALITY.get(data.aggregation_temporality, "unspecified")
                    part = (metric.name, metric.unit, "sum", temporality, data.is_monotonic)
                    _numbers(cols, points)
                else:
                    temporality = None if kind == "summary" else _TEMPORALITY.get(
                        data.aggregation_temporality, "unspecified")
                    part = (metric.name, metric.unit, kind, temporality, None)
                    _distributions(cols, points, kind)
                n = len(points)
                for name, v in zip(_METRIC_COLUMNS, part, strict=True):
                    cols[name].extend([v] * n)
        added = len(cols["time_unix_nano"]) - before
        for name, v in zip(_COMMON_COLUMNS, common, strict=True):
            cols[name].extend([v] * added)


def _request_class() -> Any:
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    return ExportMetricsServiceRequest


_REQUEST: Final = _request_class()


def decode_push(value: bytes, key: bytes | None = None,
                headers: Iterable[tuple[str, bytes | None]] | None = None,
                where: Sequence[Any] = (None, None, None)) -> list[dict[str, Any]]:
    """One record -> its data points as dicts (POINT_COLUMNS; timestamps in microseconds). For tests."""
    out = _Columns()
    _decode_into(out, value, key, headers, where)
    n = len(out.cols["metric"])
    return [{name: out.cols[name][i] for name in POINT_COLUMNS} for i in range(n)]


def otlp_descriptor_set() -> bytes:
    """A serialized FileDescriptorSet of ExportMetricsServiceRequest and the files it imports.

    Built from the `_pb2` modules of the installed opentelemetry-proto package (no protoc): the descriptor
    file spark-protobuf's `from_protobuf(value, OTLP_MESSAGE, descFilePath=...)` needs for decoding on the
    JVM, where that connector is available.
    """
    from google.protobuf import descriptor_pb2
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2

    out = descriptor_pb2.FileDescriptorSet()
    seen: set[str] = set()

    def add(fd: Any) -> None:  # dependencies first, each file once
        if fd.name in seen:
            return
        seen.add(fd.name)
        for dep in fd.dependencies:
            add(dep)
        fd.CopyToProto(out.file.add())

    add(metrics_service_pb2.DESCRIPTOR)
    return bytes(out.SerializeToString())


def point_arrow_schema() -> Any:
    import pyarrow as pa  # type: ignore[import-untyped]

    s, b = pa.string(), pa.bool_()
    smap = pa.map_(pa.string(), pa.string())
    ts = pa.timestamp("us", tz="UTC")
    types = {
        "terminating": b, "push_interval_ms": pa.int64(), "resource_attributes": smap, "monotonic": b,
        "attributes": smap, "start_time_unix_nano": pa.int64(), "time_unix_nano": pa.int64(),
        "start_time": ts, "time": ts, "value": pa.float64(), "count": pa.int64(), "sum": pa.float64(),
        "bucket_counts": pa.list_(pa.int64()), "explicit_bounds": pa.list_(pa.float64()),
        "partition": pa.int32(), "offset": pa.int64(),
    }
    return pa.schema([pa.field(name, types.get(name, s)) for name in POINT_COLUMNS])


def decode_arrow_batches(batches: Iterable[Any]) -> Iterator[Any]:
    """`mapInArrow` function: Arrow batches of RAW_SCHEMA records -> Arrow batches of POINT_SCHEMA rows.

    A record that is not a valid push is skipped (it is counted nowhere else: the receiver validated it).
    """
    import pyarrow as pa
    from google.protobuf.message import DecodeError

    schema = point_arrow_schema()
    for batch in batches:
        out = _Columns()
        cols = batch.to_pydict()
        keys, values, headers = cols["key"], cols["value"], cols["headers"]
        topics, parts, offsets = cols["topic"], cols["partition"], cols["offset"]
        for i, value in enumerate(values):
            if value is None:
                continue
            hdrs = [(h["key"], h["value"]) for h in headers[i]] if headers[i] else None
            try:
                _decode_into(out, value, keys[i], hdrs, (topics[i], parts[i], offsets[i]))
            except DecodeError:
                continue
        yield pa.RecordBatch.from_pydict(out.cols, schema=schema)


def decode_points(records: Any) -> Any:
    """Records (decode.RAW_SCHEMA_DDL) -> data points (decode.POINT_SCHEMA_DDL) in Python: one call per Arrow
    batch of pushes (`mapInArrow`), never a UDF per data point. The same rows as `decode.jvm_points`."""
    return records.mapInArrow(decode_arrow_batches, POINT_SCHEMA_DDL)
