"""The streaming job's foreachBatch functions (kct.aggregation.stream_writer) when Spark replays a micro-batch: after
a driver crash, the batch Spark had not committed runs again with the same id and the same records; its
outputs already appended must not be appended twice. The micro-batches are records holding hand-picked points
(aggregation_helpers.records_df), as the job reads them; the job's engine needs the decoder jar."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aggregation_helpers import point, records_df

from kct.aggregation import outputs
from kct.aggregation.config import AggregationConfig, ParquetOutputConfig, RunConfig, SourceConfig, WindowConfig
from kct.aggregation.outputs import ROWS_PER_FILE, files_for
from kct.aggregation.stream_alerts import kept_alert_rows
from kct.aggregation.stream_writer import metrics_batch_writer, state_store

pytestmark = pytest.mark.spark

QTIME = "org.apache.kafka.producer.record.queue.time.max"


def config(tmp_path: Path) -> AggregationConfig:
    return AggregationConfig(
        source=SourceConfig(bootstrap_servers="unused:9092"), parquet=ParquetOutputConfig(path=str(tmp_path / "out")),
        run=RunConfig(checkpoint_path=str(tmp_path / "checkpoints")),
        window=WindowConfig(size_seconds=60, watermark_seconds=0),
    )


def rows(spark: Any, cfg: AggregationConfig, table: str) -> list[Any]:
    return list(spark.read.parquet(f"{cfg.parquet.path}/{table}").collect())


def test_a_replayed_metrics_batch_appends_its_windows_once(jvm_decoder: Any, tmp_path: Path) -> None:
    """Given micro-batch 0 (windows 0 and 1) and micro-batch 1 (window 2, which finalizes window 1),
    When batch 1 runs twice (the replay after a crash before Spark committed it),
    Then client_metrics holds each finalized window once, and as many rows as an uninterrupted run."""
    spark = jvm_decoder
    cfg = config(tmp_path)
    write = metrics_batch_writer(spark, cfg)
    first = records_df(spark, [point(QTIME, t, 1.0 + t) for t in (10, 40, 70, 100)])
    second = records_df(spark, [point(QTIME, t, 1.0 + t) for t in (130, 160)])
    write(first, 0)
    write(second, 1)
    once = sorted((r.window_start, r.metric) for r in rows(spark, cfg, "client_metrics"))
    write(second, 1)
    again = sorted((r.window_start, r.metric) for r in rows(spark, cfg, "client_metrics"))
    assert len(once) == 2 and len(set(once)) == 2
    assert again == once


def test_a_replayed_terminations_batch_appends_them_once(jvm_decoder: Any, tmp_path: Path) -> None:
    """Given a micro-batch with a terminating push, When it runs twice with the same batch id (a replay)
    and then the next batch runs, Then the terminations table holds one row per terminating push (written
    by the metrics query's foreachBatch, as its other outputs)."""
    spark = jvm_decoder
    cfg = config(tmp_path)
    write = metrics_batch_writer(spark, cfg)
    ending = records_df(spark, [point(QTIME, 70, 1.0, terminating=True, offset=2)])
    later = records_df(spark, [point(QTIME, 80, 1.0, terminating=True, offset=5, client_instance_id="inst-2")])
    write(ending, 0)
    write(ending, 0)
    assert [r.offset for r in rows(spark, cfg, "terminations")] == [2]
    write(later, 1)
    assert sorted(r.offset for r in rows(spark, cfg, "terminations")) == [2, 5]


def test_a_crash_between_an_append_and_its_mark_does_not_append_twice(jvm_decoder: Any, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Given micro-batch 1 whose client_metrics append completed but whose driver died before marking it,
    When Spark replays batch 1, Then client_metrics holds its window once."""
    spark = jvm_decoder
    from kct.aggregation.stream import StateStore

    cfg = config(tmp_path)
    write = metrics_batch_writer(spark, cfg)
    write(records_df(spark, [point(QTIME, t, 1.0 + t) for t in (10, 40, 70, 100)]), 0)
    second = records_df(spark, [point(QTIME, t, 1.0 + t) for t in (130, 160)])
    mark = StateStore.mark_written

    def crash(store: StateStore, batch_id: int, output: str) -> None:
        if (batch_id, output) == (1, "client_metrics"):
            raise RuntimeError("driver killed")
        mark(store, batch_id, output)

    monkeypatch.setattr(StateStore, "mark_written", crash)
    with pytest.raises(RuntimeError, match="driver killed"):
        write(second, 1)
    monkeypatch.setattr(StateStore, "mark_written", mark)
    metrics_batch_writer(spark, cfg)(second, 1)  # the new driver's replay
    windows = sorted(r.window_start for r in rows(spark, cfg, "client_metrics"))
    assert len(windows) == 2 and len(set(windows)) == 2


def test_a_staged_append_moves_each_file_once_across_attempts(spark: Any, tmp_path: Path) -> None:
    """Given a batch's rows staged in 3 files of which an earlier attempt moved one into the table,
    When the append runs again, Then it writes nothing again and moves the other two: every row once;
    and the next batch's append drops the staging of the one before."""
    from kct.aggregation.delivery import StagedAppend

    table = tmp_path / "table"
    appender = StagedAppend(spark, str(table))
    df = spark.range(30).repartition(3)
    writes: list[str] = []

    def write(path: str) -> None:
        writes.append(path)
        df.write.mode("overwrite").parquet(path)

    staging = Path(appender.staging(7))
    write(str(staging))
    (staging / "_STAGED").touch()
    first = sorted(staging.glob("part-*.parquet"))[0]
    first.rename(table / first.name)
    assert appender.append(7, write) == 2
    assert writes == [str(staging)]
    assert sorted(r.id for r in spark.read.parquet(str(table)).collect()) == list(range(30))
    assert appender.append(7, write) == 0
    appender.append(8, lambda path: spark.range(30, 31).write.mode("overwrite").parquet(path))
    assert not staging.exists()
    assert spark.read.parquet(str(table)).count() == 31


@pytest.mark.parametrize("kept", [True, False], ids=["rows kept in the state", "state from before: the table"])
def test_a_breach_run_across_midnight_is_seen_from_the_kept_rows_or_the_previous_date_and_not_older_ones(
        jvm_decoder: Any, tmp_path: Path, kept: bool) -> None:
    """Given a rule (queue time max > 5000 for more than 120 s) breached from 23:57 on, micro-batch 0 holding
    the windows before midnight and micro-batch 1 those after it, and an old date partition of client_metrics
    that is not Parquet at all; and either batch 0's state as saved (it keeps the rule metric's rows of the
    look-back), with a file that is not Parquet put in batch 0's date partition after it ran, or batch 0's
    state as a version before kept it (no alert rows in it),
    When both micro-batches run,
    Then batch 1's alerts date the run from 23:57: from the state's rows, the table not read at all; or from
    the previous date's partition of the table; and nothing failed on the old partition (only the dates the
    rule's look-back reaches are read). Batch 1's state keeps the rows its successor's look-back reaches."""
    spark = jvm_decoder
    import datetime as dt
    import json

    from pyspark.sql import functions as F

    from kct.aggregation.config import ThresholdRule

    cfg = config(tmp_path).model_copy(update={"rules": (ThresholdRule(
        name="queue", metric=QTIME, field="max", op=">", threshold=5000, for_seconds=120),)})
    old = tmp_path / "out" / "client_metrics" / "date=2023-11-01"
    old.mkdir(parents=True)
    (old / "part-00000-old.parquet").write_bytes(b"not parquet")
    # T0 is 2023-11-14 22:14:00 UTC: t = 6360 s is midnight.
    write = metrics_batch_writer(spark, cfg)
    write(records_df(spark, [point(QTIME, t, 7000.0) for t in (6200, 6230, 6290, 6350)]), 0)
    state = Path(cfg.checkpoint_dir()) / "client_metrics_state"
    meta = json.loads((state / "0" / "meta.json").read_text())
    assert meta["alert_rows"] and meta["alertRowsFor"]["metrics"] == [QTIME]
    if kept:
        junk = tmp_path / "out" / "client_metrics" / "date=2023-11-14" / "part-99999-junk.parquet"
        junk.write_bytes(b"not parquet")
    else:
        del meta["alert_rows"], meta["alertRowsFor"]
        (state / "0" / "meta.json").write_text(json.dumps(meta))
        (state / "0" / ".meta.json.crc").unlink()  # Hadoop's local file system checks a file against it
    write(records_df(spark, [point(QTIME, t, 7000.0) for t in (6370, 6430, 6490)]), 1)
    after_meta = json.loads((state / "1" / "meta.json").read_text())
    assert after_meta["alertRowsFor"] == {"metrics": [QTIME], "sinceS": after_meta["finalBeforeS"] - 120 - 2 * 60}
    kept_rows = spark.read.parquet(str(state / "1" / "alert_rows"))
    assert kept_rows.count() and not kept_rows.where(
        F.unix_seconds("window_start") < after_meta["alertRowsFor"]["sinceS"]).count()
    if kept:
        junk.unlink()  # the alerts table and client_metrics are read below
    fired = rows(spark, cfg, "alerts")
    after = [a for a in fired if a.window_start >= dt.datetime(2023, 11, 15)]
    assert {a.window_start.isoformat() for a in after} == {"2023-11-15T00:00:00", "2023-11-15T00:01:00"}
    assert {a.breach_started_at.isoformat() for a in fired} == {"2023-11-14T23:57:00"}
    assert {a.date for a in after} == {dt.date(2023, 11, 15)}


def test_kept_alert_rows_serve_only_the_rules_and_look_back_they_were_kept_for() -> None:
    """Given a state whose alert rows hold the queue-time metric from t = 1000 s on, and a rule on it looking
    back 240 s (120 s + two 60 s windows),
    Then they serve a micro-batch whose first window starts at 1240 s or later, not one at 1239 s (its look-back
    reaches before them), nor a rule on another metric, nor a state that kept none."""
    from kct.aggregation.config import ThresholdRule
    from kct.aggregation.stream import AlertRowsFor, StreamState

    rule = ThresholdRule(name="queue", metric=QTIME, field="max", op=">", threshold=5000, for_seconds=120)
    cfg = config(Path("/unused")).model_copy(update={"rules": (rule,)})
    kept = StreamState(alert_rows_for=AlertRowsFor((QTIME,), since_s=1000))
    assert kept_alert_rows(cfg, kept, 1240 * 1_000_000)
    assert kept_alert_rows(cfg, kept, 5000 * 1_000_000)
    assert not kept_alert_rows(cfg, kept, 1239 * 1_000_000)
    other = cfg.model_copy(update={"rules": (rule, rule.model_copy(update={"name": "rtt", "metric": "rtt"}))})
    assert not kept_alert_rows(other, kept, 5000 * 1_000_000)
    assert not kept_alert_rows(cfg, StreamState(), 5000 * 1_000_000)
    assert not kept_alert_rows(cfg, None, 5000 * 1_000_000)


def test_a_micro_batch_writes_each_table_in_files_sized_to_its_rows(jvm_decoder: Any, tmp_path: Path) -> None:
    """Given two micro-batches of a few series over several windows (Spark's shuffles spread them over
    every shuffle partition), When they run, Then each wrote one client_metrics and one rollups file per date
    (not one per shuffle partition); and a write is spread over one file per ROWS_PER_FILE rows started."""
    spark = jvm_decoder
    cfg = config(tmp_path)
    write = metrics_batch_writer(spark, cfg)
    series = [{"client_instance_id": f"inst-{i}", "client_id": f"producer-{i}"} for i in range(8)]
    write(records_df(spark, [point(QTIME, t, 1.0 + t, **s) for t in (10, 40, 70, 100) for s in series]), 0)
    write(records_df(spark, [point(QTIME, t, 1.0 + t, **s) for t in (130, 160, 190) for s in series]), 1)
    for table in ("client_metrics", "rollups"):
        files = sorted((tmp_path / "out" / table).rglob("*.parquet"))
        assert [f.parent.name for f in files] == ["date=2023-11-14"] * 2, (table, files)
    assert len(rows(spark, cfg, "client_metrics")) == 8 * 3
    assert [files_for(n) for n in (0, 1, ROWS_PER_FILE, ROWS_PER_FILE + 1)] == [1, 1, 1, 2]


def test_a_batch_whose_output_failed_after_its_state_was_saved_replays_to_the_uninterrupted_result(
        jvm_decoder: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Given a cumulative counter over three micro-batches (its deltas need the last point the state carries
    from one batch to the next), and micro-batch 1 whose rollups write fails while its state is saved
    alongside the outputs,
    When the driver replays batch 1 and goes on with batch 2,
    Then the failed attempt had saved batch 1's state, and client_metrics and rollups equal an uninterrupted
    run's, row for row: the replay started from batch 0's state, not from its own."""
    spark = jvm_decoder

    sent = "org.apache.kafka.producer.record.send.total"

    def counter(times: tuple[int, ...]) -> Any:
        return records_df(spark, [point(sent, t, 10.0 * t, type="sum", temporality="cumulative", monotonic=True,
                                       start_s=0) for t in times])

    batches = [(10, 40, 70, 100), (130, 160, 190), (220, 250, 280)]

    def table_rows(cfg: AggregationConfig, table: str) -> list[str]:
        return sorted(repr(r.asDict()) for r in rows(spark, cfg, table))

    plain = config(tmp_path / "plain")
    for b, times in enumerate(batches):
        metrics_batch_writer(spark, plain)(counter(times), b)

    cfg = config(tmp_path / "failing")
    metrics_batch_writer(spark, cfg)(counter(batches[0]), 0)
    write_table = outputs.write_table

    def disk_full(df: Any, c: AggregationConfig, table: str, *args: Any, **kwargs: Any) -> None:
        if table == "rollups":
            raise OSError("disk full")
        write_table(df, c, table, *args, **kwargs)

    monkeypatch.setattr(outputs, "write_table", disk_full)
    with pytest.raises(OSError, match="disk full"):
        metrics_batch_writer(spark, cfg)(counter(batches[1]), 1)
    monkeypatch.setattr(outputs, "write_table", write_table)
    assert state_store(spark, cfg).saved_batches() == [0, 1]
    replay = metrics_batch_writer(spark, cfg)  # the new driver's
    replay(counter(batches[1]), 1)
    replay(counter(batches[2]), 2)
    for table in ("client_metrics", "rollups"):
        expected = table_rows(plain, table)
        assert len(expected) >= 4 and table_rows(cfg, table) == expected, table
