"""Which engine computes client_metrics and their roll-ups (`source.aggregation`), in batch and stream mode.

Two engines give the same rows: Spark SQL over the decoded points (kct.aggregation.transforms), and the
decoder jar's per-client Java loop (kct.aggregation.client_windows) with its roll-ups on the JVM
(kct.aggregation.rollups_jvm). The choice is made here only, from the config and whether the jar loads.
"""

from __future__ import annotations

import logging
from typing import Any

from kct.aggregation.client_windows import client_metrics_from_records
from kct.aggregation.config import AggregationConfig
from kct.aggregation.rollups_jvm import rollups_on_jvm
from kct.aggregation.session import register_jvm_decoder
from kct.aggregation.source import decode_records
from kct.aggregation.transforms import aggregate_client_metrics
from kct.aggregation.transforms import rollups as rollups_with_sql

__all__ = ["ROLLUP_ROWS_PER_TASK", "client_metrics", "rollups", "use_client_windows"]

log = logging.getLogger(__name__)

# client_metrics rows whose roll-ups one task merges (kct.aggregation.rollups_jvm, `in_one_task`): more are
# merged in two steps around a shuffle. One task over 180,000 rows (1M points) took 0.47-0.58 task CPU-s with
# its write where two merges took 0.81-0.84 (bench/spark_throughput.py). Its hash map then holds the groups of up to
# this many rows, as a first-merge task of a one-file write (outputs.ROWS_PER_FILE) over 4 shuffle partitions did.
ROLLUP_ROWS_PER_TASK = 500_000


def use_client_windows(spark: Any, cfg: AggregationConfig) -> bool:
    """Whether client_metrics are computed with ClientWindows, in batch and stream mode (`source.aggregation`;
    the decoder jar holds it)."""
    chosen = cfg.source.aggregation
    if chosen == "sql" or (chosen == "auto" and cfg.source.decoder == "python"):
        return False
    if register_jvm_decoder(spark):
        return True
    if chosen == "jvm":
        raise RuntimeError("source.aggregation is jvm but the OTLP decoder jar is not available: "
                           "build it with `python dev/spark-deps/install.py --decoder-only`")
    return False


def client_metrics(cfg: AggregationConfig, records: Any, client_windows: bool) -> Any:
    """client_metrics of the records, by `source.aggregation` (`client_windows`, from `use_client_windows`):
    Spark SQL over the decoded points, or the per-client Java loop (kct.aggregation.client_windows), which
    needs the decoder jar."""
    size, lookback = cfg.window.size_seconds, cfg.window.counter_lookback_windows
    if client_windows:
        log.info("client_metrics per client instance on the JVM (ClientWindows), roll-ups on the JVM")
        return client_metrics_from_records(records, window_seconds=size, lookback_windows=lookback)
    log.info("client_metrics from the decoded points with Spark SQL")
    return aggregate_client_metrics(decode_records(records, cfg), window_seconds=size, lookback_windows=lookback)


def rollups(metrics: Any, client_windows: bool, rows: int) -> Any:
    """The roll-ups of client_metrics (`rows` of them): on the JVM (kct.aggregation.rollups_jvm) when
    ClientWindows computed them (the decoder jar is then loaded), in one task up to ROLLUP_ROWS_PER_TASK rows,
    else with Spark SQL (transforms.rollups): the same rows."""
    if not client_windows:
        return rollups_with_sql(metrics)
    return rollups_on_jvm(metrics, in_one_task=rows <= ROLLUP_ROWS_PER_TASK)
