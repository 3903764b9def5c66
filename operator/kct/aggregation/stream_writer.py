"""Stream mode: one Structured Streaming query over the topic and the `foreachBatch` writer behind it.

Each micro-batch of records goes to the writer, which finalizes the windows the watermark has passed
(kct.aggregation.stream: ClientWindows over the records of those windows plus a small state kept per batch
id under the checkpoint), writes client_metrics, derives roll-ups and alerts from them
(kct.aggregation.stream_alerts), forwards them to the optional Kafka topic and OTLP endpoint
(kct.aggregation.otlp_export: one exporter for the query, its counters cumulative), and writes the micro-batch's
terminations (stateless, from the same cached micro-batch: a second query read the whole topic again for
them). Checkpoints keep offsets and state.

Retention: the source does not fail when the topic's retention deleted offsets the stream had not read yet
(failOnDataLoss=false); each micro-batch counts them (kct.aggregation.retention_gaps), logs them at WARNING, keeps the
running total in the stream state and sets the driver's metric `kct_aggregation.skippedOffsets` to it.

Delivery: each of a micro-batch's outputs is marked written per batch id once written (`write_once`), so a
batch replayed after a crash writes only what it had not. A Parquet append goes through a staging folder
per batch id (outputs.append_once), so a crash between the append and its mark does not append it twice on
replay either; the Kafka output of a batch interrupted mid-way is sent again (at least once).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from pyspark.sql import functions as F

from kct.aggregation.client_windows import with_push_times
from kct.aggregation.config import AggregationConfig
from kct.aggregation.decode import jvm_points
from kct.aggregation.otlp_export import WindowExporter
from kct.aggregation.outputs import append_once, concurrently, files_for, send_to_kafka, send_to_otlp
from kct.aggregation.retention_gaps import (
    SkippedOffsetsMetric,
    describe_skipped,
    next_offsets,
    offsets_read,
    skipped_offsets,
)
from kct.aggregation.rollups_jvm import rollups_of, workload_rollups_of
from kct.aggregation.session import require_jvm_engine
from kct.aggregation.source import read_records
from kct.aggregation.stream import POINTS_STATE_ERROR, Advance, StateStore, StreamState, advance_records
from kct.aggregation.stream_alerts import alerts_span, alerts_with_history, next_alert_rows
from kct.aggregation.terminating import may_terminate
from kct.aggregation.transforms import terminations

__all__ = ["metrics_batch_writer", "run_stream", "state_store", "write_once"]

log = logging.getLogger(__name__)


def run_stream(spark: Any, cfg: AggregationConfig) -> list[Any]:
    """Start the streaming query; with `untilDrained` it stops once it drained the topic. Fails first when the
    decoder jar is missing, or when the checkpoint's state holds points of the Spark SQL engine earlier
    versions could run (stream.POINTS_STATE_ERROR: the job keeps records)."""
    require_jvm_engine(spark)
    if state_store(spark, cfg).holds_pending_points():
        raise RuntimeError(f"{POINTS_STATE_ERROR}; checkpoint {cfg.checkpoint_dir()}")
    records = read_records(spark, cfg, streaming=True)
    writer = (
        records.writeStream.queryName("kct_client_metrics").outputMode("append")
        .option("checkpointLocation", f"{cfg.checkpoint_dir().rstrip('/')}/client_metrics")
        .foreachBatch(metrics_batch_writer(spark, cfg))
    )
    if cfg.run.until_drained:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{cfg.run.trigger_seconds} seconds")
    return [writer.start()]


def state_store(spark: Any, cfg: AggregationConfig) -> StateStore:
    """The stream's state, under the checkpoint."""
    return StateStore(spark, f"{cfg.checkpoint_dir().rstrip('/')}/client_metrics_state")


def _metrics_outputs(spark: Any, cfg: AggregationConfig, metrics: Any, batch_id: int, rows: int,
                     fired: Any = None, exporter: WindowExporter | None = None) -> dict[str, Callable[[], None]]:
    """What a micro-batch's finalized windows (`rows` client_metrics rows) are written to, by output name
    (client_metrics and the roll-ups in files sized to the rows, alerts in one: they are a few rows; `fired`: the
    alerts of `metrics`, `stream_alerts.alerts_with_history`, None: none; `exporter`: the OTLP export's, kept
    across micro-batches for its counters)."""
    files = files_for(rows)

    def write_alerts() -> None:
        if fired is not None:
            append_once(spark, cfg, "alerts", batch_id, fired, files=1)

    out = {
        "client_metrics": lambda: append_once(spark, cfg, "client_metrics", batch_id, metrics, files),
        "rollups": lambda: append_once(spark, cfg, "rollups", batch_id, rollups_of(metrics, rows), files),
        "workload_rollups": lambda: append_once(spark, cfg, "workload_rollups", batch_id,
                                                workload_rollups_of(metrics, rows), files),
        "alerts": write_alerts,
    }
    if cfg.kafka_output is not None:
        kafka = cfg.kafka_output
        out["kafka"] = lambda: send_to_kafka(metrics, kafka)
    if exporter is not None:
        # Marked written per batch id like the others; a replay that sends again sends the same samples
        # (kct.aggregation.otlp_metrics: stamped with the window's end, counters cumulative), never more.
        out["otlp"] = lambda: send_to_otlp(spark, metrics, cfg, exporter)
    return out


