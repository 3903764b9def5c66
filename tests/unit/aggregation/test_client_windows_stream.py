"""The job's stream over records with ClientWindows (kct.aggregation.stream.advance_records) against the
oracle's stream over decoded points with Spark SQL (tests/aggregation_oracle/sql_stream.py) and the batch
aggregation: the same micro-batches of the same
records, the same finalized windows row for row (doubles bit for bit), the same late points, replays,
restarts and bounded state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aggregation_oracle.sql_engine import aggregate_client_metrics
from aggregation_oracle.sql_stream import advance
from test_client_windows import T0, S, _raw_records, _rows

from kct.aggregation.client_windows import client_metrics_from_records, with_push_times
from kct.aggregation.config import AggregationConfig
from kct.aggregation.decode import RAW_SCHEMA_DDL, jvm_points
from kct.aggregation.stream import StateStore, advance_records
from kct.aggregation.stream_writer import metrics_batch_writer
from kct.aggregation.transforms import CLIENT_METRICS_COLUMNS

pytestmark = pytest.mark.spark

KW = {"window_seconds": 60, "watermark_seconds": 120, "lookback_windows": 5}


@pytest.fixture
def jvm(jvm_decoder: Any) -> Any:
    """The session with the decoder jar (conftest.py): this module's tests, run alone, need it registered."""
    return jvm_decoder


def staged(spark: Any, late_beyond: bool) -> tuple[Any, int]:
    """The test records (synthetic producers with restarts and counter drops, hand-made pushes of most
    types, duplicates, pushes out of order) with column `_b`, their micro-batch: by newest point time, 150 s
    per micro-batch; a tenth come one micro-batch late (within the watermark of 120 s), and with
    `late_beyond` a seventeenth three micro-batches late (beyond it: their windows are final by then)."""
    from pyspark.sql import functions as F

    raw = spark.createDataFrame(_raw_records(), RAW_SCHEMA_DDL)
    newest = F.greatest(F.coalesce(F.col("_times")[1], F.lit(T0)), F.lit(T0))
    arrival = F.floor((newest - F.lit(T0)) / F.lit(150 * S)) + F.when(F.col("offset") % 10 == 3, 1).otherwise(0)
    if late_beyond:
        arrival = arrival + F.when(F.col("offset") % 17 == 5, 3).otherwise(0)
    # The exotic push's points lie years from the others: left out (its time would finalize every window).
    timed = with_push_times(raw).where(F.col("_times").isNull() | (F.col("_times")[1] < F.lit(T0 + 3600 * S)))
    out = timed.withColumn("_b", arrival.cast("int")).drop("_times").persist()
    return out, int(out.agg(F.max("_b")).first()[0]) + 1


def assert_close_rows(got: list[tuple[Any, ...]], want: list[tuple[Any, ...]]) -> None:
    """`_rows` lists equal, floats within 1e-12 (as test_aggregation_stream: a window's sums may add up in
    another order in the stream, whose micro-batches hold its points in another order); NaN equals NaN."""
    import math

    def close(a: Any, b: Any) -> bool:
        if isinstance(a, tuple) and isinstance(b, tuple) and a[:1] == b[:1] == ("float",):
            if "nan" in (a[1], b[1]):
                return a[1] == b[1]
            return math.isclose(float.fromhex(a[1]), float.fromhex(b[1]), rel_tol=1e-12, abs_tol=1e-300)
        if isinstance(a, list | tuple) and isinstance(b, list | tuple) and len(a) == len(b):
            return all(close(x, y) for x, y in zip(a, b, strict=True))
        return bool(a == b)

    ident = CLIENT_METRICS_COLUMNS.index("points")  # the columns before it say which row it is
    got_by, want_by = ({repr(r[:ident]): r for r in rows} for rows in (got, want))
    assert len(got_by) == len(got) and len(want_by) == len(want)
    assert set(got_by) == set(want_by)
    for key, row in want_by.items():
        assert close(got_by[key], row), (got_by[key], row)


def run_sql(spark: Any, store: StateStore, batch_id: int, raw: Any) -> tuple[list[Any], int]:
    """The oracle's stream over one micro-batch: the records decoded (the job's decoder, held to the oracle's
    by test_jvm_decoder.py), the points advanced with Spark SQL."""
    points = jvm_points(raw).persist()
    step = advance(store.load(batch_id), points, **KW)
    rows = [] if step.finalized is None else _rows(step.finalized)
    store.save(batch_id, step.state)
    points.unpersist()
    return rows, step.late_points


