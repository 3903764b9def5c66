"""The Spark aggregation plane: the receiver's topic -> per-client, per-metric windowed aggregates.

Entry: `command` (`kct aggregate`, spark-submit) -> `job.run` -> the mode's module: `batch`, `stream_writer`
(Structured Streaming, its foreachBatch writer) or `hourly`. What they share: `session` (the SparkSession,
its jars, the JVM decoder's registration), `source` (reading the topic, choosing the decoder), `engine`
(which engine computes client_metrics and roll-ups), `outputs` (tables, writes, the Kafka topic),
`terminating` (records that may hold a termination), `delivery` (appends staged per batch id). The stream's
own parts: `stream` (windows a micro-batch finalizes, the state between micro-batches), `stream_alerts`
(alerts with their look-back), `time_bounds`. The computations: `decode` (OTLP records -> data points),
`transforms` (pure DataFrame -> DataFrame), `client_windows` and `rollups_jvm` (the same on the JVM).
`config` is the job's config model; `synthetic` generates pushes for tests and benchmarks. The layers are
held by an import-linter contract (pyproject.toml). Only `config` is imported here: the rest needs pyspark.
"""

from kct.aggregation.config import AggregationConfig, ConfigError, ThresholdRule, load_job_config, parse_job_config

__all__ = ["AggregationConfig", "ConfigError", "ThresholdRule", "load_job_config", "parse_job_config"]
