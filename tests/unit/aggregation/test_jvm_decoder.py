"""The job's OTLP decoder (operator/kct/aggregation/jvm, on the JVM) against the oracle's Python one: the same rows for
every record.

Both run in the shared local SparkSession on the same records: the oracle's `decode_points` (Python,
mapInArrow; tests/aggregation_oracle) and `decode.jvm_points` (the Java function, exploded in Spark SQL). The
jar is built by dev/spark-deps/install.py when missing (needs mvn); the tests are skipped only without mvn.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from aggregation_oracle.python_decoder import decode_points, decode_push

from kct.aggregation.decode import RAW_SCHEMA_DDL, jvm_points
from kct.aggregation.synthetic import LATENCY_BOUNDS, SyntheticClient, build_request
from kct.otlp import labels as L

S = 1_000_000_000
REPO = Path(__file__).resolve().parents[3]
T0 = 1_763_700_000 * S


def _record(offset: int, value: bytes | None, key: bytes | None = None,
            headers: list[tuple[str, bytes | None]] | None = None) -> tuple[Any, ...]:
    ts = dt.datetime(2026, 11, 21, tzinfo=dt.UTC)
    return (key, value, "client-telemetry", offset % 2, offset, ts,
            [(k, v) for k, v in headers] if headers is not None else None)


def _exotic_push() -> bytes:
    """A push using what build_request cannot express: every AnyValue kind, duplicate attribute keys, an
    exponential histogram, a summary, a histogram without sum, a metric without data or without points,
    an empty resource, and a second resource."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
    from opentelemetry.proto.metrics.v1 import metrics_pb2 as M

    req = ExportMetricsServiceRequest()
    rm = req.resource_metrics.add()  # no resource attributes at all
    sm = rm.scope_metrics.add()
    g = sm.metrics.add(name="attrs.kinds", unit="1")
    p = g.gauge.data_points.add(time_unix_nano=T0 + 7, as_double=float("nan"))
    nested = AnyValue(kvlist_value=KeyValueList(values=[
        KeyValue(key="k\"q", value=AnyValue(string_value="é\n\t\\x")),
        KeyValue(key="", value=AnyValue(array_value=ArrayValue(values=[AnyValue(int_value=-3), AnyValue()]))),
        KeyValue(key="nov"),
        KeyValue(key="d", value=AnyValue(double_value=2.5e-7)),
        KeyValue(key="b", value=AnyValue(bytes_value=b"\x00\xffA'")),
        KeyValue(key="t", value=AnyValue(bool_value=False)),
    ]))
    p.attributes.extend([
        KeyValue(key="s", value=AnyValue(string_value="ü√")),
        KeyValue(key="i", value=AnyValue(int_value=-9_223_372_036_854_775_808)),
        KeyValue(key="b", value=AnyValue(bool_value=True)),
        KeyValue(key="d1", value=AnyValue(double_value=0.1)),
        KeyValue(key="d2", value=AnyValue(double_value=1e16)),
        KeyValue(key="d3", value=AnyValue(double_value=123456789012345.6)),
        KeyValue(key="d4", value=AnyValue(double_value=-1e-5)),
        KeyValue(key="d5", value=AnyValue(double_value=0.0001)),
        KeyValue(key="d6", value=AnyValue(double_value=float("inf"))),
        KeyValue(key="d7", value=AnyValue(double_value=-0.0)),
        KeyValue(key="d8", value=AnyValue(double_value=5e-324)),
        KeyValue(key="d9", value=AnyValue(double_value=1.7976931348623157e308)),
        KeyValue(key="by", value=AnyValue(bytes_value=b"\x01\xab")),
        KeyValue(key="none", value=AnyValue()),
        KeyValue(key="novalue"),
        KeyValue(key="d10", value=AnyValue(double_value=float("nan"))),
        KeyValue(key="d11", value=AnyValue(double_value=1e22)),
        KeyValue(key="arr", value=AnyValue(array_value=ArrayValue(values=[
            AnyValue(string_value="a\x01\x7f\x80 é\u2028\"'\\"), nested,
            *(AnyValue(double_value=d) for d in (3.0, 100.0, 0.1, 1e15, 1e16, 123456789012345.6, 1e22, -0.0, 0.0,
                                                  float("inf"), float("-inf"), float("nan"), 1e-5, 1.5e-4, 5e-324,
                                                  12345678901234567890.0, -2.5e-7, 1.7976931348623157e308)),
        ]))),
        KeyValue(key="kv", value=nested),
        KeyValue(key="s", value=AnyValue(string_value="dup wins")),  # duplicate key: last value, first place
        KeyValue(key="Z", value=AnyValue(string_value="upper sorts first")),
    ])
    g.gauge.data_points.add(time_unix_nano=T0 + 8)  # no value at all: 0.0
    sm.metrics.add(name="no.data")
    e = sm.metrics.add(name="empty.points")
    e.sum.aggregation_temporality = M.AGGREGATION_TEMPORALITY_CUMULATIVE
    odd = sm.metrics.add(name="odd.temporality")
    odd.sum.aggregation_temporality = 7  # not a defined temporality: "unspecified"
    odd.sum.data_points.add(time_unix_nano=T0, start_time_unix_nano=T0 - S, as_int=-5)
    unspec = sm.metrics.add(name="unspecified.temporality")
    unspec.histogram.data_points.add(time_unix_nano=T0, count=2, bucket_counts=[1, 1], explicit_bounds=[1.0])
    eh = sm.metrics.add(name="exp.hist", unit="s")
    eh.exponential_histogram.aggregation_temporality = M.AGGREGATION_TEMPORALITY_DELTA
    eh.exponential_histogram.data_points.add(time_unix_nano=T0, start_time_unix_nano=T0 - S, count=4, sum=1.25,
                                             scale=2, zero_count=1)
    eh.exponential_histogram.data_points.add(time_unix_nano=T0 + 1, count=0)  # no sum
    su = sm.metrics.add(name="summary")
    sp = su.summary.data_points.add(time_unix_nano=T0, count=3, sum=0.0)
    sp.attributes.add(key="q", value=AnyValue(string_value="x"))
    rm2 = req.resource_metrics.add()
    rm2.resource.attributes.add(key="service.name", value=AnyValue(string_value="second"))
    rm2.resource.attributes.add(key="pid", value=AnyValue(int_value=42))
    h = rm2.scope_metrics.add().metrics.add(name="hist.max.uint")
    h.histogram.aggregation_temporality = M.AGGREGATION_TEMPORALITY_CUMULATIVE
    h.histogram.data_points.add(time_unix_nano=T0, start_time_unix_nano=1, count=(1 << 63) - 1, sum=-2.0)
    return bytes(req.SerializeToString())


