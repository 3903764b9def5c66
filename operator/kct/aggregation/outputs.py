"""Where and how the job's tables, its optional Kafka topic and its optional OTLP export are written.

The tables' layout (their folders under `parquet.path`, date partitions, rows clustered by metric inside a
file, files sized by row count), the writes every mode shares (a counted write, an append staged once per
micro-batch id through kct.aggregation.delivery, the JSON records of the Kafka output) and running several
writes side by side. Which rows go where is the caller's: kct.aggregation.batch, .stream_writer, .hourly.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import Producer
from pyspark.sql import Observation
from pyspark.sql import functions as F

from kct.aggregation.config import AggregationConfig, KafkaOutputConfig
from kct.aggregation.delivery import StagedAppend
from kct.aggregation.otlp_export import WindowExporter
from kct.aggregation.otlp_metrics import EXPORT_COLUMNS
from kct.kafka.client_properties import librdkafka_properties, read_properties_dir

__all__ = [
    "EXPORT_STATUS_FILE",
    "ROWS_PER_FILE",
    "TABLES",
    "TERMINATION_LOG",
    "append_once",
    "concurrently",
    "export_status_path",
    "files_for",
    "send_to_kafka",
    "send_to_otlp",
    "table_path",
    "write_counted",
    "write_table",
    "write_termination_message",
]

_T = TypeVar("_T")

TABLES = ("client_metrics", "rollups", "workload_rollups", "terminations", "alerts", "client_metrics_hourly")
# Tables are partitioned by date only: a folder per metric made each write (a micro-batch, a batch task)
# produce one small file per metric it held. Rows are clustered by metric inside each file instead (sorted),
# so a reader's filter on `metric` skips row groups by their statistics.
_PARTITIONS = {
    "client_metrics": ("date",),
    "client_metrics_hourly": ("date",),
    "rollups": ("date",),
    "workload_rollups": ("date",),
    "terminations": ("date",),
    "alerts": ("date",),
}
_CLUSTERING = {
    "client_metrics": ("metric", "window_start"),
    "client_metrics_hourly": ("metric", "window_start"),
    "rollups": ("metric", "window_start"),
    "workload_rollups": ("metric", "window_start"),
    "alerts": ("window_start",),
    "terminations": ("terminated_at",),
}

# Rows per Parquet file a write aims at (client_metrics compresses to ~20-60 bytes a row: tens of MB a file).
# A write made one file per task, i.e. per shuffle partition, whatever its size: a micro-batch of a few
# thousand rows left spark.sql.shuffle.partitions files of some kB per table.
ROWS_PER_FILE = 2_000_000


def table_path(cfg: AggregationConfig, table: str) -> str:
    """The folder of `table` under `parquet.path`."""
    return f"{cfg.parquet.path.rstrip('/')}/{table}"


def files_for(rows: int) -> int:
    """How many files a write of `rows` rows is spread over: one per ROWS_PER_FILE started."""
    return max(1, -(-int(rows) // ROWS_PER_FILE))


def write_table(df: Any, cfg: AggregationConfig, table: str, mode: str, path: str | None = None,
                files: int | None = None) -> None:
    """Write `table` (its date partitions, rows clustered), in at most `files` files per date when given
    (fewer tasks: coalesce never adds a shuffle)."""
    if files is not None:
        df = df.coalesce(files)
    ordered = df.sortWithinPartitions(*_PARTITIONS[table], *_CLUSTERING[table])
    ordered.write.mode(mode).partitionBy(*_PARTITIONS[table]).parquet(path or table_path(cfg, table))


def write_counted(df: Any, cfg: AggregationConfig, table: str, mode: str, files: int,
                  observed_sums: tuple[str, ...] = ()) -> dict[str, int]:
    """Write a table; return its row count (`rows`) and the sums of `observed_sums` columns, counted while
    writing (an observed metric, no second job)."""
    observed = Observation(f"kct_{table}_rows")
    metrics = [F.count(F.lit(1)).alias("rows"), *(F.sum(c).alias(c) for c in observed_sums)]
    write_table(df.observe(observed, *metrics), cfg, table, mode, files=files)
    return {name: int(observed.get.get(name) or 0) for name in ("rows", *observed_sums)}


def append_once(spark: Any, cfg: AggregationConfig, table: str, batch_id: int, df: Any,
                files: int | None = None) -> None:
    """Append a micro-batch's rows to `table` through its staging (kct.aggregation.delivery): a replay of
    the batch does not append them again, even when the crash came right after the append."""
    StagedAppend(spark, table_path(cfg, table)).append(
        batch_id, lambda path: write_table(df, cfg, table, "overwrite", path, files))


def send_to_kafka(df: Any, out: KafkaOutputConfig) -> None:
    """Aggregate rows as JSON records (key = client instance id or roll-up value), one producer per task."""
    secret = {} if out.client_properties_dir is None else librdkafka_properties(
        read_properties_dir(Path(out.client_properties_dir)))
    conf = {"bootstrap.servers": out.bootstrap_servers, "enable.idempotence": True, "acks": "all",
            "compression.type": "zstd", "enable.metrics.push": False, **secret, **out.producer_properties}
    topic = out.topic
    key_col = "client_instance_id" if "client_instance_id" in df.columns else "dimension_value"
    rows = df.select(F.col(key_col).alias("k"), F.to_json(F.struct(*df.columns)).alias("v"))

    # A module-level function (with its arguments bound by partial) is pickled by reference, so the Spark
    # worker imports this module and confluent-kafka itself; a closure naming `Producer` would make
    # cloudpickle ship the C extension's class by value, which fails on the worker.
    rows.foreachPartition(functools.partial(_send_partition, conf, topic))


def _send_partition(conf: dict[str, Any], topic: str, partition: Iterable[Any]) -> None:
    """One task's rows to the topic through a producer of its own; fails the task unless all are acked."""
    producer = Producer(conf)
    for row in partition:
        producer.produce(topic, key=(row["k"] or "").encode(), value=row["v"].encode())
        producer.poll(0)
    remaining = producer.flush(60)
    if remaining:
        raise RuntimeError(f"kafka output: {remaining} aggregate records not acknowledged")