def _terminations_output(spark: Any, cfg: AggregationConfig, batch: Any, batch_id: int,
                         may_hold: bool = True) -> Callable[[], None]:
    """A micro-batch's terminations, appended once per batch id like its other outputs. From the micro-batch
    the metrics use (cached): the records that may hold one, decoded here (as `batch.run_batch`). One query
    reads the topic, not a second one for terminations. `may_hold` False: the micro-batch has no record that
    may hold one (`terminating.may_terminate`), so there is nothing to look for."""

    def append() -> None:
        if not may_hold:
            return
        found = terminations(jvm_points(batch.where(may_terminate(spark)).drop("_times")))
        if not found.isEmpty():
            append_once(spark, cfg, "terminations", batch_id, found, files=1)

    return append


# Outputs written only once another is: a micro-batch's alerts are in their table only after the
# client_metrics rows they were found in are in theirs (a reader following an alert finds its windows).
_WRITTEN_AFTER = {"alerts": "client_metrics"}


def write_once(spark: Any, store: Any, batch_id: int, outputs: dict[str, Callable[[], None]],
               alongside: dict[str, Callable[[], None]] | None = None) -> None:
    """Each output not yet written by this batch id (a replay skips what the first attempt wrote). They only
    read the micro-batch's caches, so they are written at the same time (`outputs.concurrently`), but for an
    output of `_WRITTEN_AFTER`, written after the one it reads. `alongside`: writes that run with them every
    attempt, unmarked (the stream state, kept per batch id)."""

    def write(name: str) -> None:
        if not store.written(batch_id, name):
            outputs[name]()
            store.mark_written(batch_id, name)

    def chain(first: str) -> Callable[[], None]:
        following = [name for name, before in _WRITTEN_AFTER.items() if before == first and name in outputs]

        def write_in_order() -> None:
            for name in (first, *following):
                write(name)
        return write_in_order

    firsts = [name for name in outputs if _WRITTEN_AFTER.get(name) not in outputs]
    concurrently({**{name: chain(name) for name in firsts}, **(alongside or {})}, spark)


def metrics_batch_writer(spark: Any, cfg: AggregationConfig) -> Callable[[Any, int], None]:
    """foreachBatch function: a micro-batch of records (decode.RAW_SCHEMA_DDL) -> the windows it finalizes
    (kct.aggregation.stream, ClientWindows): client_metrics, the rollups and
    alerts derived from them, the optional Kafka topic; and the micro-batch's terminations; each written once
    per batch id; and the stream state, saved with them, before Spark commits the batch."""
    store = state_store(spark, cfg)
    span = alerts_span(cfg)
    skipped_metric = SkippedOffsetsMetric(spark)
    exporter = None if cfg.export is None else WindowExporter(cfg.export)

    def step_of(records: Any, previous: StreamState) -> Advance:
        # How many records may hold a termination, counted in advance_records' first job: none (the usual
        # case) spares the terminations their job.
        return advance_records(previous, records, window_seconds=cfg.window.size_seconds,
                               watermark_seconds=cfg.window.watermark_seconds,
                               lookback_windows=cfg.window.counter_lookback_windows,
                               also=[F.count_if(may_terminate(spark))])

    def write(batch: Any, batch_id: int) -> None:
        records = with_push_times(batch).persist()
        try:
            previous = store.load(batch_id)
            first_read, last_read = offsets_read(records)
            skipped = skipped_offsets(previous.next_offsets, first_read)
            skipped_total = previous.skipped_offsets + sum(skipped.values())
            skipped_metric.set_total(skipped_total)
            if skipped:
                log.warning("batch %d: %d offsets skipped, deleted by the topic's retention before the job read them "
                            "(%s); %d since the checkpoint began", batch_id, sum(skipped.values()),
                            describe_skipped(skipped), skipped_total)
            step = step_of(records, previous)
            # ClientWindows' rows feed both client_metrics and the state's last points.
            if step.sorted_points is not None:
                step.sorted_points.persist()
            if step.late_points:
                log.warning("batch %d: %d late points dropped (their window was final)", batch_id, step.late_points)
            metrics = None if step.finalized is None else step.finalized.persist()
            try:
                # The row count (it fills the cache the outputs read) and what the alerts need, in one job.
                counted = None if metrics is None else metrics.agg(F.count(F.lit(1)), *span).first()
                rows = 0 if counted is None else int(counted[0])
                fired, history = (None, None) if metrics is None or not rows else alerts_with_history(
                    spark, metrics, cfg, tuple(counted[1:]) if span and counted is not None else None,
                    previous)
                outputs = {} if metrics is None or not rows else _metrics_outputs(
                    spark, cfg, metrics, batch_id, rows, fired, exporter)
                alert_rows, alert_rows_for = next_alert_rows(spark, cfg, history, previous,
                                                             step.state.final_before_s)
                state = replace(step.state, alert_rows=alert_rows, alert_rows_for=alert_rows_for,
                                next_offsets=next_offsets(previous.next_offsets, last_read),
                                skipped_offsets=skipped_total)
                may_hold = bool(step.also and step.also[0])
                outputs["terminations"] = _terminations_output(spark, cfg, records, batch_id, may_hold)
                # The state is saved while the outputs are written: it is kept per batch id and a replay of
                # this batch loads the one before (StateStore.load), whether or not this attempt saved its own.
                # One after the other, the save added ~0.5 s to a warm micro-batch of 1M points.
                write_once(spark, store, batch_id, outputs,
                           alongside={"state": lambda: store.save(batch_id, state)})
            finally:
                if metrics is not None:
                    metrics.unpersist()
            store.forget_outputs_before(batch_id)
            if step.sorted_points is not None:
                step.sorted_points.unpersist()
        finally:
            records.unpersist()

    return write
