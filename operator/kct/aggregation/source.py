"""The job's input: the topic's records from Spark's Kafka source.

Reading (which consumer settings, which offsets, a clear error when the Kafka source is missing) lives here,
so every mode reads the same way; what a push decodes to is kct.aggregation.decode's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kct.aggregation.config import AggregationConfig, SourceConfig
from kct.kafka.client_properties import java_client_properties, read_properties_dir

__all__ = ["FETCH_MAX_WAIT_MS", "kafka_options", "read_records", "require_kafka_source"]

# How long the source's consumers let the broker hold a fetch that finds no new data (Kafka's default: 500 ms).
# Spark reads offset ranges it already knows, so a long hold only delays a task: reading 10,000 pushes (66 MB,
# 2 partitions) took a median 1.33 s with the default and 0.66 s with 5 ms (8 interleaved runs each); each
# task's consumer sat about one default hold idle (~0.5 s of ~1 s, 0.17 CPU-s). A consumer property given in
# `source.consumerProperties` replaces it.
FETCH_MAX_WAIT_MS = 5


def require_kafka_source(spark: Any) -> None:
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


def kafka_options(src: SourceConfig) -> dict[str, str]:
    """The source's own Kafka consumer options (`kafka.<name>`): the mounted Secret's, translated for the Java
    client, then `consumer_properties`. Read on the driver: the options reach the executors with the plan."""
    properties = {} if src.client_properties_dir is None else java_client_properties(
        read_properties_dir(Path(src.client_properties_dir)))
    properties.update(src.consumer_properties)
    return {f"kafka.{key}": value for key, value in properties.items()}


def read_records(spark: Any, cfg: AggregationConfig, *, streaming: bool) -> Any:
    """The topic's records from Spark's Kafka source: key, value, topic, partition, offset, timestamp,
    headers (decode.RAW_SCHEMA_DDL)."""
    require_kafka_source(spark)
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
    for key, value in kafka_options(src).items():
        reader = reader.option(key, value)
    return reader.load().select("key", "value", "topic", "partition", "offset", "timestamp", "headers")
