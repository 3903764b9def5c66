"""Event-time windows over micro-batches: which windows a micro-batch finalizes, and the state between them.

The streaming job does not use Spark's stateful aggregation (it would need the whole per-series history of
a window in its state store, or every point copied into later windows). Each micro-batch instead aggregates
the windows it finalizes with ClientWindows (kct.aggregation.client_windows, on the JVM), and carries a
small state to the next:

    pending   the *records* with a point in a window not final yet (each record's point time range,
              `_times`, is read in Java without point rows): a record is kept until its newest point's
              window is final
    last      each cumulative series' newest point among the finalized windows (LAST_POINT_COLUMNS), so the
              next window's delta is taken against it: exact across windows, micro-batches and restarts
    max_time  the newest point time seen (event time); windows ending `watermarkSeconds` before it are final
    final_before  windows starting before it were finalized; a point for one of them is late and dropped
    alert_rows    the client_metrics rows of the alert rules' metrics over the rules' look-back (the longest
              `forSeconds` + two windows), so a breach run that began in earlier micro-batches is seen
              without reading the table back (kct.aggregation.stream_writer keeps them; `alert_rows_for` says for
              which metrics and look-back, None where they are not kept)

Each micro-batch aggregates the kept and new records with a point in the windows it finalizes
([final_before before, final_before now)), over those points only, so a window is computed once, from all
of its points, as a batch run over the same records does; a record with no point there stays pending
without being decoded. Late points (before the earlier final_before) are ignored and counted. The same
stream over decoded points in Spark SQL is the tests' oracle (tests/aggregation_oracle/sql_stream.py).

`advance_records` is pure Spark (DataFrames in, DataFrames out); `StateStore` keeps one state per
micro-batch id on the checkpoint's file system, written before Spark commits the batch and read back by the
next one. A micro-batch replayed after a crash reads the state of the batch before it and gives the same
result, so the state is idempotent by batch id; each output is marked written per batch id, so a replay
does not append it twice.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from kct.aggregation.client_windows import client_metrics_and_last_rows, last_points_of, metrics_of, points_before
from kct.aggregation.time_bounds import time_bound

__all__ = ["POINTS_STATE_ERROR", "Advance", "AlertRowsFor", "StateStore", "StreamState", "advance_records"]

_NS = 1_000_000_000
# A checkpoint of a version that could aggregate in Spark SQL over points may hold points pending: the job
# keeps records, and cannot tell which records those points came from.
POINTS_STATE_ERROR = ("the stream's state holds pending data points of the Spark SQL engine, which the job no "
                      "longer runs (it keeps records): start the stream on a new checkpoint (run.checkpointPath)")


@dataclass(frozen=True)
class StreamState:
    """What one micro-batch hands the next (see the module docstring). The empty state has no DataFrames."""

    pending: DataFrame | None = None
    last: DataFrame | None = None
    max_time_ns: int | None = None
    final_before_s: int | None = None
    # pending holds records (advance_records). False: a state without pending records, or one of the Spark SQL
    # stream over points, which the job no longer runs (StateStore.holds_pending_points finds those).
    records: bool = False
    alert_rows: DataFrame | None = None
    alert_rows_for: AlertRowsFor | None = None
    # The offset each partition's next micro-batch should start at (kct.aggregation.retention_gaps; None: not
    # known yet), and the offsets skipped because retention deleted them, counted since the checkpoint began.
    next_offsets: Mapping[int, int] | None = None
    skipped_offsets: int = 0


@dataclass(frozen=True)
class AlertRowsFor:
    """What a state's alert rows cover: the rules' metrics, and windows starting from `since_s` on (the
    windows finalized later always start after it). `alert_rows` None with this set: there were none."""

    metrics: tuple[str, ...]
    since_s: int


@dataclass(frozen=True)
class Advance:
    """One micro-batch's result: the client_metrics rows of the windows it finalized (None: none), the
    points that arrived too late (their window was final already), and the state for the next batch.
    `finalized` and `state.last` both derive from `sorted_points` (ClientWindows' rows: client_metrics and
    each series' newest point in one; the tests' Spark SQL oracle puts its points sorted per series there):
    persist it before computing them to aggregate once."""

    finalized: DataFrame | None
    late_points: int
    state: StreamState
    sorted_points: DataFrame | None = None
    also: tuple[Any, ...] = ()  # advance_records' `also` aggregates, in order (empty: none asked)


def _final_before(state: StreamState, batch_max: int | None, *, window_seconds: int,
                  watermark_seconds: int) -> tuple[int | None, int | None]:
    """The newest point time seen and the start of the first window not final: (None, None) before any point."""
    max_time = max((t for t in (state.max_time_ns, batch_max) if t is not None), default=None)
    if max_time is None:
        return None, None
    size = int(window_seconds)
    final_before = (max_time // _NS - int(watermark_seconds)) // size * size
    if state.final_before_s is not None:
        final_before = max(final_before, state.final_before_s)
    return max_time, final_before


def advance_records(state: StreamState, records: DataFrame, *, window_seconds: int, watermark_seconds: int,
                    lookback_windows: int, also: Sequence[Column] = ()) -> Advance:
    """Add a micro-batch of records (decode.RAW_SCHEMA_DDL plus `_times`, client_windows.with_push_times) to
    `state`; aggregate the windows now final, per client instance by ClientWindows. A window [s, s + size) is
    final once the newest point time is at least `watermark_seconds` past its end.
    `also`: aggregates over `records` the caller wants too, computed in the same job (`Advance.also`).

    `finalized` is a filter of `sorted_points` (here ClientWindows' rows, client_metrics and last points in
    one): persist that first. `records` is read more than once: persist it."""
    if state.pending is not None and not state.records:
        raise ValueError(POINTS_STATE_ERROR)
    spark = records.sparkSession
    # The newest point time, the late points (before the windows already final) and `also` in one job.
    cut = None if state.final_before_s is None else state.final_before_s * _NS
    late_points = F.lit(0) if cut is None else F.when(F.col("_times")[0] < time_bound(spark, cut),
                                                      points_before(records, cut))
    newest = records.agg(F.max(F.col("_times")[1]), F.sum(late_points), *also).first()
    extra = () if newest is None else tuple(newest[2:])
    max_time, final_before = _final_before(state, None if newest is None else newest[0],
                                           window_seconds=window_seconds, watermark_seconds=watermark_seconds)
    if max_time is None or final_before is None:
        return Advance(None, 0, state, also=extra)
    late = int((None if newest is None else newest[1]) or 0)
    on_time = records.where(F.col("_times").isNotNull())
    if cut is not None:
        on_time = records.where(F.col("_times")[1] >= time_bound(spark, cut))  # records with a point not late
    everything = on_time if state.pending is None else state.pending.unionByName(on_time)
    next_pending = everything.where(F.col("_times")[1] >= time_bound(spark, final_before * _NS))
    if state.final_before_s is not None and final_before <= state.final_before_s:
        return Advance(None, late, StreamState(pending=next_pending, last=state.last, max_time_ns=max_time,
                                               final_before_s=final_before, records=True), also=extra)
    # ClientWindows ignores the points from `final_before` on, so a record whose points all lie there adds
    # nothing to this micro-batch's rows: it stays pending, but is neither shuffled nor decoded now. With a
    # trigger shorter than the watermark, a record would otherwise go through ClientWindows in every
    # micro-batch it is pending in, not only in the ones that finalize its windows.
    due = everything.where(F.col("_times")[0] < time_bound(spark, final_before * _NS))
    rows = client_metrics_and_last_rows(
        due, window_seconds=window_seconds, lookback_windows=lookback_windows, previous=state.last,
        from_ns=None if state.final_before_s is None else state.final_before_s * _NS, until_ns=final_before * _NS)
    # A series' last point older than this can never be the previous point of a window still to come.
    horizon_ns = (final_before - int(lookback_windows) * int(window_seconds)) * _NS
    last = last_points_of(rows).where(F.col("time_unix_nano") >= time_bound(spark, horizon_ns))
    next_state = StreamState(pending=next_pending, last=last, max_time_ns=max_time, final_before_s=final_before,
                             records=True)
    return Advance(metrics_of(rows), late, next_state, rows, also=extra)


class StateStore:
    """StreamState per micro-batch id under `root` (any Hadoop file system the checkpoint is on):
    `<root>/<batch id>/{pending,last,alert_rows}` as Parquet plus `meta.json` (with the offsets expected next
    and the count skipped by retention), written under a temporary name and
    renamed, so a state is there whole or not at all; `<root>/outputs/<batch id>/<output>` marks an output
    (table, topic) a batch wrote. The two newest states are kept."""

    KEEP = 2

    def __init__(self, spark: Any, root: str) -> None:
        self._spark = spark
        self._root = root.rstrip("/")
        jvm = spark.sparkContext._jvm
        self._Path = jvm.org.apache.hadoop.fs.Path
        self._fs = self._Path(self._root).getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def saved_batches(self) -> list[int]:
        """The micro-batch ids whose state is saved, oldest first."""
        root = self._Path(self._root)
        if not self._fs.exists(root):
            return []
        names = [status.getPath().getName() for status in self._fs.listStatus(root)]
        return sorted(int(n) for n in names if n.isdigit())

    def load(self, batch_id: int) -> StreamState:
        """The state the newest micro-batch before `batch_id` left (empty when there is none)."""
        earlier = [b for b in self.saved_batches() if b < batch_id]
        if not earlier:
            return StreamState()
        base = f"{self._root}/{earlier[-1]}"
        meta = self._meta(base)
        schemas = meta.get("schemas", {})

        def read(part: str) -> DataFrame | None:
            if not meta[part]:
                return None
            reader = self._spark.read
            # The schema the state was written with (states from before it was kept: inferred): Spark then
            # reads no Parquet footer to plan the read, ~0.2-0.5 s per micro-batch and part here.
            if part in schemas:
                reader = reader.schema(StructType.fromJson(schemas[part]))
            frame: DataFrame = reader.parquet(f"{base}/{part}")
            return frame

        kept = meta.get("alertRowsFor")  # states saved before alert rows were kept have none
        return StreamState(
            pending=read("pending"),
            last=read("last"),
            max_time_ns=meta["maxTimeNs"], final_before_s=meta["finalBeforeS"], records=meta.get("records", False),
            alert_rows=read("alert_rows") if meta.get("alert_rows") else None,
            alert_rows_for=None if kept is None else AlertRowsFor(tuple(kept["metrics"]), int(kept["sinceS"])),
            next_offsets=None if meta.get("nextOffsets") is None else {
                int(partition): int(offset) for partition, offset in meta["nextOffsets"].items()},
            skipped_offsets=int(meta.get("skippedOffsets", 0)),
        )

    def holds_pending_points(self) -> bool:
        """Whether the newest saved state keeps pending points (of the Spark SQL stream earlier versions could
        run), which the job cannot take over (it keeps records): POINTS_STATE_ERROR."""
        batches = self.saved_batches()
        if not batches:
            return False
        meta = self._meta(f"{self._root}/{batches[-1]}")
        return bool(meta["pending"]) and not meta.get("records", False)

    def _meta(self, base: str) -> dict[str, Any]:
        stream = self._fs.open(self._Path(f"{base}/meta.json"))
        try:
            meta: dict[str, Any] = json.loads(bytes(stream.readAllBytes()).decode())
        finally:
            stream.close()
        return meta

    def save(self, batch_id: int, state: StreamState) -> None:
        """Write `state` as batch `batch_id`'s (replacing one left by an earlier attempt); drop old states."""
        final = self._Path(f"{self._root}/{batch_id}")
        staging = f"{self._root}/_staging-{batch_id}"
        self._fs.delete(self._Path(staging), True)
        parts = {"pending": state.pending, "last": state.last, "alert_rows": state.alert_rows}
        kept = state.alert_rows_for
        meta = {"maxTimeNs": state.max_time_ns, "finalBeforeS": state.final_before_s,
                **{part: df is not None for part, df in parts.items()},
                "records": state.records,
                "alertRowsFor": None if kept is None else {"metrics": list(kept.metrics), "sinceS": kept.since_s},
                "nextOffsets": None if state.next_offsets is None else {
                    str(partition): offset for partition, offset in state.next_offsets.items()},
                "skippedOffsets": state.skipped_offsets,
                "schemas": {part: df.schema.jsonValue() for part, df in parts.items() if df is not None}}
        for part, df in parts.items():
            if df is not None:
                df.write.mode("overwrite").parquet(f"{staging}/{part}")
        out = self._fs.create(self._Path(f"{staging}/meta.json"), True)
        try:
            out.write(json.dumps(meta).encode())
        finally:
            out.close()
        self._fs.delete(final, True)
        if not self._fs.rename(self._Path(staging), final):
            raise OSError(f"could not rename {staging} to {final}")
        for old in self.saved_batches()[: -self.KEEP]:
            self._fs.delete(self._Path(f"{self._root}/{old}"), True)

    def _marker(self, batch_id: int, output: str) -> Any:
        return self._Path(f"{self._root}/outputs/{batch_id}/{output}")

    def written(self, batch_id: int, output: str) -> bool:
        """Whether micro-batch `batch_id` already wrote `output` (a table, or the Kafka topic)."""
        return bool(self._fs.exists(self._marker(batch_id, output)))

    def mark_written(self, batch_id: int, output: str) -> None:
        self._fs.create(self._marker(batch_id, output), True).close()

    def forget_outputs_before(self, batch_id: int) -> None:
        """Drop the marks of batches before `batch_id` (only the newest batch is ever replayed)."""
        folder = self._Path(f"{self._root}/outputs")
        if not self._fs.exists(folder):
            return
        for status in self._fs.listStatus(folder):
            name = status.getPath().getName()
            if name.isdigit() and int(name) < batch_id:
                self._fs.delete(status.getPath(), True)