def run_jvm(spark: Any, store: StateStore, batch_id: int, raw: Any) -> tuple[list[Any], int]:
    """What the job's foreachBatch does with a micro-batch of records when ClientWindows aggregates."""
    records = with_push_times(raw).persist()
    step = advance_records(store.load(batch_id), records, **KW)
    if step.sorted_points is not None:
        step.sorted_points.persist()
    rows = [] if step.finalized is None else _rows(step.finalized)
    store.save(batch_id, step.state)
    if step.sorted_points is not None:
        step.sorted_points.unpersist()
    records.unpersist()
    return rows, step.late_points


def both(spark: Any, tmp_path: Path, late_beyond: bool) -> tuple[list[tuple[list[Any], int]], ...]:
    """Both streams over the same micro-batches: (SQL steps, JVM steps, the staged records)."""
    from pyspark.sql import functions as F

    records, batches = staged(spark, late_beyond)
    sql_store, jvm_store = StateStore(spark, str(tmp_path / "sql")), StateStore(spark, str(tmp_path / "jvm"))
    sql, jvm = [], []
    for b in range(batches):
        raw = records.where(F.col("_b") == b).drop("_b")
        sql.append(run_sql(spark, sql_store, b, raw))
        jvm.append(run_jvm(spark, jvm_store, b, raw))
    assert sql_store.load(batches).final_before_s == jvm_store.load(batches).final_before_s
    return sql, jvm, records


def test_jvm_stream_equals_the_sql_stream_and_the_batch_with_late_points_within_the_watermark(
        jvm: Any, tmp_path: Path) -> None:
    """Given the test records in micro-batches, a tenth of them one micro-batch late (within the watermark),
    When the SQL stream (decoded points) and the JVM stream (records) each advance over them,
    Then each micro-batch finalizes the same client_metrics rows in both, bit for bit, and all of them
    together are the batch aggregation's rows of the final windows (resets and deltas across
    micro-batches included)."""
    from pyspark.sql import functions as F

    sql, jvm_steps, records = both(jvm, tmp_path, late_beyond=False)
    assert [rows for rows, _ in jvm_steps] == [rows for rows, _ in sql]
    assert [late for _, late in sql + jvm_steps] == [0] * 2 * len(sql), [late for _, late in sql + jvm_steps]
    streamed = [r for rows, _ in jvm_steps for r in rows]
    final_before = StateStore(jvm, str(tmp_path / "jvm")).load(10**6).final_before_s
    raw = records.drop("_b")  # the same records (the synthetic clients' ids are random)
    final = F.col("window_start") < F.timestamp_seconds(F.lit(final_before))
    batch = client_metrics_from_records(raw).where(final)
    assert batch.count() > 300
    assert batch.agg(F.sum("resets")).first()[0] >= 3
    assert_close_rows(streamed, _rows(batch))
    assert _rows(aggregate_client_metrics(jvm_points(raw)).where(final)) == _rows(batch)


def test_jvm_stream_drops_and_counts_points_late_beyond_the_watermark_as_the_sql_stream(
        jvm: Any, tmp_path: Path) -> None:
    """Given the test records in micro-batches, some three micro-batches late (their windows are final),
    When both streams advance over them,
    Then both drop and count the same late points and finalize the same rows, micro-batch by micro-batch."""
    sql, jvm_steps, _ = both(jvm, tmp_path, late_beyond=True)
    assert [late for _, late in jvm_steps] == [late for _, late in sql]
    assert sum(late for _, late in sql) > 0
    assert [rows for rows, _ in jvm_steps] == [rows for rows, _ in sql]


