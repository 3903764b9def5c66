"""Batch mode: one read of the topic up to its current end, every window (also the still-open ones), every
output overwritten. For tests, demos and backfills.

The topic is read once and its records kept (they are small next to their points); client_metrics, which
every other output but terminations derives from, is computed once and kept too; the outputs then only
read those two caches, so they are written side by side (outputs.concurrently).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from kct.aggregation.client_windows import client_metrics_from_records
from kct.aggregation.config import AggregationConfig
from kct.aggregation.decode import jvm_points
from kct.aggregation.otlp_export import WindowExporter
from kct.aggregation.outputs import concurrently, files_for, send_to_kafka, send_to_otlp, write_counted
from kct.aggregation.rollups_jvm import rollups_of, workload_rollups_of
from kct.aggregation.session import require_jvm_engine
from kct.aggregation.source import read_records
from kct.aggregation.terminating import may_terminate
from kct.aggregation.transforms import alerts, terminations

__all__ = ["run_batch"]


def run_batch(spark: Any, cfg: AggregationConfig, records: Any = None) -> dict[str, int]:
    """Aggregate everything currently in the topic; overwrite the outputs; rows written per table.

    The topic is read once (its records kept, they are small next to their points) and aggregated once into
    client_metrics by ClientWindows, per client instance on the JVM (every other output but terminations
    derives from them: kept too); terminations decode only the records that may hold one. `points` is the
    sum of client_metrics' `points`, counted while writing it (every point is in exactly one window's row),
    so no job counts the decoded points. Each table is written in files sized to client_metrics' rows
    (`outputs.files_for`; terminations and alerts in one). The outputs only read the two caches, so they are
    written at the same time (`outputs.concurrently`). Fails first, naming the fix, without the decoder jar.
    `records`: the records to aggregate instead of the topic's (tests, backfills from files)."""
    require_jvm_engine(spark)
    records = (read_records(spark, cfg, streaming=False) if records is None else records).persist()
    try:
        metrics = client_metrics_from_records(records, window_seconds=cfg.window.size_seconds,
                                              lookback_windows=cfg.window.counter_lookback_windows).persist()
        rows = metrics.count()  # fills the cache the writes read
        outputs = concurrently(_batch_outputs(spark, cfg, records, metrics, rows), spark)
        written = {table: counted for table, counted in outputs.items() if counted is not None}
        counts = {"points": written["client_metrics"]["points"]}
        counts.update({table: counted["rows"] for table, counted in written.items()})
        metrics.unpersist()
        return counts
    finally:
        records.unpersist()


def _batch_outputs(spark: Any, cfg: AggregationConfig, records: Any, metrics: Any,
                   rows: int) -> dict[str, Callable[[], dict[str, int] | None]]:
    """`run_batch`'s writes by output, client_metrics first (Spark's FIFO scheduler serves the first job
    submitted first). Each derived table is also built in its write, so it overlaps the client_metrics write
    (roll-ups on the JVM in two merges run their first stage when built; in one task, in their write). Each
    returns its rows counted while written (`outputs.write_counted`), None when it wrote no table (no rules:
    no alerts; the Kafka topic)."""
    files = files_for(rows)

    def derived(table: str, build: Callable[[], Any], files: int) -> Callable[[], dict[str, int] | None]:
        def write() -> dict[str, int] | None:
            df = build()
            return None if df is None else write_counted(df, cfg, table, "overwrite", files)
        return write

    outputs: dict[str, Callable[[], dict[str, int] | None]] = {
        "client_metrics": partial(write_counted, metrics, cfg, "client_metrics", "overwrite", files,
                                  observed_sums=("points",)),
        "rollups": derived("rollups", lambda: rollups_of(metrics, rows), files),
        "workload_rollups": derived("workload_rollups", lambda: workload_rollups_of(metrics, rows), files),
        "terminations": derived(
            "terminations", lambda: terminations(jvm_points(records.where(may_terminate(spark)))), 1),
        "alerts": derived("alerts", lambda: alerts(metrics, cfg.rules), 1),
    }
    if cfg.kafka_output is not None:
        outputs["kafka"] = partial(send_to_kafka, metrics, cfg.kafka_output)
    if cfg.export is not None:
        exporter = WindowExporter(cfg.export)

        def export() -> None:
            send_to_otlp(spark, metrics, cfg, exporter)
        outputs["otlp"] = export
    return outputs
