"""The aggregation job: topic -> data points -> windowed aggregates -> Parquet (and optionally a topic).

Wiring only: reading, decoding and the transforms live in their own modules and are tested there. Two
modes share every transform:

* `stream` (production): one Structured Streaming query over the topic. Each micro-batch (of decoded points,
  or with ClientWindows of records) goes to `foreachBatch`, which finalizes the windows the watermark has
  passed (`kct.aggregation.stream`: the batch transforms plus a small state kept per batch id under the
  checkpoint), writes client_metrics, derives rollups and alerts from it, forwards it to the optional
  Kafka topic, and writes the micro-batch's terminations (stateless, from the same cached micro-batch: a
  second query read the whole topic again for them). Checkpoints keep offsets and state.
* `batch`: one read of the topic up to its current end, every window (also the still-open ones), outputs
  overwritten; for tests, demos, backfills and the hourly ScheduledSparkApplication.

Delivery: each of a micro-batch's outputs (client_metrics, rollups, alerts, terminations, the Kafka topic) is marked
written per batch id once written, so a batch replayed after a crash writes only what it had not. A Parquet
append goes through a staging folder per batch id (kct.aggregation.delivery), so a crash between the append
and its mark does not append it twice on replay either; the Kafka output of a batch interrupted mid-way is
sent again (at least once).
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

from kct.aggregation.config import JOB_SPARK_CONF, AggregationConfig, KafkaOutputConfig
from kct.otlp import labels as L

if TYPE_CHECKING:
    from kct.aggregation.stream import AlertRowsFor, StreamState

__all__ = [
    "TABLES",
    "build_session",
    "connector_jars",
    "decode_records",
    "decoder_jar",
    "read_records",
    "register_jvm_decoder",
    "run",
    "run_batch",
    "run_hourly",
    "run_stream",
    "submitted_by_spark_submit",
]

_T = TypeVar("_T")

TABLES = ("client_metrics", "rollups", "terminations", "alerts", "client_metrics_hourly")
# Tables are partitioned by date only: a folder per metric made each write (a micro-batch, a batch task)
# produce one small file per metric it held. Rows are clustered by metric inside each file instead (sorted),
# so a reader's filter on `metric` skips row groups by their statistics.
_PARTITIONS = {
    "client_metrics": ("date",),
    "client_metrics_hourly": ("date",),
    "rollups": ("date",),
    "terminations": ("date",),
    "alerts": ("date",),
}
_CLUSTERING = {
    "client_metrics": ("metric", "window_start"),
    "client_metrics_hourly": ("metric", "window_start"),
    "rollups": ("metric", "window_start"),
    "alerts": ("window_start",),
    "terminations": ("terminated_at",),
}


def connector_jars(spark_version: str | None = None) -> list[Path]:
    """Spark's Kafka source (spark-sql-kafka-0-10 and its runtime dependencies) as installed by
    dev/spark-deps/install.py for this Spark version into ~/.cache/kct/spark-jars/<version>/; [] when absent
    (the job image has them in Spark's own jars directory instead)."""
    if spark_version is None:
        import pyspark

        spark_version = pyspark.__version__
    root = Path(os.environ.get("KCT_CACHE", Path.home() / ".cache" / "kct")) / "spark-jars" / spark_version
    jars = sorted(root.glob("*.jar")) if root.is_dir() else []
    return jars if any(j.name.startswith("spark-sql-kafka") for j in jars) else []


def _decoder_source_hash(source: Path, spark_version: str) -> str:
    """Same as dev/spark-deps/install.py's `decoder_source_hash` (the jar's cache key)."""
    digest = hashlib.sha256(spark_version.encode())
    files = [source / "pom.xml", *sorted(p for p in (source / "src").rglob("*") if p.is_file())]
    for path in files:
        digest.update(path.relative_to(source).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def decoder_jar(spark_version: str | None = None) -> Path | None:
    """The JVM OTLP decoder jar (spark/otlp-decoder) built by dev/spark-deps/install.py, if any.

    `KCT_OTLP_DECODER_JAR` names it explicitly (images). Otherwise, next to the sources (a checkout), only the
    jar built from these very sources for this Spark counts, never a stale one; without the sources (an
    installed package), the newest jar in the cache."""
    explicit = os.environ.get("KCT_OTLP_DECODER_JAR")
    if explicit:
        return Path(explicit) if Path(explicit).is_file() else None
    if spark_version is None:
        import pyspark

        spark_version = pyspark.__version__
    cache = Path(os.environ.get("KCT_CACHE", Path.home() / ".cache" / "kct")) / "spark-decoder"
    source = Path(__file__).resolve().parents[3] / "spark" / "otlp-decoder"
    if (source / "pom.xml").is_file():
        jar = cache / _decoder_source_hash(source, spark_version) / "kct-otlp-decoder.jar"
        return jar if jar.is_file() else None
    built = sorted(cache.glob("*/kct-otlp-decoder.jar"), key=lambda p: p.stat().st_mtime)
    return built[-1] if built else None


def submitted_by_spark_submit() -> bool:
    """True in the Python process spark-submit starts (a SparkApplication's driver): its JVM is already up,
    with the master spark-submit was given (`k8s://...`), which `spark.master` of the config must not
    replace (it defaults to local[*], for `kct aggregate`). spark-submit hands that JVM over through these."""
    return bool(os.environ.get("PYSPARK_GATEWAY_PORT") and os.environ.get("PYSPARK_GATEWAY_SECRET"))


def build_session(cfg: AggregationConfig) -> Any:
    """The SparkSession: reuse the active one (tests), else create one from `spark:` (under spark-submit,
    on the master spark-submit was given)."""
    from pyspark.sql import SparkSession

    # Python workers must import `kct`: run them with this interpreter unless told otherwise.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if cfg.spark.master.startswith("local") and not submitted_by_spark_submit():
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # stay on loopback in local runs
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder
    if not submitted_by_spark_submit():
        builder = builder.master(cfg.spark.master)
    builder = (
        builder.appName(cfg.spark.app_name)
        .config("spark.sql.shuffle.partitions", str(cfg.spark.shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
    )
    # The job's tuning (config.JOB_SPARK_CONF: aggregation, compiled-class cache, the driver's JVM options,
    # which apply when this creates the JVM, i.e. not under spark-submit).
    for key, value in JOB_SPARK_CONF.items():
        builder = builder.config(key, value)
    # Local paths only (never spark.jars.packages, which resolves over the network when the job starts).
    jars = connector_jars()
    decoder = decoder_jar() if cfg.source.decoder != "python" else None
    if decoder is not None:
        jars.append(decoder)
    for key, value in cache_conf(decoder is not None).items():
        builder = builder.config(key, value)
    if jars:
        builder = builder.config("spark.jars", ",".join(str(j) for j in jars))
    for key, value in cfg.spark.conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


# The job's caches (a run's records, its client_metrics rows) are read whole, once or twice: dev.kct.otlp.RowCache
# keeps them as UnsafeRows instead of encoding every column into compressed buffers and decoding it again
# (~20 % of a warm run's task CPU, spark/README.md).
ROW_CACHE_SERIALIZER: Final = "dev.kct.otlp.RowCache"


def cache_conf(decoder_on_classpath: bool) -> dict[str, str]:
    """The cache serializer setting of a session started with (`True`) or without the decoder jar, which holds
    RowCache. A static setting: it applies only to sessions this process starts."""
    return {"spark.sql.cache.serializer": ROW_CACHE_SERIALIZER} if decoder_on_classpath else {}


def _require_kafka_source(spark: Any) -> None:
    """Fail early, naming the fix, when Spark's Kafka source is not on the classpath (`spark.jars`, or the
    image's jars directory): Spark's own error ("Failed to find data source: kafka") says less."""
    try:  # Spark's own class lookup (the context class loader, which holds spark.jars), as its source lookup
        spark.sparkContext._jvm.org.apache.spark.util.Utils.classForName(
            "org.apache.spark.sql.kafka010.KafkaSourceProvider", True, False)
    except AttributeError:  # no JVM gateway (Spark Connect): the server's classpath decides
        return
    except Exception as exc:  # Py4JJavaError wrapping ClassNotFoundException
        raise RuntimeError(
            f"Spark's Kafka source (spark-sql-kafka-0-10_2.13 {spark.version}) is not on the classpath: "
            "install its jars with `python dev/spark-deps/install.py` (local runs: ~/.cache/kct/spark-jars/"
            f"{spark.version}/), or run the job image, which has them in /opt/spark/jars"
        ) from exc


# How long the source's consumers let the broker hold a fetch that finds no new data (Kafka's default: 500 ms).
# Spark reads offset ranges it already knows, so a long hold only delays a task: reading 10,000 pushes (66 MB,
# 2 partitions) took a median 1.33 s with the default and 0.66 s with 5 ms (8 interleaved runs each); each
# task's consumer sat about one default hold idle (~0.5 s of ~1 s, 0.17 CPU-s). A consumer property given in
# `source.consumerProperties` replaces it.
FETCH_MAX_WAIT_MS = 5


def read_records(spark: Any, cfg: AggregationConfig, *, streaming: bool) -> Any:
    """The topic's records from Spark's Kafka source: key, value, topic, partition, offset, timestamp,
    headers (decode.RAW_SCHEMA_DDL)."""
    _require_kafka_source(spark)
    src = cfg.source
    reader = spark.readStream if streaming else spark.read
    reader = (
        reader.format("kafka")
        .option("kafka.bootstrap.servers", src.bootstrap_servers)
        .option("subscribe", src.topic)
        .option("includeHeaders", "true")
        .option("startingOffsets", src.starting_offsets)
        .option("failOnDataLoss", "false")
        .option("kafka.fetch.max.wait.ms", str(FETCH_MAX_WAIT_MS))
    )
    if streaming:
        reader = reader.option("maxOffsetsPerTrigger", str(src.max_records_per_partition))
    for key, value in src.consumer_properties.items():
        reader = reader.option(f"kafka.{key}", value)
    return reader.load().select("key", "value", "topic", "partition", "offset", "timestamp", "headers")


def register_jvm_decoder(spark: Any, jar: Path | None = None) -> bool:
    """Register the JVM OTLP decoder as the SQL function `decode.JVM_DECODER_FUNCTION`.

    Its class is looked up on the session's classpath (`spark.jars`, set by `build_session`), else the jar
    (default: `decoder_jar()`) is added to the running session with ADD JAR. False when neither works."""
    from kct.aggregation.decode import JVM_DECODER_CLASS, JVM_DECODER_FUNCTION, JVM_POINTS_DDL

    def register() -> bool:
        try:
            spark.udf.registerJavaFunction(JVM_DECODER_FUNCTION, JVM_DECODER_CLASS, JVM_POINTS_DDL)
        except Exception:  # AnalysisException (class not found), or no JVM gateway (Spark Connect)
            return False
        return True

    if register():
        return True
    jar = jar or decoder_jar()
    if jar is None:
        return False
    try:
        spark.sql(f"ADD JAR '{jar}'")
    except Exception:
        return False
    return register()


def _use_jvm_decoder(spark: Any, cfg: AggregationConfig | None) -> bool:
    if cfg is None or cfg.source.decoder == "python":
        return False
    if register_jvm_decoder(spark):
        return True
    if cfg.source.decoder == "jvm":
        raise RuntimeError("source.decoder is jvm but the OTLP decoder jar is not available: "
                       "build it with `python dev/spark-deps/install.py --decoder-only`")
    return False


def decode_records(records: Any, cfg: AggregationConfig | None = None) -> Any:
    """Records -> data points (decode.POINT_SCHEMA_DDL). With `cfg`, `source.decoder` picks the decoder:
    the JVM function (one call per push, exploded in Spark SQL) or Python (one call per Arrow batch of
    pushes, `mapInArrow`); without, Python."""
    from kct.aggregation.decode import POINT_SCHEMA_DDL, decode_arrow_batches, jvm_points

    if _use_jvm_decoder(records.sparkSession, cfg):
        return jvm_points(records)
    return records.mapInArrow(decode_arrow_batches, POINT_SCHEMA_DDL)


def _path(cfg: AggregationConfig, table: str) -> str:
    return f"{cfg.parquet.path.rstrip('/')}/{table}"


# Rows per Parquet file a write aims at (client_metrics compresses to ~20-60 bytes a row: tens of MB a file).
# A write made one file per task, i.e. per shuffle partition, whatever its size: a micro-batch of a few
# thousand rows left spark.sql.shuffle.partitions files of some kB per table.
ROWS_PER_FILE = 2_000_000


def files_for(rows: int) -> int:
    """How many files a write of `rows` rows is spread over: one per ROWS_PER_FILE started."""
    return max(1, -(-int(rows) // ROWS_PER_FILE))


def _write(df: Any, cfg: AggregationConfig, table: str, mode: str, path: str | None = None,
           files: int | None = None) -> None:
    """Write `table` (its date partitions, rows clustered), in at most `files` files per date when given
    (fewer tasks: coalesce never adds a shuffle)."""
    if files is not None:
        df = df.coalesce(files)
    ordered = df.sortWithinPartitions(*_PARTITIONS[table], *_CLUSTERING[table])
    ordered.write.mode(mode).partitionBy(*_PARTITIONS[table]).parquet(path or _path(cfg, table))


def _append_once(spark: Any, cfg: AggregationConfig, table: str, batch_id: int, df: Any,
                 files: int | None = None) -> None:
    """Append a micro-batch's rows to `table` through its staging (kct.aggregation.delivery): a replay of
    the batch does not append them again, even when the crash came right after the append."""
    from kct.aggregation.delivery import StagedAppend

    StagedAppend(spark, _path(cfg, table)).append(
        batch_id, lambda path: _write(df, cfg, table, "overwrite", path, files))


def _send_to_kafka(df: Any, out: KafkaOutputConfig) -> None:
    """Aggregate rows as JSON records (key = client instance id or roll-up value), one producer per task."""
    from pyspark.sql import functions as F

    conf = {"bootstrap.servers": out.bootstrap_servers, "enable.idempotence": True, "acks": "all",
            "compression.type": "zstd", "enable.metrics.push": False, **out.producer_properties}
    topic = out.topic
    key_col = "client_instance_id" if "client_instance_id" in df.columns else "dimension_value"
    rows = df.select(F.col(key_col).alias("k"), F.to_json(F.struct(*df.columns)).alias("v"))

    def send(partition: Any) -> None:
        from confluent_kafka import Producer

        producer = Producer(conf)
        for row in partition:
            producer.produce(topic, key=(row["k"] or "").encode(), value=row["v"].encode())
            producer.poll(0)
        remaining = producer.flush(60)
        if remaining:
            raise RuntimeError(f"kafka output: {remaining} aggregate records not acknowledged")

    rows.foreachPartition(send)


def _alerts_span(cfg: AggregationConfig) -> list[Any]:
    """The aggregates of a micro-batch's client_metrics `_alerts_with_history` needs (none without rules), for
    the writer to compute with its row count in one job: the first window start (µs), the first date the
    rules' look-back reaches and the last date (yyyy-MM-dd in the session's time zone, as the table's `date`
    column has them, not Python's)."""
    from pyspark.sql import functions as F

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


def _alerts_with_history(spark: Any, batch: Any, cfg: AggregationConfig, span: tuple[Any, ...] | None = None,
                         kept: StreamState | None = None) -> tuple[Any, Any]:
    """Alerts for this micro-batch's windows, and the rows of the rules' look-back for the next micro-batch's
    state (None, None without rules or rows). A breach run may have started in earlier micro-batches: the rows
    before this batch's first window come from `kept` (the previous state, `_kept_alert_rows`) when it holds
    them for these rules, else from the client_metrics table (a stream started before they were kept, a new
    checkpoint, rules changed). Only the table's rows before this batch's first window are read, so whether
    this batch's own append has landed yet does not matter. `span`: `_alerts_span` of `batch`, when the
    caller computed it already.

    The time bounds change every micro-batch: as stream.time_bound (not literals), they leave the
    generated code as it was, so it is not compiled again; a coarser bound (the hour), a TIMESTAMP literal,
    is what the Parquet reader skips row groups by (compiled again once an hour)."""
    from pyspark.sql import functions as F

    from kct.aggregation.stream import time_bound
    from kct.aggregation.transforms import alerts

    if not cfg.rules:
        return None, None
    metrics = list(_rule_metrics(cfg))  # isin unpacks a list, not a tuple
    first_us, since, until = span if span is not None else batch.agg(*_alerts_span(cfg)).first()
    if first_us is None:
        return None, None
    low_us = first_us - _alerts_horizon(cfg) * 1_000_000
    ours = batch.where(F.col("metric").isin(metrics))
    if kept is not None and _kept_alert_rows(cfg, kept, first_us):
        before = None if kept.alert_rows is None else (
            kept.alert_rows.where(F.unix_micros("window_start") >= time_bound(spark, low_us)))
    else:
        dates = _date_partitions(spark, _path(cfg, "client_metrics"), since, until)
        hour_us = 3_600_000_000
        before = None if not dates else (
            # The table's schema is the batch's (no job reading a footer to infer it; `date` read as the string
            # the batch has, the same folder name when written back).
            spark.read.schema(batch.schema).option("basePath", _path(cfg, "client_metrics")).parquet(*dates)
            .where(F.col("metric").isin(metrics))
            .where(F.col("window_start") >= F.timestamp_micros(F.lit(low_us // hour_us * hour_us)))
            .where(F.unix_micros("window_start") >= time_bound(spark, low_us))
            .where(F.unix_micros("window_start") < time_bound(spark, first_us)))
    history = ours if before is None else before.unionByName(ours)
    found = alerts(history, cfg.rules)
    fired = None if found is None else found.where(F.unix_micros("window_start") >= time_bound(spark, first_us))
    return fired, history


def _kept_alert_rows(cfg: AggregationConfig, kept: StreamState | None, first_us: int) -> bool:
    """Whether the previous state's alert rows cover what this micro-batch's alerts look back to: the rules'
    metrics, from this batch's first window less the rules' look-back on."""
    if kept is None or kept.alert_rows_for is None:
        return False
    covered = kept.alert_rows_for
    return (set(_rule_metrics(cfg)) <= set(covered.metrics)
            and first_us - _alerts_horizon(cfg) * 1_000_000 >= covered.since_s * 1_000_000)


def _next_alert_rows(spark: Any, cfg: AggregationConfig, history: Any, previous: StreamState,
                     final_before_s: int | None) -> tuple[Any, AlertRowsFor | None]:
    """The alert rows the next state keeps: the rows of `history` (this micro-batch's, None: it finalized no
    window) the next micro-batches' look-back can reach, i.e. of windows from `final_before_s` less the
    rules' look-back on (those finalized later start at `final_before_s` or after)."""
    from pyspark.sql import functions as F

    from kct.aggregation.stream import AlertRowsFor, time_bound

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


# client_metrics rows whose roll-ups one task merges (kct.aggregation.rollups_jvm, `in_one_task`): more are
# merged in two steps around a shuffle. One task over 180,000 rows (1M points) took 0.47-0.58 task CPU-s with
# its write where two merges took 0.81-0.84 (spark/README.md). Its hash map then holds the groups of up to
# this many rows, as a first-merge task of a one-file write (ROWS_PER_FILE) over 4 shuffle partitions did.
ROLLUP_ROWS_PER_TASK = 500_000


def _rollups(metrics: Any, client_windows: bool, rows: int) -> Any:
    """The roll-ups of client_metrics (`rows` of them): on the JVM (kct.aggregation.rollups_jvm) when
    ClientWindows computed them (the decoder jar is then loaded), in one task up to ROLLUP_ROWS_PER_TASK rows,
    else with Spark SQL (transforms.rollups): the same rows."""
    from kct.aggregation.rollups_jvm import rollups_on_jvm
    from kct.aggregation.transforms import rollups

    if not client_windows:
        return rollups(metrics)
    return rollups_on_jvm(metrics, in_one_task=rows <= ROLLUP_ROWS_PER_TASK)


def _metrics_outputs(spark: Any, cfg: AggregationConfig, metrics: Any, batch_id: int, rows: int,
                     client_windows: bool = False, fired: Any = None) -> dict[str, Callable[[], None]]:
    """What a micro-batch's finalized windows (`rows` client_metrics rows) are written to, by output name
    (client_metrics and rollups in files sized to the rows, alerts in one: they are a few rows; `fired`: the
    alerts of `metrics`, `_alerts_with_history`, None: none)."""
    files = files_for(rows)

    def alerts() -> None:
        if fired is not None:
            _append_once(spark, cfg, "alerts", batch_id, fired, files=1)

    out = {
        "client_metrics": lambda: _append_once(spark, cfg, "client_metrics", batch_id, metrics, files),
        "rollups": lambda: _append_once(spark, cfg, "rollups", batch_id, _rollups(metrics, client_windows, rows),
                                       files),
        "alerts": alerts,
    }
    if cfg.kafka_output is not None:
        kafka = cfg.kafka_output
        out["kafka"] = lambda: _send_to_kafka(metrics, kafka)
    return out


# Outputs written only once another is: a micro-batch's alerts are in their table only after the
# client_metrics rows they were found in are in theirs (a reader following an alert finds its windows).
_WRITTEN_AFTER = {"alerts": "client_metrics"}


def _write_once(spark: Any, store: Any, batch_id: int, outputs: dict[str, Callable[[], None]],
                alongside: dict[str, Callable[[], None]] | None = None) -> None:
    """Each output not yet written by this batch id (a replay skips what the first attempt wrote). They only
    read the micro-batch's caches, so they are written at the same time (`_concurrently`), but for an output
    of `_WRITTEN_AFTER`, written after the one it reads. `alongside`: writes that run with them every attempt,
    unmarked (the stream state, kept per batch id)."""

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
    _concurrently({**{name: chain(name) for name in firsts}, **(alongside or {})}, spark)


def _state_store(spark: Any, cfg: AggregationConfig) -> Any:
    from kct.aggregation.stream import StateStore

    return StateStore(spark, f"{cfg.checkpoint_dir().rstrip('/')}/client_metrics_state")


def _metrics_batch_writer(spark: Any, cfg: AggregationConfig,
                          client_windows: bool = False) -> Callable[[Any, int], None]:
    """foreachBatch function: a micro-batch of points (with `client_windows`: of records, aggregated by
    ClientWindows) -> the windows it finalizes (kct.aggregation.stream): client_metrics, the rollups and
    alerts derived from them, the optional Kafka topic; and the micro-batch's terminations; each written once
    per batch id; and the stream state, saved with them, before Spark commits the batch."""
    from pyspark.sql import functions as F

    from kct.aggregation.client_windows import with_push_times
    from kct.aggregation.stream import advance, advance_records

    store = _state_store(spark, cfg)
    alerts_span = _alerts_span(cfg)

    def step_of(points: Any, previous: StreamState) -> Any:
        sizes = {"window_seconds": cfg.window.size_seconds, "watermark_seconds": cfg.window.watermark_seconds,
                 "lookback_windows": cfg.window.counter_lookback_windows}
        if not client_windows:
            return advance(previous, points, **sizes)
        # How many records may hold a termination, counted in advance_records' first job: none (the usual
        # case) spares the terminations their job.
        return advance_records(previous, points, also=[F.count_if(_may_terminate(spark))], **sizes)

    def write(batch: Any, batch_id: int) -> None:
        points = (with_push_times(batch) if client_windows else batch).persist()
        try:
            previous = store.load(batch_id)
            step = step_of(points, previous)
            # The finalized points sorted per series feed both client_metrics and the state's last points.
            if step.sorted_points is not None:
                step.sorted_points.persist()
            if step.late_points:
                print(f"kct aggregate: batch {batch_id}: {step.late_points} late points dropped "
                      "(their window was final)", file=sys.stderr, flush=True)
            metrics = None if step.finalized is None else step.finalized.persist()
            try:
                # The row count (it fills the cache the outputs read) and what the alerts need, in one job.
                counted = None if metrics is None else metrics.agg(F.count(F.lit(1)), *alerts_span).first()
                rows = 0 if counted is None else int(counted[0])
                fired, history = (None, None) if metrics is None or not rows else _alerts_with_history(
                    spark, metrics, cfg, tuple(counted[1:]) if alerts_span and counted is not None else None,
                    previous)
                outputs = {} if metrics is None or not rows else _metrics_outputs(
                    spark, cfg, metrics, batch_id, rows, client_windows, fired)
                alert_rows, alert_rows_for = _next_alert_rows(spark, cfg, history, previous,
                                                              step.state.final_before_s)
                state = replace(step.state, alert_rows=alert_rows, alert_rows_for=alert_rows_for)
                may_terminate = not client_windows or bool(step.also and step.also[0])
                outputs["terminations"] = _terminations_output(spark, cfg, points, batch_id, client_windows,
                                                               may_terminate)
                # The state is saved while the outputs are written: it is kept per batch id and a replay of
                # this batch loads the one before (StateStore.load), whether or not this attempt saved its own.
                # One after the other, the save added ~0.5 s to a warm micro-batch of 1M points.
                _write_once(spark, store, batch_id, outputs,
                            alongside={"state": lambda: store.save(batch_id, state)})
            finally:
                if metrics is not None:
                    metrics.unpersist()
            store.forget_outputs_before(batch_id)
            if step.sorted_points is not None:
                step.sorted_points.unpersist()
        finally:
            points.unpersist()

    return write


def _terminations_output(spark: Any, cfg: AggregationConfig, batch: Any, batch_id: int,
                         records: bool, may_hold: bool = True) -> Callable[[], None]:
    """A micro-batch's terminations, appended once per batch id like its other outputs. From the micro-batch
    the metrics use (cached): decoded points, or with `records` the records that may hold one, decoded here
    (as `run_batch`). One query reads the topic, not a second one for terminations. `may_hold` False: the
    micro-batch has no record that may hold one (`_may_terminate`), so there is nothing to look for."""
    from kct.aggregation.transforms import terminations

    def append() -> None:
        if not may_hold:
            return
        ending = decode_records(batch.where(_may_terminate(spark)).drop("_times"), cfg) if records else batch
        found = terminations(ending)
        if not found.isEmpty():
            _append_once(spark, cfg, "terminations", batch_id, found, files=1)

    return append


# The terminating label's header names, lower-case (the broker's and the receiver's HTTP header's).
_TERMINATING_HEADERS: Final = tuple(sorted({L.TERMINATING.name, L.TERMINATING.http_header}))
# A push holding the termination metric holds its name as these bytes (a protobuf string is its UTF-8).
_TERMINATING_METRIC: Final = b"client.terminating"


def _terminating_header() -> Any:
    """Records whose broker labels say the client is terminating (any `terminating` header saying true: a
    superset of what the decoder reads, the last such header)."""
    from pyspark.sql import functions as F

    flag = "', '".join(_TERMINATING_HEADERS)
    return F.expr(f"exists(headers, h -> lower(h.key) IN ('{flag}') AND lower(CAST(h.value AS STRING)) = 'true')")


def _may_terminate(spark: Any) -> Any:
    """Records that may hold a termination (`transforms.terminations`): a terminating header, or a metric
    named `...client.terminating`, whose name the push holds as plain UTF-8 bytes (a protobuf string). A
    superset: the points of the records it keeps are filtered exactly by `terminations`.

    With the decoder jar, the same filter in one Java call per record (`dev.kct.otlp.Terminating`): the SQL
    one evaluates `exists` with an interpreted lambda and searches each ~7 kB push from every byte on: ~110 ms of
    task CPU per 10,000 records, ~75 ms here (spark/README.md); without the jar, the SQL. Both give the same records
    (tests/unit/aggregation/test_terminating_filter.py)."""
    from pyspark.sql import functions as F
    from pyspark.sql.classic.column import Column as ClassicColumn

    try:
        column = spark.sparkContext._jvm.dev.kct.otlp.Terminating.column(
            F.col("headers")._jc, F.col("value")._jc, ",".join(_TERMINATING_HEADERS))
    except TypeError:  # py4j's JavaPackage (no such class: no decoder jar) is not callable
        return _may_terminate_sql()
    return ClassicColumn(column)


def _may_terminate_sql() -> Any:
    """`_may_terminate` in Spark SQL (without the decoder jar): null where a header's value is null and no
    other part says true, which a filter and `count_if` take as false."""
    from pyspark.sql import functions as F

    return _terminating_header() | F.col("value").contains(F.lit(_TERMINATING_METRIC))


def run_stream(spark: Any, cfg: AggregationConfig) -> list[Any]:
    """Start the streaming query; with `untilDrained` it stops once it drained the topic."""
    client_windows = _stream_uses_client_windows(spark, cfg)
    records = read_records(spark, cfg, streaming=True)
    points = records if client_windows else decode_records(records, cfg)
    print("kct aggregate: stream client_metrics "
          + ("per client instance on the JVM (ClientWindows)" if client_windows else "with Spark SQL"), flush=True)
    writer = (
        points.writeStream.queryName("kct_client_metrics").outputMode("append")
        .option("checkpointLocation", f"{cfg.checkpoint_dir().rstrip('/')}/client_metrics")
        .foreachBatch(_metrics_batch_writer(spark, cfg, client_windows))
    )
    if cfg.run.until_drained:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{cfg.run.trigger_seconds} seconds")
    return [writer.start()]


def _write_counted(df: Any, cfg: AggregationConfig, table: str, mode: str, files: int,
                   observed_sums: tuple[str, ...] = ()) -> dict[str, int]:
    """Write a table; return its row count (`rows`) and the sums of `observed_sums` columns, counted while
    writing (an observed metric, no second job)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    observed = Observation(f"kct_{table}_rows")
    metrics = [F.count(F.lit(1)).alias("rows"), *(F.sum(c).alias(c) for c in observed_sums)]
    _write(df.observe(observed, *metrics), cfg, table, mode, files=files)
    return {name: int(observed.get.get(name) or 0) for name in ("rows", *observed_sums)}


def _stream_uses_client_windows(spark: Any, cfg: AggregationConfig) -> bool:
    """`_use_client_windows`, except that `auto` resuming a checkpoint whose state holds pending points of the
    Spark SQL stream (a job upgraded in place) stays on Spark SQL: ClientWindows keeps records, and refuses
    such a state. `jvm` with a new checkpoint path switches."""
    if not _use_client_windows(spark, cfg):
        return False
    if cfg.source.aggregation == "auto" and _state_store(spark, cfg).holds_pending_points():
        print("kct aggregate: the stream's state holds pending points of the Spark SQL engine: it stays on it",
              flush=True)
        return False
    return True


def _use_client_windows(spark: Any, cfg: AggregationConfig) -> bool:
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


def _client_metrics(spark: Any, cfg: AggregationConfig, records: Any, client_windows: bool) -> Any:
    """client_metrics of the records, by `source.aggregation` (`client_windows`, from `_use_client_windows`):
    Spark SQL over the decoded points, or the per-client Java loop (kct.aggregation.client_windows), which
    needs the decoder jar."""
    from kct.aggregation.client_windows import client_metrics_from_records
    from kct.aggregation.transforms import aggregate_client_metrics

    size, lookback = cfg.window.size_seconds, cfg.window.counter_lookback_windows
    if client_windows:
        print("kct aggregate: client_metrics per client instance on the JVM (ClientWindows), roll-ups on the JVM",
              flush=True)
        return client_metrics_from_records(records, window_seconds=size, lookback_windows=lookback)
    print("kct aggregate: client_metrics from the decoded points with Spark SQL", flush=True)
    return aggregate_client_metrics(decode_records(records, cfg), window_seconds=size, lookback_windows=lookback)


def run_batch(spark: Any, cfg: AggregationConfig) -> dict[str, int]:
    """Aggregate everything currently in the topic; overwrite the outputs; rows written per table.

    The topic is read once (its records kept, they are small next to their points) and decoded once for
    client_metrics, which every other output but terminations derives from (kept too); terminations decode
    only the records that may hold one. `points` is the sum of client_metrics' `points`, counted while
    writing it (every point is in exactly one window's row), so no job counts the decoded points. Each table
    is written in files sized to client_metrics' rows (`files_for`; terminations and alerts in one). The
    outputs only read the two caches, so they are written at the same time (`_concurrently`)."""
    records = read_records(spark, cfg, streaming=False).persist()
    try:
        client_windows = _use_client_windows(spark, cfg)
        metrics = _client_metrics(spark, cfg, records, client_windows).persist()
        rows = metrics.count()  # fills the cache the writes read
        outputs = _concurrently(_batch_outputs(spark, cfg, records, metrics, rows, client_windows), spark)
        written = {table: counted for table, counted in outputs.items() if counted is not None}
        counts = {"points": written["client_metrics"]["points"]}
        counts.update({table: counted["rows"] for table, counted in written.items()})
        metrics.unpersist()
        return counts
    finally:
        records.unpersist()


def _batch_outputs(spark: Any, cfg: AggregationConfig, records: Any, metrics: Any, rows: int,
                   client_windows: bool) -> dict[str, Callable[[], dict[str, int] | None]]:
    """`run_batch`'s writes by output, client_metrics first (Spark's FIFO scheduler serves the first job
    submitted first). Each derived table is also built in its write, so it overlaps the client_metrics write
    (roll-ups on the JVM in two merges run their first stage when built; in one task, in their write). Each
    returns its rows counted while written (`_write_counted`), None when it wrote no table (no rules: no
    alerts; the Kafka topic)."""
    from kct.aggregation.transforms import alerts, terminations

    files = files_for(rows)

    def derived(table: str, build: Callable[[], Any], files: int) -> Callable[[], dict[str, int] | None]:
        def write() -> dict[str, int] | None:
            df = build()
            return None if df is None else _write_counted(df, cfg, table, "overwrite", files)
        return write

    outputs: dict[str, Callable[[], dict[str, int] | None]] = {
        "client_metrics": partial(_write_counted, metrics, cfg, "client_metrics", "overwrite", files,
                                  observed_sums=("points",)),
        "rollups": derived("rollups", lambda: _rollups(metrics, client_windows, rows), files),
        "terminations": derived(
            "terminations", lambda: terminations(decode_records(records.where(_may_terminate(spark)), cfg)), 1),
        "alerts": derived("alerts", lambda: alerts(metrics, cfg.rules), 1),
    }
    if cfg.kafka_output is not None:
        outputs["kafka"] = partial(_send_to_kafka, metrics, cfg.kafka_output)
    return outputs


def _concurrently(tasks: dict[str, Callable[[], _T]], spark: Any = None) -> dict[str, _T]:
    """Run `tasks` (Spark actions) each in its own thread, return their results by name; a failure is raised
    once all ended. Spark runs concurrent jobs' tasks side by side: a write in one task (a file per date)
    leaves the other core to the next output, and each output's planning overlaps the others' work. Threads,
    not processes: PySpark pins each Python thread to a JVM thread of the same session. With `spark`, those
    JVM threads load classes as the caller's does: a jar added to a running session (ADD JAR, as
    `register_jvm_decoder` may) is seen only by the thread that added it."""
    from concurrent.futures import ThreadPoolExecutor

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


def run_hourly(spark: Any, cfg: AggregationConfig) -> int:
    """Roll the client_metrics rows of one UTC hour up into client_metrics_hourly (that hour replaced)."""
    import datetime as dt

    from pyspark.sql import functions as F

    from kct.aggregation.transforms import hourly

    if cfg.run.hour:
        start = dt.datetime.strptime(cfg.run.hour, "%Y-%m-%dT%H").replace(tzinfo=dt.UTC)
    else:
        start = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0) - dt.timedelta(hours=1)
    end = start + dt.timedelta(hours=1)
    source = (
        spark.read.parquet(_path(cfg, "client_metrics"))
        .where(F.col("date") == start.strftime("%Y-%m-%d"))
        .where((F.col("window_start") >= F.lit(start)) & (F.col("window_start") < F.lit(end)))
    )
    rolled = hourly(source).persist()
    rows = rolled.count()
    # Replace only the partitions this hour writes (a re-run of an hour is idempotent per date/metric).
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    previous = _path(cfg, "client_metrics_hourly")
    try:
        kept = spark.read.parquet(previous).where(
            (F.col("date") == start.strftime("%Y-%m-%d")) & (F.col("window_start") != F.lit(start))
        ).localCheckpoint()
        rolled = kept.select(*rolled.columns).unionByName(rolled)
    except Exception:
        pass
    _write(rolled, cfg, "client_metrics_hourly", "overwrite")
    return int(rows)


def run(cfg: AggregationConfig) -> int:
    """Run the job as configured; returns a process exit code."""
    spark = build_session(cfg)
    started = time.monotonic()
    if cfg.run.mode == "hourly":
        rows = run_hourly(spark, cfg)
        print(f"kct aggregate: hourly roll-up done in {time.monotonic() - started:.1f}s: rows={rows}", flush=True)
        return 0
    if cfg.run.mode == "batch":
        counts = run_batch(spark, cfg)
        print(f"kct aggregate: batch done in {time.monotonic() - started:.1f}s: "
              + ", ".join(f"{k}={v}" for k, v in counts.items()), flush=True)
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
            print(f"kct aggregate: query {query.name} failed: {query.exception()}", file=sys.stderr)
    print(f"kct aggregate: stream stopped after {time.monotonic() - started:.1f}s", flush=True)
    return 1 if failed else 0
