"""The job's cache serializer (dev.kct.otlp.RowCache, `spark.sql.cache.serializer` of the sessions the job
creates): rows kept as UnsafeRow bytes instead of Spark's compressed column buffers.

The shared test session was started without it (the serializer is a static setting, and Spark keeps the first
one it creates for the whole JVM), so the tests call the serializer's two conversions themselves: rows in, the
cached batches, rows out, all columns or some, and compare with the frame read directly. That the job's
sessions use it is tested on `build_session`'s settings; the job's tables with it are the e2e tests'."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import pytest

from kct.aggregation.session import cache_conf

pytestmark = pytest.mark.spark

DDL = ("id bigint, name string, payload binary, ts timestamp, ratio double, small int, flag boolean, "
       "amount decimal(20,3), tags map<string,string>, bounds array<double>, headers array<struct<key:string,"
       "value:binary>>")


@pytest.fixture(scope="module")
def jvm(jvm_decoder: Any) -> Any:
    """The session with the decoder jar, which holds RowCache (conftest.py)."""
    return jvm_decoder


def _rows(count: int) -> list[tuple[Any, ...]]:
    """Rows of every kind of column the job caches, nulls and empty values in each, some rows large (a
    batch closes on its byte size as well as on its row count)."""
    out: list[tuple[Any, ...]] = []
    for i in range(count):
        null = i % 7 == 3
        out.append((
            i, None if null else f"client-{i % 13}" * (1 + i % 3),
            None if null else bytes([i % 256]) * (i % 50 if i % 1000 else 1_500_000),
            None if null else dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i),
            None if null else (float("nan") if i % 11 == 0 else i / 3), None if null else i % 5 - 2,
            None if null else i % 2 == 0, None if null else decimal.Decimal(i) / 7,
            None if null else {f"k{j}": (None if j == 1 else f"v{i}") for j in range(i % 4)},
            None if null else [float(j) for j in range(i % 5)],
            None if null else [(f"h{j}", None if j == 2 else b"x" * j) for j in range(i % 4)],
        ))
    return out


def _cached(spark: Any, df: Any) -> tuple[Any, Any]:
    """RowCache and the RDD of batches it makes of `df`, as Spark's cache builds them."""
    serializer = spark._jvm.dev.kct.otlp.RowCache()
    plan = df._jdf.queryExecution()
    return serializer, serializer.convertInternalRowToCachedBatch(
        plan.toRdd(), plan.analyzed().output(), spark._jvm.org.apache.spark.storage.StorageLevel.MEMORY_ONLY(),
        spark._jsparkSession.sessionState().conf())


def _through_cache(spark: Any, df: Any, columns: list[str]) -> Any:
    """`df` cached by RowCache and read back with `columns` only (Spark passes the columns a query reads)."""
    from pyspark.sql import DataFrame

    serializer, cached = _cached(spark, df)
    conf = spark._jsparkSession.sessionState().conf()
    plan = df._jdf.queryExecution()
    selected = df.select(*columns)
    rows = serializer.convertCachedBatchToInternalRow(
        cached, plan.analyzed().output(), selected._jdf.queryExecution().analyzed().output(), conf)
    assert cached.count() >= df.rdd.getNumPartitions()
    return DataFrame(spark._jsparkSession.internalCreateDataFrame(rows, selected._jdf.schema(), False), spark)


def _batches(spark: Any, df: Any) -> int:
    return int(_cached(spark, df)[1].count())


def _sorted(df: Any) -> list[str]:
    return sorted(repr(r) for r in df.collect())


@pytest.mark.parametrize("columns", [
    "id name payload ts ratio small flag amount tags bounds headers",  # all, in order: the rows as they are
    "headers id",                                                        # some, in another order
    "tags",
])
def test_rows_read_back_from_the_cache_equal_the_rows_cached(jvm: Any, columns: str) -> None:
    """Given 15,000 rows over 3 partitions with every column type the job caches (nulls, NaN, empty maps and
    arrays, binaries of up to 1.5 MB),
    when they go through RowCache and are read back with all columns or a selection,
    then the rows equal the frame's own, column for column."""
    df = jvm.createDataFrame(_rows(15_000), DDL).repartition(3)
    wanted = columns.split()
    assert _sorted(_through_cache(jvm, df, wanted)) == _sorted(df.select(*wanted))


def test_a_batch_closes_on_its_row_count_or_on_its_size(jvm: Any) -> None:
    """Given one partition of 10,000 small rows and one of 20 rows of 1 MB,
    when each is cached,
    then the first makes batches of ROWS_PER_BATCH (4,096) rows, 3 in all, and the second batches of ~4 MB
    (BYTES_PER_BATCH), 4 in all, not one of 20 MB."""
    from pyspark.sql import functions as F

    assert _batches(jvm, jvm.range(0, 10_000, numPartitions=1)) == 3
    large = jvm.range(0, 20, numPartitions=1).select(F.expr("repeat('x', 1000000)").alias("s"))
    assert _batches(jvm, large) == 4


def test_rows_computed_by_a_plan_are_cached_as_they_are_read(jvm: Any) -> None:
    """Given rows a projection computes (generated code hands them over in one reused row object),
    when they are cached and read back,
    then every row is its own, not the last one repeated."""
    from pyspark.sql import functions as F

    df = jvm.range(0, 20_000, numPartitions=2).select(F.col("id"), F.concat(F.lit("n"), F.col("id")).alias("s"))
    back = _through_cache(jvm, df, ["id", "s"]).collect()
    assert sorted((r.id, r.s) for r in back) == [(i, f"n{i}") for i in range(20_000)]


def test_the_job_session_caches_rows_when_the_decoder_jar_is_on_its_classpath() -> None:
    """Given the decoder jar (it holds RowCache), the settings `build_session` adds name RowCache as the cache
    serializer; without the jar (the Python decoder) they do not: the class could not be loaded."""
    assert cache_conf(True) == {"spark.sql.cache.serializer": "dev.kct.otlp.RowCache"}
    assert cache_conf(False) == {}