def _records() -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    clients = [SyntheticClient(f"c-{i}", started_ns=T0 - 60 * S, seed=i + 1, partitions=3 * i) for i in range(3)]
    for k in range(3):
        for c in clients:
            rec = c.push(T0 + k * 10 * S, terminating=(k == 2 and c.client_id == "c-0"), reason="close")
            rows.append(_record(len(rows), rec.value, rec.key, list(rec.headers)))
    both = build_request({"service.name": "orders", "zone": "b"}, [
        {"name": "sum.delta.int", "type": "sum", "temporality": "delta",
         "points": [{"time": T0, "start": T0 - 10 * S, "value": 7, "attributes": {"topic": "a", "p": 1}}]},
        {"name": "sum.cumulative.double", "type": "sum", "temporality": "cumulative", "monotonic": False,
         "points": [{"time": T0, "start": T0 - 10 * S, "value": -2.5}, {"time": T0 + 1, "value": 3.25}]},
        {"name": "hist.delta", "type": "histogram", "temporality": "delta", "unit": "ms",
         "points": [{"time": T0, "count": 3, "sum": 7.0, "buckets": [1, 2] + [0] * len(LATENCY_BOUNDS),
                     "bounds": [*LATENCY_BOUNDS, 1e300]}]},
        {"name": "hist.empty", "type": "histogram", "points": [{"time": T0, "count": 0, "sum": 0.0,
                                                              "buckets": [], "bounds": []}]},
    ])
    labels = {lab.name: f"v-{lab.name}".encode() for lab in L.BROKER_LABELS}
    # Headers under their HTTP names, in upper case, repeated (the last wins), a null one, odd values.
    rows.append(_record(len(rows), both, b"key-instance", [
        ("KCT-CLIENT-ID", b"first"), (L.CLIENT_ID.name, b"second"), (L.PRINCIPAL.http_header, b"User:x"),
        (L.CLIENT_SOURCE_PORT.name, None), (L.TERMINATING.http_header, b"TRUE"),
        (L.PUSH_INTERVAL_MS.name, b"12x"), ("unrelated", b"zz"),
    ]))
    rows.append(_record(len(rows), both, None, [(k, v) for k, v in labels.items()]))  # non-digit interval
    rows.append(_record(len(rows), both, b"", [(L.CLIENT_INSTANCE_ID.name, b""), (L.PUSH_INTERVAL_MS.name, b"")]))
    rows.append(_record(len(rows), both, b"\xffbad-utf8-key", None))  # no headers: instance from the key
    rows.append(_record(len(rows), _exotic_push(), b"exotic", [(L.PUSH_INTERVAL_MS.name, b"007")]))
    rows.append(_record(len(rows), b"", b"empty-push"))  # a valid, empty request: no points
    rows.append(_record(len(rows), None, b"tombstone"))  # no value: no points
    rows.append(_record(len(rows), b"\x0a\xff\xff\xff", b"truncated"))  # malformed: skipped
    rows.append(_record(len(rows), b"not a protobuf at all", b"garbage"))  # malformed: skipped
    bad_utf8 = build_request({}, [{"name": "Xname", "type": "gauge", "points": [{"time": T0, "value": 1.0}]}])
    rows.append(_record(len(rows), bad_utf8.replace(b"Xname", b"\xffname"), b"bad-utf8-string"))
    rows.append(_record(len(rows), both, b"after-the-bad-ones"))  # decoding goes on after a bad record
    return rows


