"""Windows over micro-batches: what each micro-batch finalizes, the state it hands the next one (kept by the
job's StateStore), replays and restarts, checked on the oracle's stream over points
(tests/aggregation_oracle/sql_stream.py), which the job's stream over records is held to
(test_client_windows_stream.py). The reference is the batch aggregation of the same points.

Windows are 60 s; `t` is seconds after T0 (a minute boundary), so window k holds t in [60k, 60k+60).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from aggregation_helpers import point, points_df, window
from aggregation_oracle.sql_stream import advance

from kct.aggregation.stream import StateStore

pytestmark = pytest.mark.spark

SENT = "org.apache.kafka.producer.record.sent.total"
QTIME = "org.apache.kafka.producer.record.queue.time.max"
S = 1_000_000_000


def counter(t: float, value: float, start_s: float, **kw: Any) -> dict[str, Any]:
    return point(SENT, t, value, type="sum", temporality="cumulative", monotonic=True, start_s=start_s, **kw)


def micro_batch(spark: Any, store: StateStore, batch_id: int, points: Any, **kw: Any) -> list[Any]:
    """What the job's foreachBatch does with one micro-batch: advance, collect the finalized rows, save."""
    kw = {"window_seconds": 60, "watermark_seconds": 60, "lookback_windows": 5, **kw}
    points = points.persist()
    step = advance(store.load(batch_id), points, **kw)
    rows = [] if step.finalized is None else step.finalized.collect()
    store.save(batch_id, step.state)
    points.unpersist()
    return rows


def by_key(rows: list[Any]) -> dict[tuple[Any, ...], Any]:
    return {(r.client_instance_id, r.metric, r.attributes_key, r.window_start.timestamp()): r for r in rows}


def test_late_points_within_the_watermark_count_and_beyond_it_are_dropped(spark: Any, tmp_path: Path) -> None:
    """Given micro-batches (watermark 60 s) that first see points in windows 0 and 3 (windows 0 and 1 are
    final: they end 60 s or more before t=200),
    When a late point for window 0 (final already) and one for window 2 (late, not final) arrive, with a
    counter point in window 2, and then a point in window 6 finalizes windows 2 to 4,
    Then window 0 holds only its original point, window 2 holds the late point, and the counter's delta in
    window 2 is taken against its point of window 0, which came in the first micro-batch (state)."""
    store = StateStore(spark, str(tmp_path / "state"))
    batches = [[point(QTIME, 10, 1.0), point(QTIME, 200, 3.0), counter(10, 100, 5)],
               [point(QTIME, 20, 99.0), point(QTIME, 130, 2.0), counter(130, 160, 5)],
               [point(QTIME, 400, 6.0)]]
    finalized = [micro_batch(spark, store, i, points_df(spark, rows)) for i, rows in enumerate(batches)]
    first, second, third = ({r.window_start.timestamp(): r for r in rows if r.metric == m}
                            for rows in finalized for m in (QTIME,))
    assert set(first) == {window(0)} and (first[window(0)].points, first[window(0)].value_max) == (1, 1.0)
    assert second == {}
    assert set(third) == {window(2), window(3)}
    assert (third[window(2)].points, third[window(2)].value_last) == (1, 2.0)
    sent = {r.window_start.timestamp(): r.delta for rows in finalized for r in rows if r.metric == SENT}
    assert sent == {window(0): 100.0, window(2): 60.0}
    assert store.load(3).final_before_s == int(window(5))


def test_an_empty_micro_batch_finalizes_nothing_and_keeps_the_state(spark: Any, tmp_path: Path) -> None:
    """Given a first micro-batch with a point in window 0 only (not final: nothing is newer),
    When an empty micro-batch follows,
    Then neither finalizes a window, and the pending point is still there for the next one."""
    store = StateStore(spark, str(tmp_path / "state"))
    assert micro_batch(spark, store, 0, points_df(spark, [point(QTIME, 10, 1.0)])) == []
    assert micro_batch(spark, store, 1, points_df(spark, [point(QTIME, 10, 1.0)]).limit(0)) == []
    state = store.load(2)
    assert state.pending is not None and state.pending.count() == 1
    rows = micro_batch(spark, store, 2, points_df(spark, [point(QTIME, 200, 2.0)]))
    assert [(r.window_start.timestamp(), r.value_last) for r in rows] == [(window(0), 1.0)]


