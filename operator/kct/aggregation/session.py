"""The job's SparkSession: its settings, the jars it loads and the JVM OTLP decoder's registration.

One place decides what the JVM the job runs in holds: Spark's Kafka source and the decoder jar (local paths
only, never resolved over the network when the job starts), the job's tuning (config.JOB_SPARK_CONF) and
the cache serializer the decoder jar provides. Everything else takes the session as given, so a test's
session, spark-submit's and `kct aggregate`'s behave alike.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Any, Final

import pyspark
from pyspark.sql import SparkSession

from kct.aggregation.config import JOB_SPARK_CONF, AggregationConfig
from kct.aggregation.decode import JVM_DECODER_CLASS, JVM_DECODER_FUNCTION, JVM_POINTS_DDL

__all__ = [
    "ROW_CACHE_SERIALIZER",
    "build_session",
    "cache_conf",
    "connector_jars",
    "decoder_jar",
    "register_jvm_decoder",
    "require_jvm_engine",
    "submitted_by_spark_submit",
]

# The job's caches (a run's records, its client_metrics rows) are read whole, once or twice: dev.kct.otlp.RowCache
# keeps them as UnsafeRows instead of encoding every column into compressed buffers and decoding it again
# (~20 % of a warm run's task CPU, bench/spark_throughput.py).
ROW_CACHE_SERIALIZER: Final = "dev.kct.otlp.RowCache"


def _cache_root() -> Path:
    return Path(os.environ.get("KCT_CACHE", Path.home() / ".cache" / "kct"))


def connector_jars(spark_version: str | None = None) -> list[Path]:
    """Spark's Kafka source (spark-sql-kafka-0-10 and its runtime dependencies) as installed by
    dev/spark-deps/install.py for this Spark version into ~/.cache/kct/spark-jars/<version>/; [] when absent
    (the job image has them in Spark's own jars directory instead)."""
    root = _cache_root() / "spark-jars" / (spark_version or pyspark.__version__)
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
    """The JVM OTLP decoder jar (built from ./jvm, next to this module) built by dev/spark-deps/install.py, if any.

    `KCT_OTLP_DECODER_JAR` names it explicitly (images). Otherwise, next to the sources (a checkout), only the
    jar built from these very sources for this Spark counts, never a stale one; without the sources (an
    installed package), the newest jar in the cache."""
    explicit = os.environ.get("KCT_OTLP_DECODER_JAR")
    if explicit:
        return Path(explicit) if Path(explicit).is_file() else None
    cache = _cache_root() / "spark-decoder"
    source = Path(__file__).resolve().parent / "jvm"
    if (source / "pom.xml").is_file():
        jar = cache / _decoder_source_hash(source, spark_version or pyspark.__version__) / "kct-otlp-decoder.jar"
        return jar if jar.is_file() else None
    built = sorted(cache.glob("*/kct-otlp-decoder.jar"), key=lambda p: p.stat().st_mtime)
    return built[-1] if built else None


def submitted_by_spark_submit() -> bool:
    """True in the Python process spark-submit starts (a SparkApplication's driver): its JVM is already up,
    with the master spark-submit was given (`k8s://...`), which `spark.master` of the config must not
    replace (it defaults to local[*], for `kct aggregate`). spark-submit hands that JVM over through these."""
    return bool(os.environ.get("PYSPARK_GATEWAY_PORT") and os.environ.get("PYSPARK_GATEWAY_SECRET"))


def cache_conf(decoder_on_classpath: bool) -> dict[str, str]:
    """The cache serializer setting of a session started with (`True`) or without the decoder jar, which holds
    RowCache. A static setting: it applies only to sessions this process starts."""
    return {"spark.sql.cache.serializer": ROW_CACHE_SERIALIZER} if decoder_on_classpath else {}


def build_session(cfg: AggregationConfig) -> Any:
    """The SparkSession: reuse the active one (tests), else create one from `spark:` (under spark-submit,
    on the master spark-submit was given)."""
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
    decoder = decoder_jar()
    if decoder is not None:
        jars.append(decoder)
    for key, value in cache_conf(decoder is not None).items():
        builder = builder.config(key, value)
    if jars:
        builder = builder.config("spark.jars", ",".join(str(j) for j in jars))
    for key, value in cfg.spark.conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def register_jvm_decoder(spark: Any, jar: Path | None = None) -> bool:
    """Register the JVM OTLP decoder as the SQL function `decode.JVM_DECODER_FUNCTION`.

    Its class is looked up on the session's classpath (`spark.jars`, set by `build_session`), else the jar
    (default: `decoder_jar()`) is added to the running session with ADD JAR. False when neither works."""

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


def require_jvm_engine(spark: Any) -> None:
    """Fail when a batch or stream run starts, naming the fix, unless the decoder jar is loaded: it holds
    the job's whole engine (the OTLP decoder, ClientWindows, the roll-ups, RowCache), and there is no other."""
    if not register_jvm_decoder(spark):
        raise RuntimeError(
            "the OTLP decoder jar (the job's engine: decoder, ClientWindows, roll-ups) is not available: build it "
            "with `python dev/spark-deps/install.py --decoder-only` (or `make spark-jars`), name it in "
            "KCT_OTLP_DECODER_JAR, or run the job image, which has it in /opt/spark/jars")
