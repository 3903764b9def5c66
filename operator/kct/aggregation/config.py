"""The aggregation job's configuration: one model, read by `kct aggregate` and rendered by the operator.

Keys are camelCase (Kubernetes style) like the receiver's config; the models are strict, frozen and forbid
unknown keys, so a typo in a job config is an error naming the key. Values of the form `${NAME}` or
`${NAME:-default}` are replaced from the environment when the file is loaded, so one file serves a laptop
(`KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:19092`) and a cluster. Relative paths are resolved against the
current directory by Spark, as usual.

This module imports only pydantic (and PyYAML when loading): the operator renders it without pyspark.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import Field, model_validator

from kct.configfile import ConfigError, read_yaml, validate_document
from kct.models import StrictModel

__all__ = [
    "DEFAULT_EXPORT_LABELS",
    "JOB_JAVA_OPTIONS",
    "JOB_SPARK_CONF",
    "AggregationConfig",
    "AggregationTuning",
    "ConfigError",
    "ExportSettings",
    "KafkaOutputConfig",
    "OtlpExportConfig",
    "ParquetOutputConfig",
    "RunConfig",
    "SourceConfig",
    "SparkConfig",
    "ThresholdRule",
    "WindowConfig",
    "load_job_config",
    "parse_job_config",
]




class SourceConfig(StrictModel):
    """Where the receiver's records are: one topic, one record per push (docs/user-guide.md, the record format),
    read with Spark's own Kafka source (spark-sql-kafka-0-10)."""

    bootstrap_servers: str = Field(min_length=1)
    topic: str = Field(default="client-telemetry", min_length=1)
    # "earliest" / "latest" for a query without a checkpoint; afterwards the checkpoint decides.
    starting_offsets: Literal["earliest", "latest"] = "earliest"
    # Upper bound on records read per micro-batch (Spark's maxOffsetsPerTrigger; bounds memory and batch latency).
    max_records_per_partition: Annotated[int, Field(ge=1)] = 200_000
    # Extra Kafka consumer properties (security.protocol, sasl.*, ssl.*), given to Spark's source as kafka.<name>.
    consumer_properties: dict[str, str] = Field(default_factory=dict)
    # A mounted Secret of Kafka client properties (one file per property: kct.kafka.client_properties), read
    # when the job starts and translated for the Java client; consumer_properties win over it.
    client_properties_dir: str | None = None


class WindowConfig(StrictModel):
    """Tumbling event-time windows over the data points' own timestamps (`time_unix_nano`)."""

    size_seconds: Annotated[int, Field(ge=1, le=86_400)] = 60
    """Window length in seconds."""
    watermark_seconds: Annotated[int, Field(ge=0, le=86_400)] = 120
    """How long after a window's end late points are still accepted; later points are dropped."""
    counter_lookback_windows: Annotated[int, Field(ge=1, le=1_440)] = 5
    """How far back (in windows) a cumulative series' previous point is looked for when computing a delta.
    Must cover the longest push interval: the broker caps it at 5 minutes, so 5 one-minute windows."""


class ThresholdRule(StrictModel):
    """An alert when `field` of `metric` compares true against `threshold` for longer than `forSeconds`.

    Evaluated per client instance and series (metric + data-point attributes) over consecutive windows:
    KIP-714's example is `{metric: org.apache.kafka.producer.record.queue.time.max, field: max, op: ">",
    threshold: 5000, forSeconds: 180}`.
    """

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    metric: str = Field(min_length=1)
    field: Literal["last", "min", "max", "avg", "delta", "rate", "p50", "p95", "p99"] = "max"
    op: Literal[">", ">=", "<", "<="] = ">"
    threshold: float
    for_seconds: Annotated[int, Field(ge=0)] = 0
    severity: Literal["info", "warning", "critical"] = "warning"


class ParquetOutputConfig(StrictModel):
    """Parquet tables under `path`: client_metrics/, rollups/, workload_rollups/, terminations/, alerts/."""

    path: str = Field(min_length=1)


class KafkaOutputConfig(StrictModel):
    """Optional topic of aggregates (JSON values, key = client instance id)."""

    bootstrap_servers: str = Field(min_length=1)
    topic: str = Field(min_length=1)
    producer_properties: dict[str, str] = Field(default_factory=dict)
    # As SourceConfig.client_properties_dir, translated for librdkafka; producer_properties win over it.
    client_properties_dir: str | None = None


