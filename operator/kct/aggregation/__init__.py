"""The Spark aggregation plane: the receiver's topic -> per-client, per-metric windowed aggregates.

`config` (the job's config model, importable without pyspark), `decode` (OTLP records -> data points),
`source` (Kafka as a Spark data source), `transforms` (pure DataFrame -> DataFrame), `job` (wiring and
sinks), `command` (`kct aggregate`). Only `config` is imported here: the rest needs pyspark.
"""

from kct.aggregation.config import AggregationConfig, ConfigError, ThresholdRule, load_config, parse_config

__all__ = ["AggregationConfig", "ConfigError", "ThresholdRule", "load_config", "parse_config"]
