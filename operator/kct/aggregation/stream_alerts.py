"""A micro-batch's alerts, with the look-back that reaches into earlier micro-batches.

A rule fires when a metric breaches for `forSeconds`: a breach run may begin in windows an earlier
micro-batch finalized. The stream keeps the rules' metrics over their look-back in its state
(StreamState.alert_rows, kct.aggregation.stream) and reads the client_metrics table back only when the state
does not cover them (a new checkpoint, rules changed, a state from before they were kept). Batch mode sees
every window at once and calls transforms.alerts directly.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F

from kct.aggregation.config import AggregationConfig
from kct.aggregation.outputs import table_path
from kct.aggregation.stream import AlertRowsFor, StreamState
from kct.aggregation.time_bounds import time_bound
from kct.aggregation.transforms import alerts

__all__ = ["alerts_span", "alerts_with_history", "kept_alert_rows", "next_alert_rows"]

_HOUR_US = 3_600_000_000


def alerts_span(cfg: AggregationConfig) -> list[Any]:
    """The aggregates of a micro-batch's client_metrics `alerts_with_history` needs (none without rules), for
    the writer to compute with its row count in one job: the first window start (µs), the first date the
    rules' look-back reaches and the last date (yyyy-MM-dd in the session's time zone, as the table's `date`
    column has them, not Python's)."""
    if not cfg.rules:
        return []
    return [F.unix_micros(F.min("window_start")),
            F.date_format(F.min("window_start") - F.expr(f"INTERVAL {_alerts_horizon(cfg)} SECONDS"), "yyyy-MM-dd"),
            F.max("date")]


def _alerts_horizon(cfg: AggregationConfig) -> int:
    return max(r.for_seconds for r in cfg.rules) + 2 * cfg.window.size_seconds


def _rule_metrics(cfg: AggregationConfig) -> tuple[str, ...]:
    """The metrics the rules watch, sorted, each once: the only client_metrics rows alerts read."""
    return tuple(sorted({r.metric for r in cfg.rules}))


def alerts_with_history(spark: Any, batch: Any, cfg: AggregationConfig, span: tuple[Any, ...] | None = None,
                        kept: StreamState | None = None) -> tuple[Any, Any]:
    """Alerts for this micro-batch's windows, and the rows of the rules' look-back for the next micro-batch's
    state (None, None without rules or rows). A breach run may have started in earlier micro-batches: the rows
    before this batch's first window come from `kept` (the previous state, `kept_alert_rows`) when it holds
    them for these rules, else from the client_metrics table (a stream started before they were kept, a new
    checkpoint, rules changed). Only the table's rows before this batch's first window are read, so whether
    this batch's own append has landed yet does not matter. `span`: `alerts_span` of `batch`, when the
    caller computed it already.

    The time bounds change every micro-batch: as time_bounds.time_bound (not literals), they leave the
    generated code as it was, so it is not compiled again; a coarser bound (the hour), a TIMESTAMP literal,
    is what the Parquet reader skips row groups by (compiled again once an hour)."""
    if not cfg.rules:
        return None, None
    metrics = list(_rule_metrics(cfg))  # isin unpacks a list, not a tuple
    first_us, since, until = span if span is not None else batch.agg(*alerts_span(cfg)).first()
    if first_us is None:
        return None, None
    low_us = first_us - _alerts_horizon(cfg) * 1_000_000
    ours = batch.where(F.col("metric").isin(metrics))
    if kept is not None and kept_alert_rows(cfg, kept, first_us):
        before = None if kept.alert_rows is None else (
            kept.alert_rows.where(F.unix_micros("window_start") >= time_bound(spark, low_us)))
    else:
        dates = _date_partitions(spark, table_path(cfg, "client_metrics"), since, until)
        before = None if not dates else (
            # The table's schema is the batch's (no job reading a footer to infer it; `date` read as the string
            # the batch has, the same folder name when written back).
            spark.read.schema(batch.schema).option("basePath", table_path(cfg, "client_metrics")).parquet(*dates)
            .where(F.col("metric").isin(metrics))
            .where(F.col("window_start") >= F.timestamp_micros(F.lit(low_us // _HOUR_US * _HOUR_US)))
            .where(F.unix_micros("window_start") >= time_bound(spark, low_us))
            .where(F.unix_micros("window_start") < time_bound(spark, first_us)))
    history = ours if before is None else before.unionByName(ours)
    found = alerts(history, cfg.rules)
    fired = None if found is None else found.where(F.unix_micros("window_start") >= time_bound(spark, first_us))
    return fired, history


def kept_alert_rows(cfg: AggregationConfig, kept: StreamState | None, first_us: int) -> bool:
    """Whether the previous state's alert rows cover what this micro-batch's alerts look back to: the rules'
    metrics, from this batch's first window less the rules' look-back on."""
    if kept is None or kept.alert_rows_for is None:
        return False
    covered = kept.alert_rows_for
    return (set(_rule_metrics(cfg)) <= set(covered.metrics)
            and first_us - _alerts_horizon(cfg) * 1_000_000 >= covered.since_s * 1_000_000)


def next_alert_rows(spark: Any, cfg: AggregationConfig, history: Any, previous: StreamState,
                    final_before_s: int | None) -> tuple[Any, AlertRowsFor | None]:
    """The alert rows the next state keeps: the rows of `history` (this micro-batch's, None: it finalized no
    window) the next micro-batches' look-back can reach, i.e. of windows from `final_before_s` less the
    rules' look-back on (those finalized later start at `final_before_s` or after)."""
    if not cfg.rules or final_before_s is None:
        return None, None
    if history is None:  # nothing finalized: what the previous state kept still holds, if it kept any
        return previous.alert_rows, previous.alert_rows_for
    since_s = final_before_s - _alerts_horizon(cfg)
    rows = history.where(F.unix_micros("window_start") >= time_bound(spark, since_s * 1_000_000))
    return rows, AlertRowsFor(_rule_metrics(cfg), since_s)


def _date_partitions(spark: Any, table: str, since: str, until: str) -> list[str]:
    """The folders of `table`'s date partitions from `since` to `until` (yyyy-MM-dd, both included): reading only
    them, Spark lists only their files, not the whole table's (which grows with every micro-batch)."""
    jvm = spark.sparkContext._jvm
    root = jvm.org.apache.hadoop.fs.Path(table)
    fs = root.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(root):  # nothing written yet
        return []
    low, high = f"date={since}", f"date={until}"
    names = [status.getPath().getName() for status in fs.listStatus(root) if status.isDirectory()]
    return [f"{table}/{name}" for name in sorted(names) if name.startswith("date=") and low <= name <= high]