# The data-point attributes an exported series keeps unless `labels` says otherwise: who the client is and what
# it runs (the KIP-714 broker labels), and the broker a per-node metric is about. Not kept: the client's source
# address and port (a new series per connection), the principal (often one per client already), topic and
# partition attributes (a series per partition per client). `client_instance_id` is always kept (added when
# missing): without it two clients' series would merge.
DEFAULT_EXPORT_LABELS: Final[tuple[str, ...]] = (
    "client_instance_id", "client_id", "client_software_name", "client_software_version", "node_id",
    "k8s_namespace_name", "k8s_workload_kind", "k8s_workload_name",
)


class ExportSettings(StrictModel):
    """OTLP export of each finished window's aggregates (per client): what the job's config and a
    TelemetryReceiver's `spec.aggregation.export` share. Credentials and the CA are not here: the job's config
    has their values (`OtlpExportConfig`), the CRD references Secrets (kct.api.telemetry_receiver)."""

    endpoint: str = Field(min_length=1, pattern=r"^https?://")
    """OTLP/HTTP metrics URL, e.g. `http://prometheus:9090/api/v1/otlp/v1/metrics` (Prometheus with
    `--web.enable-otlp-receiver`) or `http://otel-collector:4318/v1/metrics`."""
    resource_attributes: dict[str, str] = Field(default_factory=lambda: {"service.name": "kct-aggregation"})
    """Resource attributes of every request (Prometheus: `job` from `service.name`, the rest in `target_info`)."""
    labels: tuple[str, ...] = DEFAULT_EXPORT_LABELS
    """Data-point attributes kept on exported series (broker labels by their KIP-714 name, e.g.
    `client_software_name`, or a metric's own attribute, e.g. `topic`); others are dropped and the series that
    then coincide are merged. `client_instance_id` is always kept."""
    max_series_per_window: Annotated[int, Field(ge=1, le=10_000_000)] = 100_000
    """Most series one window sends; the rest are dropped (whole clients, in client order) and counted in
    `kct.aggregation.export.series.dropped`."""
    timeout_seconds: Annotated[float, Field(gt=0, le=300)] = 10.0
    """Per request."""
    max_attempts: Annotated[int, Field(ge=1, le=20)] = 4
    """Attempts per request (connection errors, 429 and 5xx are retried); then the window counts as failed."""
    backoff_seconds: Annotated[float, Field(ge=0, le=60)] = 1.0
    """Wait before the second attempt, doubled for each further one (capped at 30 s)."""


class OtlpExportConfig(ExportSettings):
    """The job's export section: the shared settings plus header values and a CA file (the operator renders
    Secret values as `${ENV}` references, expanded when the job loads its config)."""

    headers: dict[str, str] = Field(default_factory=dict)
    """HTTP headers of every request, e.g. `Authorization: Bearer ${KCT_EXPORT_HEADER_0}`."""
    ca_file: str | None = None
    """PEM bundle to verify an https endpoint with; absent: the system's CAs."""


class RunConfig(StrictModel):
    """How the job runs.

    `mode: stream` is Structured Streaming with checkpoints (the production mode); with
    `untilDrained: true` it uses the availableNow trigger and stops once the topic is drained (windows
    still open at that point are finalized by the next run, from the checkpointed state).
    `mode: batch` reads the topic from `startingOffsets` to its current end, aggregates every window
    (including the newest, still-open ones) and overwrites the outputs: for tests, demos and backfills.
    `mode: hourly` re-aggregates the client_metrics rows of one hour (`hour`, default: the last complete
    hour) into client_metrics_hourly, reading Parquet only (the ScheduledSparkApplication).
    """

    mode: Literal["stream", "batch", "hourly"] = "stream"
    until_drained: bool = False
    trigger_seconds: Annotated[int, Field(ge=0)] = 30
    checkpoint_path: str | None = None  # default: <output path>/_checkpoints
    # Stop after this many seconds even when not drained (0 = never); for demos and smoke tests.
    timeout_seconds: Annotated[int, Field(ge=0)] = 0
    # hourly mode: the hour to roll up, e.g. "2026-11-21T10" (UTC); empty = the last complete hour.
    hour: str = Field(default="", pattern=r"^(\d{4}-\d{2}-\d{2}T\d{2})?$")


