"""The streaming job's foreachBatch functions (kct.aggregation.job) when Spark replays a micro-batch: after
a driver crash, the batch Spark had not committed runs again with the same id and the same records; its
outputs already appended must not be appended twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aggregation_helpers import point, points_df

from kct.aggregation import job
from kct.aggregation.config import AggregationConfig, ParquetOutputConfig, RunConfig, SourceConfig, WindowConfig

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


def test_a_replayed_metrics_batch_appends_its_windows_once(spark: Any, tmp_path: Path) -> None:
    """Given micro-batch 0 (windows 0 and 1) and micro-batch 1 (window 2, which finalizes window 1),
    When batch 1 runs twice (the replay after a crash before Spark committed it),
    Then client_metrics holds each finalized window once, and as many rows as an uninterrupted run."""
    cfg = config(tmp_path)
    write = job._metrics_batch_writer(spark, cfg)
    first = points_df(spark, [point(QTIME, t, 1.0 + t) for t in (10, 40, 70, 100)])
    second = points_df(spark, [point(QTIME, t, 1.0 + t) for t in (130, 160)])
    write(first, 0)
    write(second, 1)
    once = sorted((r.window_start, r.metric) for r in rows(spark, cfg, "client_metrics"))
    write(second, 1)
    again = sorted((r.window_start, r.metric) for r in rows(spark, cfg, "client_metrics"))
    assert len(once) == 2 and len(set(once)) == 2
    assert again == once


def test_a_replayed_terminations_batch_appends_them_once(spark: Any, tmp_path: Path) -> None:
    """Given a micro-batch with a terminating push, When it runs twice with the same batch id (a replay)
    and then the next batch runs, Then the terminations table holds one row per terminating push."""
    cfg = config(tmp_path)
    write = job._terminations_batch_writer(spark, cfg)
    ending = points_df(spark, [point(QTIME, 70, 1.0, terminating=True, offset=2)])
    later = points_df(spark, [point(QTIME, 80, 1.0, terminating=True, offset=5, client_instance_id="inst-2")])
    write(ending, 0)
    write(ending, 0)
    assert [r.offset for r in rows(spark, cfg, "terminations")] == [2]
    write(later, 1)
    assert sorted(r.offset for r in rows(spark, cfg, "terminations")) == [2, 5]
