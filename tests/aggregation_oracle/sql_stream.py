"""The stream over decoded points with Spark SQL: the oracle of the job's stream over records.

The job's stream (kct.aggregation.stream.advance_records) keeps *records* pending and aggregates the windows
a micro-batch finalizes with ClientWindows on the JVM. `advance` here does the same over decoded points with
the Spark SQL oracle (aggregation_oracle.sql_engine): it keeps the points of windows not final yet, and each
cumulative series' newest point, in the same StreamState (with `records` False) and StateStore. The tests
run both over the same micro-batches and compare what each finalizes, row for row
(tests/unit/aggregation/test_client_windows_stream.py), and check the windowing itself on hand-made points
(test_aggregation_stream.py).

A window [s, s + size) is final once the newest point time is at least `watermark_seconds` past its end;
a point for a window already final is late, dropped and counted.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from aggregation_oracle.sql_engine import client_metrics_and_last, sorted_points_of
from kct.aggregation.stream import Advance, StreamState

__all__ = ["advance"]

_NS = 1_000_000_000


def advance(state: StreamState, points: DataFrame, *, window_seconds: int, watermark_seconds: int,
            lookback_windows: int) -> Advance:
    """Add a micro-batch of points (decode.POINT_SCHEMA_DDL) to `state`; aggregate the windows now final.

    A window [s, s + size) is final once the newest point time is at least `watermark_seconds` past its end.
    `points` is read more than once: persist it.
    """
    if state.records and state.pending is not None:
        raise ValueError("the stream state holds records (the job's), not points")
    size = int(window_seconds)
    newest = points.agg(F.max("time_unix_nano")).first()
    batch_max = None if newest is None else newest[0]
    max_time = max((t for t in (state.max_time_ns, batch_max) if t is not None), default=None)
    if max_time is None:
        return Advance(None, 0, state)
    final_before = (max_time // _NS - int(watermark_seconds)) // size * size
    if state.final_before_s is not None:
        final_before = max(final_before, state.final_before_s)
    late = 0
    on_time = points
    if state.final_before_s is not None:
        behind = F.col("time_unix_nano") < F.lit(state.final_before_s * _NS)
        late = int(points.where(behind).count())
        on_time = points.where(~behind)
    everything = on_time if state.pending is None else state.pending.unionByName(on_time)
    final = F.col("time_unix_nano") < F.lit(final_before * _NS)
    final_points = everything.where(final)
    # One sort of the finalized points per series gives both the windows' rows and each series' last point.
    sorted_points = sorted_points_of(final_points, window_seconds=size, lookback_windows=lookback_windows,
                                     previous=state.last)
    metrics, last = client_metrics_and_last(final_points, window_seconds=size, lookback_windows=lookback_windows,
                                            previous=state.last, sorted_points=sorted_points)
    finalized = None
    if state.final_before_s is None or final_before > state.final_before_s:
        finalized = metrics
    # A series' last point older than this can never be the previous point of a window still to come.
    horizon_ns = (final_before - int(lookback_windows) * size) * _NS
    last = last.where(F.col("time_unix_nano") >= F.lit(horizon_ns))
    next_state = StreamState(pending=everything.where(~final), last=last, max_time_ns=max_time,
                             final_before_s=final_before)
    return Advance(finalized, late, next_state, sorted_points)
