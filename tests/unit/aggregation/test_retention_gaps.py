"""Offsets the stream skipped because retention deleted them (kct.aggregation.retention_gaps): the pure count,
the offsets a micro-batch read, the running total kept in the stream state, and the writer's WARNING."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from aggregation_helpers import point, records_df

from kct.aggregation.config import AggregationConfig, ParquetOutputConfig, RunConfig, SourceConfig, WindowConfig
from kct.aggregation.retention_gaps import (
    METRIC_NAME,
    METRIC_SOURCE,
    describe_skipped,
    next_offsets,
    offsets_read,
    skipped_offsets,
)
from kct.aggregation.stream import StateStore, StreamState
from kct.aggregation.stream_writer import metrics_batch_writer, state_store

QTIME = "org.apache.kafka.producer.record.queue.time.max"


def test_the_offsets_between_the_expected_and_the_first_read_are_skipped() -> None:
    """Given partition 0 expected at 100 and first read at 130, partition 1 read where expected, Then 30
    offsets of partition 0 were skipped and none of partition 1."""
    assert skipped_offsets({0: 100, 1: 50}, {0: 130, 1: 50}) == {0: 30}


def test_nothing_is_skipped_on_a_new_checkpoint_or_when_reading_resumes_lower() -> None:
    """Given no expectation (the first micro-batch of a checkpoint), Then nothing is counted; Given a first read
    below the expected offset (the topic recreated under the same name), Then that is not a skip either."""
    assert skipped_offsets(None, {0: 500}) == {}
    assert skipped_offsets({0: 100}, {0: 3}) == {}


def test_a_partition_the_topic_gained_is_expected_from_offset_zero() -> None:
    """Given partition 2 added since the last micro-batch and first read at 40, Then its 40 offsets before
    were deleted before the job saw them."""
    assert skipped_offsets({0: 10, 1: 10}, {0: 10, 2: 40}) == {2: 40}


def test_the_next_expected_offsets_follow_the_last_read_and_keep_quiet_partitions() -> None:
    """Given partitions 0 and 1 expected, and a micro-batch reading only partition 1 up to 79 and new partition 2
    up to 4, Then 0 keeps its expectation, 1 expects 80 and 2 expects 5."""
    assert next_offsets({0: 10, 1: 50}, {1: 79, 2: 4}) == {0: 10, 1: 80, 2: 5}
    assert next_offsets(None, {0: 9}) == {0: 10}


def test_the_log_lists_the_partitions_in_order() -> None:
    assert describe_skipped({3: 7, 0: 120}) == "partition 0: 120, partition 3: 7"


@pytest.mark.spark
def test_the_offsets_a_micro_batch_read_are_its_first_and_last_per_partition(spark: Any) -> None:
    """Given records of partitions 0 (offsets 5, 6, 9) and 1 (offset 2), Then first and last per partition."""
    records = spark.createDataFrame([(0, 5), (0, 9), (1, 2), (0, 6)], "partition INT, offset BIGINT")
    assert offsets_read(records) == ({0: 5, 1: 2}, {0: 9, 1: 2})


@pytest.mark.spark
def test_the_expected_offsets_and_the_skipped_total_survive_in_the_state(spark: Any, tmp_path: Path) -> None:
    """Given a state with offsets expected and 42 offsets skipped, When saved and loaded, Then both come back;
    Given a state saved before they were kept (no keys in meta.json), Then it loads with none expected and 0."""
    store = StateStore(spark, str(tmp_path / "state"))
    store.save(0, StreamState(next_offsets={0: 10, 3: 7}, skipped_offsets=42))
    loaded = store.load(1)
    assert (loaded.next_offsets, loaded.skipped_offsets) == ({0: 10, 3: 7}, 42)

    meta_path = tmp_path / "state" / "0" / "meta.json"
    (tmp_path / "state" / "0" / ".meta.json.crc").unlink()  # Hadoop's checksum of the file edited here
    meta = json.loads(meta_path.read_text())
    del meta["nextOffsets"], meta["skippedOffsets"]
    meta_path.write_text(json.dumps(meta))
    older = store.load(1)
    assert (older.next_offsets, older.skipped_offsets) == (None, 0)


@pytest.mark.spark
def test_the_writer_warns_of_offsets_retention_took_and_keeps_the_total_across_a_replay(
        jvm_decoder: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Given micro-batch 0 reading offsets 0-1 of partition 0, and micro-batch 1 starting at offset 10 (8 deleted
    by retention meanwhile), When the writer runs both and batch 1 is replayed, Then batch 0 warns of nothing,
    batch 1 warns at WARNING of 8 skipped offsets naming the partition, and the state's total is 8 after the
    replay too (counted against the state before the batch, not added twice)."""
    spark = jvm_decoder
    cfg = AggregationConfig(
        source=SourceConfig(bootstrap_servers="unused:9092"), parquet=ParquetOutputConfig(path=str(tmp_path / "out")),
        run=RunConfig(checkpoint_path=str(tmp_path / "checkpoints")), window=WindowConfig(size_seconds=60,
                                                                                         watermark_seconds=0))
    write = metrics_batch_writer(spark, cfg)
    first = records_df(spark, [point(QTIME, 10, 1.0, offset=0), point(QTIME, 40, 2.0, offset=1)])
    after_gap = records_df(spark, [point(QTIME, 70, 3.0, offset=10), point(QTIME, 100, 4.0, offset=11)])
    with caplog.at_level(logging.WARNING, logger="kct.aggregation.stream_writer"):
        write(first, 0)
        assert not [r for r in caplog.records if "skipped" in r.getMessage()]
        write(after_gap, 1)
        write(after_gap, 1)  # the replay after a crash before Spark committed batch 1
    warnings = [r for r in caplog.records if "skipped" in r.getMessage()]
    assert [r.levelno for r in warnings] == [logging.WARNING, logging.WARNING]
    assert warnings[0].getMessage() == (
        "batch 1: 8 offsets skipped, deleted by the topic's retention before the job read them (partition 0: 8); "
        "8 since the checkpoint began")
    state = state_store(spark, cfg).load(2)
    assert (state.skipped_offsets, state.next_offsets) == (8, {0: 12})
    # The metric: the counter the driver's Spark metrics system exports (its sinks: /metrics/json, JMX, ...).
    sources = spark.sparkContext._jvm.org.apache.spark.SparkEnv.get().metricsSystem().getSourcesByName(METRIC_SOURCE)
    assert sources.size() == 1
    assert sources.apply(0).metricRegistry().getCounters().get(METRIC_NAME).getCount() == 8