# JVM options of the job's driver and executors. The parallel collector instead of G1: on a 1M-point run in
# a fresh local[2] JVM (bench/spark_throughput.py) it took 37.6-38.7 JVM CPU-seconds instead of 42.6-44.6 for
# the batch and 40.5-43.0 instead of 48.0-49.9 for the stream (the tasks' threads ~3 CPU-s less, the JIT
# compilers ~2 less: G1's write barriers cost in the compiled code and in compiling it); the job's pauses do
# not matter, its throughput does. C2-only (-TieredCompilation) and higher C2 thresholds (x3; x10 and x20
# again later: less JIT, but the benchmark's first batch slower) were measured too and dropped.
JOB_JAVA_OPTIONS: Final = "-XX:+UseParallelGC"
# Spark settings the job is tuned with: `job.build_session` sets them when it creates the session, the
# operator renders them into the SparkApplication's `sparkConf` (and spark/*.yaml hold them too); a job
# config's `spark.conf` or a TelemetryReceiver's `sparkConf` overrides any of them.
JOB_SPARK_CONF: Final[dict[str, str]] = {
    # collect_list makes some aggregations an ObjectHashAggregate, which by default falls back to sorting
    # after 128 groups per task; series x windows are far more: measured ~2x faster with this.
    "spark.sql.objectHashAggregate.sortBased.fallbackThreshold": "200000",
    # Spark keeps 100 compiled classes (whole-stage code, projections, orderings); one run of the job
    # generates more, so every micro-batch compiled them all again with Janino and the JVM JIT-compiled the
    # new classes again: ~14 of ~54 JVM CPU-seconds per warm 1M-point batch (bench/spark_throughput.py).
    "spark.sql.codegen.cache.maxEntries": "1000",
    "spark.driver.extraJavaOptions": JOB_JAVA_OPTIONS,
    "spark.executor.extraJavaOptions": JOB_JAVA_OPTIONS,
}


class SparkConfig(StrictModel):
    """The SparkSession when the job creates it (local runs); ignored when spark-submit already did."""

    master: str = "local[*]"
    app_name: str = "kct-aggregation"
    shuffle_partitions: Annotated[int, Field(ge=1)] = 4
    conf: dict[str, str] = Field(default_factory=dict)


class AggregationTuning(StrictModel):
    """What a deployment tunes about the aggregation itself: windows and alert rules. A TelemetryReceiver's
    `spec.aggregation` is this model plus how the job is run (image, schedule, sink, pods), so a setting
    added here is accepted by the CRD and rendered into the job's config without another edit."""

    window: WindowConfig = Field(default_factory=WindowConfig)
    """Window size, watermark and counter lookback of the job."""
    rules: tuple[ThresholdRule, ...] = ()
    """Threshold rules (KIP-714's example: queue latency above 5000 ms for 180 s)."""

    @model_validator(mode="after")
    def _unique_rule_names(self) -> AggregationTuning:
        seen: set[str] = set()
        for rule in self.rules:
            if rule.name in seen:
                raise ValueError(f"rules: name {rule.name!r} is used twice; rule names must be unique")
            seen.add(rule.name)
        return self

    def tuning(self) -> dict[str, Any]:
        """The tuned fields by name (for building an `AggregationConfig` from a subclass)."""
        return {name: getattr(self, name) for name in AggregationTuning.model_fields}


class AggregationConfig(AggregationTuning):
    """The whole job configuration (the file given to `kct aggregate --config`)."""

    source: SourceConfig
    parquet: ParquetOutputConfig
    kafka_output: KafkaOutputConfig | None = None
    export: OtlpExportConfig | None = None
    run: RunConfig = Field(default_factory=RunConfig)
    spark: SparkConfig = Field(default_factory=SparkConfig)

    def checkpoint_dir(self) -> str:
        return self.run.checkpoint_path or f"{self.parquet.path.rstrip('/')}/_checkpoints"


_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _expand(value: Any, where: str) -> Any:
    if isinstance(value, str):

        def sub(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in os.environ:
                return os.environ[name]
            if default is not None:
                return default
            raise ConfigError(f"{where}: environment variable {name} is not set and has no default")

        return _ENV_REF.sub(sub, value)
    if isinstance(value, dict):
        return {k: _expand(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


def parse_job_config(raw: Any, source: str = "aggregation config") -> AggregationConfig:
    """Build the config from parsed YAML/JSON, after `${ENV}` expansion; ConfigError names the key.
    Lax about scalars (`"30"` is 30), because an expanded `${VAR}` is always a string."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the document must be a mapping")
    return validate_document(AggregationConfig, _expand(raw, "config"), source, strict=False)


def load_job_config(path: Path) -> AggregationConfig:
    """Read, expand and validate the YAML job config file."""
    return parse_job_config(read_yaml(path), str(path))
