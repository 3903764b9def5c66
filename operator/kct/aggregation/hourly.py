"""Hourly mode (`--mode hourly`): one UTC hour of client_metrics rolled up into client_metrics_hourly, that
hour replaced, the table's other hours kept. It reads the job's own table, not the topic, so it runs after
the stream (or a batch) wrote that hour; the operator's ScheduledSparkApplication drains the stream instead
(`--mode stream --until-drained`), this mode runs on a schedule of the user's.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pyspark.sql import functions as F

from kct.aggregation.config import AggregationConfig
from kct.aggregation.outputs import table_path, write_table
from kct.aggregation.transforms import hourly

__all__ = ["run_hourly"]


def run_hourly(spark: Any, cfg: AggregationConfig) -> int:
    """Roll the client_metrics rows of one UTC hour up into client_metrics_hourly (that hour replaced)."""
    if cfg.run.hour:
        start = dt.datetime.strptime(cfg.run.hour, "%Y-%m-%dT%H").replace(tzinfo=dt.UTC)
    else:
        start = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0) - dt.timedelta(hours=1)
    end = start + dt.timedelta(hours=1)
    source = (
        spark.read.parquet(table_path(cfg, "client_metrics"))
        .where(F.col("date") == start.strftime("%Y-%m-%d"))
        .where((F.col("window_start") >= F.lit(start)) & (F.col("window_start") < F.lit(end)))
    )
    rolled = hourly(source).persist()
    rows = rolled.count()
    # Replace only the partitions this hour writes (a re-run of an hour is idempotent per date/metric).
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    previous = table_path(cfg, "client_metrics_hourly")
    try:
        kept = spark.read.parquet(previous).where(
            (F.col("date") == start.strftime("%Y-%m-%d")) & (F.col("window_start") != F.lit(start))
        ).localCheckpoint()
        rolled = kept.select(*rolled.columns).unionByName(rolled)
    except Exception:  # no hourly table yet (the first hour): nothing to keep
        pass
    write_table(rolled, cfg, "client_metrics_hourly", "overwrite")
    return int(rows)
