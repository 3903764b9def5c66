"""The Spark aggregation plane: the receiver's topic -> per-client, per-metric windowed aggregates.

`config` (the job's config model, importable without pyspark), `decode` (OTLP records -> data points,
through the JVM decoder or in Python), `transforms` (pure DataFrame -> DataFrame), `job` (Spark's Kafka
source, wiring and sinks), `synthetic` (generated pushes for tests and benchmarks), `command`
(`kct aggregate`). Only `config` is imported here: the rest needs pyspark.
"""

from kct.aggregation.config import AggregationConfig, ConfigError, ThresholdRule, load_job_config, parse_job_config

__all__ = ["AggregationConfig", "ConfigError", "ThresholdRule", "load_job_config", "parse_job_config"]
