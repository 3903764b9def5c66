"""The roll-ups on the JVM (kct.aggregation.rollups_jvm, dev.kct.otlp.Rollups) against the oracle's Spark SQL
roll-ups (aggregation_oracle.sql_engine.rollups).

Both run in the shared local SparkSession on the same client_metrics rows and must give the same rows, row
for row (none missing, none extra), every column: integers, strings, maps, bounds, bucket counts and the
quantiles exactly (the quantiles come from integer bucket sums, doubles compared by their bits, NaN
included); the doubles that are sums over rows (value_last_sum, value_avg, delta, rate, sum) and min/max
(Spark keeps the first of -0.0 and 0.0, and which row is first depends on the partitioning) equal or
within 1e-12 relative, since both add the rows in whatever order they arrive and the two orders differ.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import random
from collections.abc import Iterator
from typing import Any

import pytest
from aggregation_oracle.sql_engine import rollups
from pyspark.sql import functions as F
from test_client_windows import _raw_records

from kct.aggregation.client_windows import client_metrics_from_records
from kct.aggregation.decode import RAW_SCHEMA_DDL
from kct.aggregation.rollups_jvm import ROLLUP_ROWS_PER_TASK, dimension_spec, rollups_of, rollups_on_jvm
from kct.aggregation.transforms import CLIENT_METRICS_COLUMNS, ROLLUP_COLUMNS

pytestmark = pytest.mark.spark

# Doubles summed (or min/max-ed) over rows in the order they arrive: equal up to that order.
ORDERED = frozenset({"value_last_sum", "value_min", "value_max", "value_avg", "delta", "rate", "sum"})
CM_DDL = (
    "window_start timestamp, window_end timestamp, date string, client_instance_id string, client_id string, "
    "client_software_name string, client_software_version string, client_source_address string, "
    "client_source_port string, principal string, broker_id string, resource_attributes map<string,string>, "
    "k8s_namespace_name string, k8s_workload_kind string, k8s_workload_name string, k8s_pod_name string, "
    "metric string, unit string, type string, temporality string, monotonic boolean, "
    "attributes map<string,string>, attributes_key string, points bigint, last_time timestamp, "
    "value_last double, value_min double, value_max double, value_avg double, delta double, rate double, "
    "resets int, count bigint, sum double, explicit_bounds array<double>, bucket_counts array<bigint>, "
    "p50 double, p95 double, p99 double"
)
LAYOUTS: tuple[list[float] | None, ...] = (
    [1.0, 5.0, 10.0, 50.0], [10.0], [-5.0, 0.0, 5.0], [-0.0, 1.0], [0.5, 1.0, 2.5, 5.0, 10.0, 25.0], [], None,
)
NASTY = (float("nan"), -0.0, 0.0, float("inf"), float("-inf"), None)


@pytest.fixture(scope="module")
def jvm(jvm_decoder: Any) -> Any:
    """The session with the decoder jar, which holds Rollups (conftest.py)."""
    return jvm_decoder


def _value(rng: random.Random) -> float | None:
    return rng.choice(NASTY) if rng.random() < 0.1 else rng.uniform(-50, 1000)


def _buckets(rng: random.Random, bounds: list[float] | None) -> list[int | None] | None:
    if rng.random() < 0.05:
        return None
    n = len(bounds or []) + 1 + (rng.choice((-1, 1)) if rng.random() < 0.05 else 0)  # a layout mismatch
    out: list[int | None] = [rng.randrange(0, 40) for _ in range(max(n, 0))]
    if out and rng.random() < 0.03:
        out[rng.randrange(len(out))] = None
    return out


def _series(rng: random.Random, kind: str) -> dict[str, Any]:
    """The measure columns of one client_metrics row of a series of `kind`."""
    row: dict[str, Any] = {"points": rng.randrange(1, 7)}
    if kind == "gauge":
        lo, hi = sorted(rng.uniform(-100, 100) for _ in range(2))
        row |= {"value_last": _value(rng), "value_min": rng.choice((lo, *NASTY)) if rng.random() < 0.1 else lo,
                "value_max": hi, "value_avg": _value(rng)}
    elif kind in ("sum.cumulative", "sum.delta"):
        delta = _value(rng)
        row |= {"value_last": _value(rng), "value_min": _value(rng), "value_max": _value(rng),
                "value_avg": _value(rng), "delta": delta, "rate": None if delta is None else delta / 60.0,
                "resets": rng.choice((0, 0, 1, None))}
    elif kind.startswith("histogram"):
        bounds = LAYOUTS[int(kind.split(".")[1])]
        counts = _buckets(rng, bounds)
        row |= {"explicit_bounds": bounds, "bucket_counts": counts, "resets": rng.choice((0, 2)),
                "count": None if counts is None else sum(c or 0 for c in counts), "sum": _value(rng)}
    else:  # exponential histogram: a count and a sum, no buckets
        row |= {"count": rng.choice((rng.randrange(100), None)), "sum": _value(rng)}
    return row


KINDS = ("gauge", "sum.cumulative", "sum.delta", "exponential_histogram",
         *(f"histogram.{i}" for i in range(len(LAYOUTS))))


def _client_metrics(seed: int, instances: int = 12, windows: int = 3) -> list[dict[str, Any]]:
    """client_metrics rows: instances with null, empty and shared dimension values (no principal, no
    software version, '' next to null), every kind of series over several bucket layouts, in `windows`
    windows; one row per (window, instance, series), as client_metrics has."""
    rng = random.Random(seed)
    rows = []
    t0 = dt.datetime(2023, 11, 14, 22, 14, tzinfo=dt.UTC)
    for i in range(instances):
        labels = {
            "client_instance_id": f"instance-{i}",
            "client_id": rng.choice(("producer-1", "producer-2", "consumer", None, "")),
            "client_software_name": rng.choice(("librdkafka", "apache-kafka-java", None, "")),
            "client_software_version": rng.choice(("2.12.1", "3.9.0", None, "")),
            "principal": rng.choice(("User:alice", "User:bob", None, "")),
        }
        for w in range(windows):
            start = t0 + dt.timedelta(minutes=w)
            for m, kind in enumerate(KINDS):
                for topic in ("orders", "payments", None):
                    if rng.random() < 0.2:
                        continue  # not every instance has every series in every window
                    attributes = {} if topic is None else {"topic": topic}
                    row = {c: None for c in CLIENT_METRICS_COLUMNS} | labels | {
                        "window_start": start, "window_end": start + dt.timedelta(minutes=1),
                        "date": start.strftime("%Y-%m-%d"), "metric": f"m{m}.{kind}",
                        "unit": "ms" if kind.startswith("histogram") else "1",
                        "type": kind.split(".")[0], "monotonic": kind == "sum.cumulative",
                        "temporality": {"sum.cumulative": "cumulative", "sum.delta": "delta"}.get(
                            kind, "cumulative" if kind.startswith("histogram") else None),
                        "attributes": attributes, "attributes_key": "" if topic is None else f"topic={topic}",
                        "resource_attributes": {"service.name": "x"}, "last_time": start,
                    }
                    rows.append(row | _series(rng, kind))
    return rows


def _frame(spark: Any, rows: list[dict[str, Any]]) -> Any:
    return spark.createDataFrame([tuple(r[c] for c in CLIENT_METRICS_COLUMNS) for r in rows], CM_DDL)


def _exact(value: Any) -> Any:
    """Comparable, exact: NaN equal to NaN, -0.0 told from 0.0, maps as sorted pairs."""
    if isinstance(value, float):
        return ("float", "nan" if math.isnan(value) else value.hex())
    if isinstance(value, dict):
        return sorted((k, _exact(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_exact(v) for v in value]
    return value


def _rows(df: Any) -> list[tuple[tuple[Any, ...], tuple[float | None, ...]]]:
    """Each row as (its exact columns, its order-dependent doubles), sorted."""
    out = []
    for row in df.collect():
        exact = tuple((c, _exact(row[c])) for c in ROLLUP_COLUMNS if c not in ORDERED)
        ordered = tuple(row[c] for c in ROLLUP_COLUMNS if c in ORDERED)
        out.append((exact, ordered))
    return sorted(out, key=lambda r: (repr(r[0]), repr(tuple(None if v is None else round(v, 6) for v in r[1]))))


def _close(x: float | None, y: float | None) -> bool:
    if x is None or y is None:
        return x is y
    return x == y or (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=1e-12)


@contextlib.contextmanager
def _shuffled_over(spark: Any, partitions: int) -> Iterator[None]:
    """Shuffles into `partitions` partitions, not coalesced into one as a small input otherwise is (where any
    hash would route a key's partials to the same merge)."""
    settings = {"spark.sql.shuffle.partitions": str(partitions),
                "spark.sql.adaptive.coalescePartitions.enabled": "false"}
    before = {k: spark.conf.get(k) for k in settings}
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            spark.conf.set(k, v)


def assert_same_rollups(mine: Any, theirs: Any) -> int:
    """The same columns and types, the same rows (none missing or extra); the number of rows."""
    assert mine.schema.simpleString() == theirs.schema.simpleString()
    a, b = _rows(mine), _rows(theirs)
    assert len(a) == len(b), f"{len(a)} rows on the JVM, {len(b)} from Spark SQL"
    for (ea, oa), (eb, ob) in zip(a, b, strict=True):
        assert ea == eb
        for name, x, y in zip(sorted(ORDERED, key=ROLLUP_COLUMNS.index), oa, ob, strict=True):
            assert _close(x, y), f"{name}: {x!r} != {y!r} in {dict(ea)}"
    return len(a)


@pytest.mark.parametrize("one_task", [False, True], ids=["two-merges", "one-task"])
def test_jvm_rollups_equal_the_sql_rollups_on_mixed_client_metrics(jvm: Any, one_task: bool) -> None:
    """Given client_metrics of every kind (counters, gauges with NaN/±inf/-0.0/null values, histograms over
    seven bucket layouts, some mismatched or with a null count, exponential histograms), instances without a
    principal or software version, '' next to null, three windows, spread over several partitions,
    When the roll-ups are computed on the JVM and by the oracle (Spark SQL),
    Then they are the same rows."""
    metrics = _frame(jvm, _client_metrics(seed=1)).repartition(3)
    with _shuffled_over(jvm, 7):  # partials of one key from three partitions must meet in one of seven
        n = assert_same_rollups(rollups_on_jvm(metrics, in_one_task=one_task), rollups(metrics))
    assert n > 500


@pytest.mark.parametrize("one_task", [False, True], ids=["two-merges", "one-task"])
def test_jvm_rollups_equal_the_sql_rollups_on_client_windows_output(jvm: Any, one_task: bool) -> None:
    """Given the client_metrics ClientWindows computes from the synthetic producers and hand-made pushes
    (restarts, counter drops, delta and non-monotonic sums, NaN gauges, delta and cumulative histograms,
    exponential histograms, summaries, records without labels),
    When the roll-ups are computed both ways,
    Then they are the same rows, quantiles included."""
    raw = jvm.createDataFrame(_raw_records(), RAW_SCHEMA_DDL)
    metrics = client_metrics_from_records(raw).persist()
    try:
        mine = rollups_on_jvm(metrics, in_one_task=one_task)
        assert mine.where("p99 IS NOT NULL").count() > 10
        assert assert_same_rollups(mine, rollups(metrics)) > 300
    finally:
        metrics.unpersist()


def _reads_cached_rows(metrics: Any, dimensions: dict[str, tuple[str, ...]] | None = None) -> bool:
    from kct.aggregation.client_windows import quantile_spec
    from kct.aggregation.transforms import ROLLUP_DIMENSIONS

    return bool(metrics.sparkSession._jvm.dev.kct.otlp.Rollups.readsCachedRows(
        metrics._jdf, dimension_spec(dimensions or ROLLUP_DIMENSIONS), quantile_spec()))


@pytest.mark.parametrize("one_task", [False, True], ids=["two-merges", "one-task"])
def test_jvm_rollups_read_a_cached_frame_as_cached_and_equal_the_sql_rollups(jvm: Any, one_task: bool) -> None:
    """Given the mixed client_metrics (resets an int column, as ClientWindows writes it) cached whole, and
    the same rows with their columns in another order and the counts as longs, cached too,
    When the roll-ups are computed on the JVM, which then reads the cached rows as they are (no projection of
    the columns it needs), and by the oracle (Spark SQL),
    Then they are the same rows; a frame that is not a whole cache, or lacks a column, is read selected."""
    rows = _client_metrics(seed=3, instances=6, windows=2)
    metrics = _frame(jvm, rows).repartition(3).persist()
    reordered = _frame(jvm, rows).selectExpr(
        "cast(count as bigint) as count", "cast(resets as bigint) as resets",
        *reversed([c for c in CLIENT_METRICS_COLUMNS if c not in ("count", "resets")])).persist()
    try:
        for frame in (metrics, reordered):
            assert _reads_cached_rows(frame)
            assert assert_same_rollups(rollups_on_jvm(frame, in_one_task=one_task), rollups(frame)) > 200
        assert not _reads_cached_rows(metrics.select("*", F.lit(1).alias("one")))  # a plan over the cache
        assert not _reads_cached_rows(metrics.drop("principal"))
        assert not _reads_cached_rows(_frame(jvm, rows))
        assert not _reads_cached_rows(metrics, {"instance": ("points",)})  # a dimension that is not a string
    finally:
        metrics.unpersist()
        reordered.unpersist()


@pytest.mark.parametrize("one_task", [False, True], ids=["two-merges", "one-task"])
def test_jvm_rollups_honour_the_dimensions_given(jvm: Any, one_task: bool) -> None:
    """Given other dimensions than ROLLUP_DIMENSIONS (one per instance, one of two columns in another order),
    When the roll-ups are computed both ways with them,
    Then they are the same rows, named after those dimensions.

    (No column in two dimensions: the SQL path then names a grouping set after every dimension whose columns
    it holds, the last one winning, which the JVM does not mirror.)"""
    dims = {"instance": ("client_instance_id",), "who": ("principal", "client_id")}
    metrics = _frame(jvm, _client_metrics(seed=2, instances=5, windows=2))
    mine = rollups_on_jvm(metrics, dims, in_one_task=one_task)
    assert assert_same_rollups(mine, rollups(metrics, dims)) > 100
    assert {r["dimension"] for r in mine.select("dimension").distinct().collect()} == set(dims)


@pytest.mark.parametrize("one_task", [False, True], ids=["two-merges", "one-task"])
def test_jvm_rollups_read_columns_of_other_types_as_the_types_they_take(jvm: Any, one_task: bool) -> None:
    """Given client_metrics read back as Spark infers the table's folders (`date` a date, not a string) and
    counts as ints, not cached (so read through the select), and the same frame cached,
    When rolled up on the JVM,
    Then the rows are those of the same client_metrics with `date` a string (it is cast, not read as a string
    where it holds an int: that read garbage, and copied ~GBs of it into the groups' keys)."""
    rows = _client_metrics(seed=5, instances=4, windows=2)
    typed = _frame(jvm, rows).withColumn("date", F.to_date("date")).withColumn("points", F.col("points").cast("int"))
    cached = typed.persist()
    try:
        for frame in (typed, cached):
            assert not _reads_cached_rows(frame)
            assert assert_same_rollups(rollups_on_jvm(frame, in_one_task=one_task), rollups(_frame(jvm, rows))) > 100
    finally:
        cached.unpersist()


@pytest.mark.parametrize("one_task", [False, True], ids=["two-merges", "one-task"])
def test_jvm_rollups_of_no_rows_are_no_rows(jvm: Any, one_task: bool) -> None:
    """Given no client_metrics rows, When rolled up on the JVM, Then no rows, with the SQL path's schema."""
    empty = jvm.createDataFrame([], CM_DDL)
    assert assert_same_rollups(rollups_on_jvm(empty, in_one_task=one_task), rollups(empty)) == 0


def test_dimension_spec_refuses_names_it_cannot_carry() -> None:
    assert dimension_spec({"a": ("x", "y"), "b": ("z",)}) == "a:x,y;b:z"
    with pytest.raises(ValueError, match="roll-up dimension"):
        dimension_spec({"a;b": ("x",)})
    with pytest.raises(ValueError, match="roll-up dimension"):
        dimension_spec({"a": ()})


def _lineage(df: Any) -> tuple[int, str]:
    """The partitions of `df`'s rows and the lineage of the RDD that computes them."""
    rdd = df._jdf.queryExecution().toRdd()
    return int(rdd.getNumPartitions()), str(rdd.toDebugString())


def test_jvm_rollups_in_one_task_merge_every_partition_once_without_a_shuffle(jvm: Any) -> None:
    """Given client_metrics in several partitions, read without a shuffle,
    When rolled up in one task, and in two merges,
    Then the same rows; the one task's come in one partition and nothing is shuffled for them, where two
    merges shuffle their partial rows; and the job merges in one task the roll-ups of up to
    ROLLUP_ROWS_PER_TASK client_metrics rows, of more in two merges."""
    metrics = _frame(jvm, _client_metrics(seed=4, instances=6, windows=2))
    partitions, lineage = _lineage(metrics)
    assert partitions >= 2 and "ShuffledRowRDD" not in lineage

    one, two = rollups_on_jvm(metrics, in_one_task=True), rollups_on_jvm(metrics, in_one_task=False)
    assert assert_same_rollups(one, two) > 100
    partitions, lineage = _lineage(one)
    assert partitions == 1 and "ShuffledRowRDD" not in lineage
    assert "ShuffledRowRDD" in _lineage(two)[1]

    assert _lineage(rollups_of(metrics, ROLLUP_ROWS_PER_TASK))[0] == 1
    assert "ShuffledRowRDD" in _lineage(rollups_of(metrics, ROLLUP_ROWS_PER_TASK + 1))[1]