def test_jvm_stream_hands_clientwindows_only_records_with_a_point_in_the_windows_it_finalizes(
        jvm: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Given the test records in micro-batches of 150 s (watermark 120 s: each micro-batch's newest records
    have all their points in windows not final yet),
    When the JVM stream advances over them,
    Then no record whose points all lie in windows not final goes to ClientWindows (it stays pending, and is
    aggregated in the micro-batch that finalizes its windows: the other tests compare the rows), and there
    were such records to leave out."""
    from pyspark.sql import functions as F

    from kct.aggregation import client_windows, stream

    handed_too_early: list[int] = []
    aggregate = client_windows.client_metrics_and_last_rows

    def spy(records: Any, **kwargs: Any) -> Any:
        not_due = records.where(F.col("_times")[0] >= F.lit(kwargs["until_ns"]))
        handed_too_early.append(not_due.count())
        return aggregate(records, **kwargs)

    monkeypatch.setattr(stream, "client_metrics_and_last_rows", spy)  # where advance_records looks it up
    records, batches = staged(jvm, late_beyond=False)
    store = StateStore(jvm, str(tmp_path / "jvm"))
    left_pending = 0
    for b in range(batches):
        run_jvm(jvm, store, b, records.where(F.col("_b") == b).drop("_b"))
        state = store.load(b + 1)
        if state.pending is not None and state.final_before_s is not None:
            left_pending += state.pending.where(F.col("_times")[0] >= F.lit(state.final_before_s * S)).count()
    assert handed_too_early and handed_too_early == [0] * len(handed_too_early), handed_too_early
    assert left_pending > 0


def test_jvm_stream_replay_and_restart_give_the_uninterrupted_result(jvm: Any, tmp_path: Path) -> None:
    """Given the test records in micro-batches,
    When the third micro-batch runs twice (a crash after its state was saved, before Spark committed it) and
    the job restarts with a new StateStore on the same folder,
    Then the replay finalizes the same rows as the first attempt, and the whole run equals an uninterrupted
    one, no window twice; the state between micro-batches keeps only records of windows not final yet."""
    from pyspark.sql import functions as F

    records, batches = staged(jvm, late_beyond=False)

    def batch(b: int) -> Any:
        return records.where(F.col("_b") == b).drop("_b")

    plain = StateStore(jvm, str(tmp_path / "plain"))
    uninterrupted = [run_jvm(jvm, plain, b, batch(b))[0] for b in range(batches)]
    crashing = StateStore(jvm, str(tmp_path / "crash"))
    attempts = [run_jvm(jvm, crashing, b, batch(b))[0] for b in range(3)]
    again = run_jvm(jvm, crashing, 2, batch(2))[0]
    assert len(again) > 0 and again == attempts[2]
    restarted = StateStore(jvm, str(tmp_path / "crash"))
    rest = [run_jvm(jvm, restarted, b, batch(b))[0] for b in range(3, batches)]
    assert attempts + rest == uninterrupted
    flat = [r for rows in uninterrupted for r in rows]
    assert len(flat) > 300 and len(set(map(repr, flat))) == len(flat)
    state = plain.load(batches)
    assert state.records and state.pending is not None and state.final_before_s is not None
    kept = with_push_times(state.pending)
    assert kept.where(F.col("_times")[1] < F.lit(state.final_before_s * S)).count() == 0
    assert 0 < state.pending.count() < records.count() / 2


def test_jvm_stream_state_drops_series_beyond_the_lookback(jvm: Any, tmp_path: Path) -> None:
    """Given a counter pushed once in window 0 and a gauge much later (window 20),
    When the stream finalizes up to window 18,
    Then the counter's last point is no longer kept, and no record is kept for a final window."""
    from kct.aggregation.synthetic import build_request
    from kct.otlp import labels as L

    def record(offset: int, t_s: int, metrics: list[dict[str, Any]]) -> tuple[Any, ...]:
        import datetime as dt

        value = build_request({}, metrics)
        return (b"k", value, "t", 0, offset, dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
                [(L.CLIENT_INSTANCE_ID.name, b"inst-1")])

    t = T0 + 10 * S
    counter = {"name": "sent", "type": "sum", "temporality": "cumulative", "monotonic": True,
               "points": [{"time": t, "start": T0, "value": 100.0}]}
    store = StateStore(jvm, str(tmp_path / "state"))
    first = jvm.createDataFrame([record(0, 10, [counter]), record(1, 200, [
        {"name": "g", "type": "gauge", "points": [{"time": T0 + 200 * S, "value": 1.0}]}])], RAW_SCHEMA_DDL)
    run_jvm(jvm, store, 0, first)
    state = store.load(1)
    assert state.last is not None and state.last.count() == 1
    later = jvm.createDataFrame([record(2, 1230, [
        {"name": "g", "type": "gauge", "points": [{"time": T0 + 1230 * S, "value": 1.0}]}])], RAW_SCHEMA_DDL)
    run_jvm(jvm, store, 1, later)
    state = store.load(2)
    assert state.last is not None and state.last.count() == 0
    assert state.pending is not None and state.pending.count() == 1


def test_a_replayed_jvm_metrics_batch_appends_its_windows_once(jvm: Any, tmp_path: Path) -> None:
    """Given the job's foreachBatch with ClientWindows and two micro-batches of records,
    When the second runs twice (a replay), Then client_metrics holds each finalized window once, the rows
    the oracle's stream finalizes from the same micro-batches."""
    from pyspark.sql import functions as F

    from kct.aggregation.config import ParquetOutputConfig, RunConfig, SourceConfig, WindowConfig

    cfg = AggregationConfig(
        source=SourceConfig(bootstrap_servers="unused:9092"),
        parquet=ParquetOutputConfig(path=str(tmp_path / "out")), run=RunConfig(checkpoint_path=str(tmp_path / "cp")),
        window=WindowConfig(size_seconds=60, watermark_seconds=120))

    def table() -> list[Any]:
        # `date` is the table's partition column: it reads back as a date.
        written = jvm.read.parquet(f"{cfg.parquet.path}/client_metrics")
        return _rows(written.withColumn("date", F.col("date").cast("string")), CLIENT_METRICS_COLUMNS)

    records, _ = staged(jvm, late_beyond=False)
    first, second = (records.where(F.col("_b") == b).drop("_b") for b in (1, 2))
    write = metrics_batch_writer(jvm, cfg)
    write(first, 0)
    write(second, 1)
    once = table()
    write(second, 1)
    assert len(once) > 50 and table() == once
    oracle = StateStore(jvm, str(tmp_path / "oracle"))
    finalized = [row for b, raw in enumerate((first, second)) for row in run_sql(jvm, oracle, b, raw)[0]]
    assert sorted(finalized, key=repr) == once


def test_the_jvm_streams_micro_batches_write_the_terminations_batch_mode_finds(jvm: Any, tmp_path: Path) -> None:
    """Given the test records in micro-batches (a terminating push among them) plus a copy of that push
    without its `terminating` header (only its `client.terminating` metric says so), at another offset,
    When the job's foreachBatch with ClientWindows runs over every micro-batch (one of them twice: a replay),
    Then the terminations table holds the rows batch mode derives from all the records: both pushes, once."""
    from pyspark.sql import functions as F

    from kct.aggregation.config import ParquetOutputConfig, RunConfig, SourceConfig, WindowConfig
    from kct.aggregation.transforms import terminations
    from kct.otlp import labels as L

    cfg = AggregationConfig(
        source=SourceConfig(bootstrap_servers="unused:9092"),
        parquet=ParquetOutputConfig(path=str(tmp_path / "out")), run=RunConfig(checkpoint_path=str(tmp_path / "cp")),
        window=WindowConfig(size_seconds=60, watermark_seconds=120))
    records, batches = staged(jvm, late_beyond=False)
    flags = [L.TERMINATING.name.lower(), L.TERMINATING.http_header.lower()]
    flagged = F.exists("headers", lambda h: F.lower(h.key).isin(flags) & (F.lower(h.value.cast("string")) == "true"))
    unflagged = records.where(flagged).withColumn("offset", F.col("offset") + 100_000).withColumn(
        "headers", F.filter("headers", lambda h: ~F.lower(h.key).isin(flags)))
    assert records.where(flagged).count() == 1
    records = records.unionByName(unflagged).persist()
    write = metrics_batch_writer(jvm, cfg)
    for b in range(batches):
        write(records.where(F.col("_b") == b).drop("_b"), b)
        if b == batches // 2:
            write(records.where(F.col("_b") == b).drop("_b"), b)
    columns = tuple(terminations(jvm_points(records.drop("_b"))).columns)
    want = _rows(terminations(jvm_points(records.drop("_b"))), columns)
    table = jvm.read.parquet(f"{cfg.parquet.path}/terminations").withColumn("date", F.col("date").cast("string"))
    got = _rows(table.select(*columns), columns)  # the partition column reads back as a date
    assert len(want) == 2 and got == want


def test_a_time_bound_keeps_the_rows_the_literal_keeps_in_code_that_does_not_change_with_it(jvm: Any) -> None:
    """Given BIGINT times around two bounds,
    When they are filtered by `time_bound(bound)` and by the literal bound,
    Then both keep the same rows, and the generated code (whole-stage codegen) is the same for both bounds
    with time_bound, while it differs with literals: what made each micro-batch compile new classes."""
    from pyspark.sql import functions as F

    from kct.aggregation.time_bounds import time_bound

    # From range(), not local rows: Spark would filter those while planning, with no generated code.
    times = jvm.range(-3, 4).select((F.lit(T0) + F.col("id") * F.lit(S)).alias("t"))

    def kept(bound: Any) -> list[Any]:
        return sorted(r[0] for r in times.where(F.col("t") >= bound).collect())

    def code(bound: Any) -> str:
        frame = times.where(F.col("t") >= bound)
        text: str = jvm.sparkContext._jvm.PythonSQLUtils.explainString(frame._jdf.queryExecution(), "codegen")
        return text[text.index("Generated code:"):]  # the code, not the plan above it

    for bound in (T0 - S, T0, T0 + 2 * S):
        assert kept(time_bound(jvm, bound)) == kept(F.lit(bound)) != []
    assert code(time_bound(jvm, T0)) == code(time_bound(jvm, T0 + S))
    assert code(F.lit(T0)) != code(F.lit(T0 + S))
