"""The aggregation job's entry point: topic -> data points -> windowed aggregates -> Parquet (and
optionally a topic), in the mode `run.mode` names.

`run(cfg)` is what `kct aggregate` and spark-submit (spark/aggregation_job.py, through
kct.aggregation.command) call. It only builds the session (kct.aggregation.session), hands it to the
mode's module and reports; each mode owns its own wiring:

* `stream` (production): kct.aggregation.stream_writer, one Structured Streaming query, outputs written
  once per micro-batch id;
* `batch`: kct.aggregation.batch, the topic read to its current end, outputs overwritten (tests, demos,
  backfills);
* `hourly`: kct.aggregation.hourly, one UTC hour of client_metrics rolled up into client_metrics_hourly.
"""

from __future__ import annotations

import logging
import time

from kct.aggregation.batch import run_batch
from kct.aggregation.config import AggregationConfig
from kct.aggregation.hourly import run_hourly
from kct.aggregation.session import build_session
from kct.aggregation.stream_writer import run_stream

__all__ = ["run"]

log = logging.getLogger(__name__)


def run(cfg: AggregationConfig) -> int:
    """Run the job as configured; returns a process exit code."""
    spark = build_session(cfg)
    started = time.monotonic()
    if cfg.run.mode == "hourly":
        rows = run_hourly(spark, cfg)
        log.info("hourly roll-up done in %.1fs: rows=%d", time.monotonic() - started, rows)
        return 0
    if cfg.run.mode == "batch":
        counts = run_batch(spark, cfg)
        log.info("batch done in %.1fs: %s", time.monotonic() - started,
                 ", ".join(f"{k}={v}" for k, v in counts.items()))
        return 0
    queries = run_stream(spark, cfg)
    timeout = cfg.run.timeout_seconds or None
    try:
        for query in queries:
            remaining = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
            if remaining is None:
                query.awaitTermination()
            else:
                query.awaitTermination(remaining)
    except KeyboardInterrupt:
        pass
    finally:
        for query in queries:
            if query.isActive:
                query.stop()
    failed = [q.name for q in queries if q.exception() is not None]
    for query in queries:
        if query.exception() is not None:
            log.error("query %s failed: %s", query.name, query.exception())
    log.info("stream stopped after %.1fs", time.monotonic() - started)
    return 1 if failed else 0