def synthetic_points(spark: Any) -> Any:
    """Realistic points: 3 producers pushing every 10 s for 12 minutes, one restarting (counters from zero,
    new start time) after 6 minutes; cumulative counters, gauges and a cumulative histogram."""
    from aggregation_oracle.python_decoder import decode_points

    from kct.aggregation.decode import RAW_SCHEMA_DDL
    from kct.aggregation.synthetic import LATENCY_BOUNDS, SyntheticClient

    t0 = 1_700_000_040 * S
    clients = [SyntheticClient(f"producer-{i}", started_ns=t0 - 2 * S, seed=i + 1) for i in range(3)]
    records = []
    for k in range(72):
        now = t0 + k * 10 * S + 3 * S
        if k == 36:
            c = clients[1]
            c.started_ns, c.records_sent, c.connections, c.latency_sum = now - S, 0, 0, 0.0
            c.latency_buckets = [0] * (len(LATENCY_BOUNDS) + 1)
        records.extend(c.push(now) for c in clients)
    stamp = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    raw = spark.createDataFrame([(r.key, r.value, "t", 0, i, stamp, r.headers) for i, r in enumerate(records)],
                                RAW_SCHEMA_DDL)
    return decode_points(raw).persist()


def assert_same_rows(got: list[Any], want: list[Any]) -> None:
    got_rows, want_rows = by_key(got), by_key(want)
    assert len(got_rows) == len(got), "a window was emitted twice"
    assert set(got_rows) == set(want_rows)
    for key, row in want_rows.items():
        got_row = got_rows[key].asDict()
        for name, value in row.asDict().items():  # sums may add up in another order: floats within 1e-12
            expected = pytest.approx(value, rel=1e-12) if isinstance(value, float) else value
            assert got_row[name] == expected, (key, name)