def _normal(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, float) and value == 0.0:
        return (value, math.copysign(1.0, value))
    if isinstance(value, dict):
        return sorted((k, _normal(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


def _by_record(df: Any) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in df.collect():
        d = row.asDict(recursive=False)
        out[d["offset"]].append({k: _normal(v) for k, v in d.items()})
    return dict(out)


def test_jvm_decoder_rows_equal_python_decoder_rows(jvm_decoder: Any) -> None:
    """Given synthetic pushes (sums of both temporalities, gauges, histograms), a push with every attribute
    value kind, exponential histograms, summaries, empty metrics, header variants, and malformed records,
    When each record set is decoded by the Python decoder and by the JVM decoder,
    Then both have the same schema and, record by record and in order, the same rows."""
    spark = jvm_decoder
    raw = spark.createDataFrame(_records(), RAW_SCHEMA_DDL).repartition(2).persist()
    python_df = decode_points(raw)
    jvm_df = jvm_points(raw)
    assert [(f.name, f.dataType) for f in jvm_df.schema] == [(f.name, f.dataType) for f in python_df.schema]
    python_rows, jvm_rows = _by_record(python_df), _by_record(jvm_df)
    raw.unpersist()
    assert sum(len(v) for v in python_rows.values()) > 100
    assert set(jvm_rows) == set(python_rows)
    for offset, rows in python_rows.items():
        assert jvm_rows[offset] == rows, f"record {offset}"


def test_malformed_and_empty_records_yield_no_rows(jvm_decoder: Any) -> None:
    """Given a truncated record, a non-protobuf record, invalid UTF-8 in a string, an empty and a null value,
    When decoded on the JVM,
    Then they yield no rows (as in the Python decoder) and the valid record after them is decoded."""
    spark = jvm_decoder
    bad = [r for r in _records() if r[0] in (b"truncated", b"garbage", b"bad-utf8-string", b"empty-push",
                                             b"tombstone", b"after-the-bad-ones")]
    rows = jvm_points(spark.createDataFrame(bad, RAW_SCHEMA_DDL)).collect()
    assert {r["client_instance_id"] for r in rows} == {"after-the-bad-ones"}
    assert len(rows) == 5


def test_the_job_decodes_on_the_jvm_without_python_workers(jvm_decoder: Any) -> None:
    """Given one push,
    When the job's decoder decodes the record,
    Then the plan calls the JVM function (no Python mapInArrow) and the points carry the labels."""
    spark = jvm_decoder
    rec = SyntheticClient("job-client", started_ns=T0 - S, seed=3).push(T0)
    df = jvm_points(spark.createDataFrame([_record(0, rec.value, rec.key, list(rec.headers))], RAW_SCHEMA_DDL))
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "MapInArrow" not in plan and "kct_otlp_points" in plan
    rows = df.collect()
    assert {r["client_id"] for r in rows} == {"job-client"}
    assert len(rows) == len(decode_push(rec.value, rec.key, rec.headers)) == 8