EXPORT_STATUS_FILE = "_export/status.json"


def export_status_path(cfg: AggregationConfig) -> str:
    """Where the job keeps its OTLP export's status (kct.aggregation.otlp_export.ExportStatus), as JSON."""
    return f"{cfg.parquet.path.rstrip('/')}/{EXPORT_STATUS_FILE}"


def send_to_otlp(spark: Any, df: Any, cfg: AggregationConfig, exporter: WindowExporter) -> None:
    """The finished windows' client_metrics rows (already aggregated: a row per client, series and window)
    collected on the driver and exported, then the export's status written next to the tables. No Python runs
    per row in Spark; the rows are the aggregates the tables hold."""
    # Through Arrow: ~2x faster than collect()'s pickled Rows at 16,000 rows (bench/otlp_export_cost.py).
    rows = df.select(*EXPORT_COLUMNS).toArrow().to_pylist()
    status = exporter.export_rows(rows)
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(export_status_path(cfg))
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    report = json.dumps(status.as_dict(), sort_keys=True)
    out = fs.create(path, True)
    try:
        out.write(bytearray(report.encode()))
    finally:
        out.close()
    write_termination_message(report)


TERMINATION_LOG = "/dev/termination-log"
_TERMINATION_LIMIT = 4096  # what the kubelet keeps of a termination message


def write_termination_message(report: str, path: str = TERMINATION_LOG) -> bool:
    """The export's status as the driver container's termination message, when it runs in a Kubernetes pod
    (the file exists there): Kubernetes copies it into the pod's status when the driver ends, where the
    operator reads it (kct.controller.export_status) without mounting the sink. Overwritten by every export,
    so the last one is what the run reports. False when not in a pod or too long to keep whole."""
    if len(report.encode()) > _TERMINATION_LIMIT or not os.path.exists(path):
        return False
    with open(path, "w", encoding="utf-8") as file:
        file.write(report)
    return True


def concurrently(tasks: dict[str, Callable[[], _T]], spark: Any = None) -> dict[str, _T]:
    """Run `tasks` (Spark actions) each in its own thread, return their results by name; a failure is raised
    once all ended. Spark runs concurrent jobs' tasks side by side: a write in one task (a file per date)
    leaves the other core to the next output, and each output's planning overlaps the others' work. Threads,
    not processes: PySpark pins each Python thread to a JVM thread of the same session. With `spark`, those
    JVM threads load classes as the caller's does: a jar added to a running session (ADD JAR, as
    `session.register_jvm_decoder` may) is seen only by the thread that added it."""
    initializer = None if spark is None else _class_loader_of_this_thread(spark)
    with ThreadPoolExecutor(max_workers=max(1, len(tasks)), thread_name_prefix="kct-output",
                            initializer=initializer) as pool:
        futures = {name: pool.submit(task) for name, task in tasks.items()}
        return {name: future.result() for name, future in futures.items()}


def _class_loader_of_this_thread(spark: Any) -> Callable[[], None]:
    """A function that gives the JVM thread of the Python thread calling it this thread's class loader."""
    thread = spark.sparkContext._jvm.java.lang.Thread
    loader = thread.currentThread().getContextClassLoader()
    return lambda: thread.currentThread().setContextClassLoader(loader)