def test_micro_batches_give_the_batch_result_with_resets_and_late_points(spark: Any, tmp_path: Path) -> None:
    """Given 12 minutes of realistic points (a counter reset with a new start time mid-way) cut into 5
    micro-batches by arrival, where some points arrive one micro-batch late (still within the watermark),
    When each micro-batch advances the stream,
    Then every window the stream finalized equals the batch aggregation of all points, row for row,
    including the windows whose deltas start from a point of an earlier micro-batch."""
    from aggregation_oracle.sql_engine import aggregate_client_metrics
    from pyspark.sql import functions as F

    points = synthetic_points(spark)
    minute = F.floor(F.col("time_unix_nano") / F.lit(60 * S)) - F.lit(1_700_000_040 // 60)
    # Batch b gets the points of minutes [2.4b, 2.4b + 2.4), except that a tenth of the pushes of each batch
    # (by offset) come in the next batch instead: late, within the watermark of 240 s.
    arrival = F.floor(minute / F.lit(2.4)) + F.when(F.col("offset") % 10 == 3, 1).otherwise(0)
    staged = points.withColumn("_b", arrival).persist()
    store = StateStore(spark, str(tmp_path / "state"))
    streamed: list[Any] = []
    batches = int(staged.agg(F.max("_b")).first()[0]) + 1
    for b in range(batches):
        streamed += micro_batch(spark, store, b, staged.where(F.col("_b") == b).drop("_b"), watermark_seconds=240)
    final_before = store.load(batches).final_before_s
    assert final_before is not None
    batch = aggregate_client_metrics(points, window_seconds=60, lookback_windows=5).where(
        F.col("window_start") < F.timestamp_seconds(F.lit(final_before))).collect()
    assert len(batch) > 100
    assert sum(r.resets or 0 for r in batch) >= 2
    assert_same_rows(streamed, batch)


def test_a_replayed_micro_batch_and_a_restart_give_the_uninterrupted_result(spark: Any, tmp_path: Path) -> None:
    """Given the same realistic points in 4 micro-batches,
    When the third micro-batch is run twice (a crash after its state was saved, before Spark committed it),
    and the job then restarts with a new StateStore on the same folder,
    Then the finalized windows equal those of an uninterrupted run, with no window emitted twice."""
    from pyspark.sql import functions as F

    points = synthetic_points(spark)
    pushes = int(points.agg(F.max("offset")).first()[0]) + 1
    staged = points.withColumn("_b", F.expr(f"offset * 4 div {pushes}")).persist()

    def batch(b: int) -> Any:
        return staged.where(F.col("_b") == b).drop("_b")

    plain = StateStore(spark, str(tmp_path / "plain"))
    uninterrupted = [row for b in range(4) for row in micro_batch(spark, plain, b, batch(b))]
    crashing = StateStore(spark, str(tmp_path / "crash"))
    attempts = [micro_batch(spark, crashing, b, batch(b)) for b in range(3)]
    again = micro_batch(spark, crashing, 2, batch(2))  # the replay: the same windows as the first attempt
    assert len(again) > 0
    assert_same_rows(again, attempts[2])
    restarted = StateStore(spark, str(tmp_path / "crash"))
    replayed = [row for rows in attempts for row in rows] + micro_batch(spark, restarted, 3, batch(3))
    assert len(uninterrupted) > 100
    assert_same_rows(replayed, uninterrupted)


def test_series_state_is_bounded_by_the_lookback(spark: Any, tmp_path: Path) -> None:
    """Given a counter seen once in window 0 and a gauge much later (window 20),
    When the stream finalizes up to window 18,
    Then the counter's last point is no longer kept (no window to come could pair with it)."""
    store = StateStore(spark, str(tmp_path / "state"))
    micro_batch(spark, store, 0, points_df(spark, [counter(10, 100, 5), point(QTIME, 200, 1.0)]))
    state = store.load(1)
    assert state.last is not None and state.last.count() == 1
    micro_batch(spark, store, 1, points_df(spark, [point(QTIME, 1230, 1.0)]), lookback_windows=5)
    state = store.load(2)
    assert state.last is not None and state.last.count() == 0


def test_a_checkpoint_holding_points_of_the_removed_sql_stream_is_refused_at_start(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Given a checkpoint whose newest state holds pending points of the Spark SQL stream (a job upgraded in
    place from a version that could run it), when the stream starts, then it fails before reading the topic,
    naming a new checkpoint as the fix; with a fresh checkpoint, or a state of records (the job's), it goes on
    to read the topic; and `advance_records` refuses a state of points too."""
    from kct.aggregation import session, stream_writer
    from kct.aggregation.config import AggregationConfig
    from kct.aggregation.stream import StreamState, advance_records
    from kct.aggregation.stream_writer import run_stream, state_store

    class TopicRead(Exception):
        pass

    def read(*_args: object, **_kwargs: object) -> None:
        raise TopicRead

    monkeypatch.setattr(session, "register_jvm_decoder", lambda _spark: True)
    monkeypatch.setattr(stream_writer, "read_records", read)

    def config(checkpoints: Path) -> AggregationConfig:
        return AggregationConfig.model_validate({
            "source": {"bootstrapServers": "k:9092"}, "parquet": {"path": str(tmp_path / "out")},
            "run": {"checkpointPath": str(checkpoints)}})

    with pytest.raises(TopicRead):
        run_stream(spark, config(tmp_path / "fresh"))
    resumed = config(tmp_path / "sql")
    store = state_store(spark, resumed)
    micro_batch(spark, store, 0, points_df(spark, [counter(10, 5, start_s=-1), counter(70, 9, start_s=-1)]))
    assert store.holds_pending_points()
    with pytest.raises(RuntimeError, match="new checkpoint"):
        run_stream(spark, resumed)
    with pytest.raises(ValueError, match="new checkpoint"):
        advance_records(store.load(1), spark.range(0).toDF("x"), window_seconds=60, watermark_seconds=60,
                        lookback_windows=5)
    records = config(tmp_path / "jvm")
    state_store(spark, records).save(0, StreamState(pending=spark.range(1).toDF("x"), max_time_ns=0,
                                                    final_before_s=0, records=True))
    assert not state_store(spark, records).holds_pending_points()
    with pytest.raises(TopicRead):
        run_stream(spark, records)


def test_a_state_is_read_back_with_the_schema_it_was_saved_with_and_older_states_still_load(
        spark: Any, tmp_path: Path) -> None:
    """Given a saved state, when it is loaded, then its parts are read with the schema kept in its meta.json
    (not inferred from Parquet footers: an extra column recorded there comes back, as nulls); and a state
    saved before schemas were kept (no `schemas` in meta.json) loads with the inferred ones."""
    import json

    from kct.aggregation.stream import StreamState

    store = StateStore(spark, str(tmp_path / "state"))
    pending = spark.createDataFrame([(1, "a")], "n BIGINT, s STRING")
    store.save(0, StreamState(pending=pending, max_time_ns=5, final_before_s=0, records=True))
    loaded = store.load(1)
    assert loaded.pending is not None and loaded.last is None
    assert [(f.name, f.dataType.simpleString()) for f in loaded.pending.schema] == [("n", "bigint"), ("s", "string")]
    assert [tuple(r) for r in loaded.pending.collect()] == [(1, "a")]

    meta_path = tmp_path / "state" / "0" / "meta.json"
    (tmp_path / "state" / "0" / ".meta.json.crc").unlink()  # Hadoop's checksum of the file edited here
    meta = json.loads(meta_path.read_text())
    meta["schemas"]["pending"]["fields"].append({"name": "extra", "type": "double", "nullable": True, "metadata": {}})
    meta_path.write_text(json.dumps(meta))
    with_extra = store.load(1).pending
    assert with_extra is not None and [tuple(r) for r in with_extra.collect()] == [(1, "a", None)]

    del meta["schemas"]
    meta_path.write_text(json.dumps(meta))
    older = store.load(1).pending
    assert older is not None and [tuple(r) for r in older.select("n", "s").collect()] == [(1, "a")]
    assert older.columns == ["n", "s"]
