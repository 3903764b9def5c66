"""The Spark aggregation plane: the receiver's topic -> per-client, per-metric windowed aggregates.

Entry: `command` (`kct aggregate`, spark-submit) -> `job.run` -> the mode's module: `batch`, `stream_writer`
(Structured Streaming, its foreachBatch writer) or `hourly`. What they share: `session` (the SparkSession,
its jars, the decoder jar's registration: the job's one engine, required), `source` (reading the topic),
`outputs` (tables, writes, the Kafka topic), `terminating` (records that may hold a termination),
`delivery` (appends staged per batch id). The stream's own parts: `stream` (windows a micro-batch
finalizes, the state between micro-batches), `stream_alerts` (alerts with their look-back), `time_bounds`.
The computations, on the JVM (the decoder jar, built from jvm/ beside these modules) with their Python side here:
`client_windows` (records -> client_metrics, per client instance), `rollups_jvm` (client_metrics ->
rollups), `decode` (records -> data points, for terminations); `transforms` (the tables' columns, and
hourly, alerts and terminations in Spark SQL). A second engine in Spark SQL and Python, the oracle the JVM
code is checked against, lives in tests/aggregation_oracle. `config` is the job's config model;
`synthetic` generates pushes for tests and benchmarks. The layers are
held by an import-linter contract (pyproject.toml). Only `config` is imported here: the rest needs pyspark.
"""

from kct.aggregation.config import AggregationConfig, ConfigError, ThresholdRule, load_job_config, parse_job_config

__all__ = ["AggregationConfig", "ConfigError", "ThresholdRule", "load_job_config", "parse_job_config"]
