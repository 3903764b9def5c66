"""The receiver's configuration: one model, read by the receiver and rendered by the operator.

Settings come from a YAML file, secrets from the environment or files: the file names environment variables
(`auth.bearerTokenEnv`, `kafka.bootstrapServersEnv`, `kafka.producerPropertiesFromEnv`) or a token file
(`auth.bearerTokenFile`), never the secret values. The operator builds a `ReceiverConfig` from a
TelemetryReceiver spec and writes `dump_config_yaml(...)` into a ConfigMap; the receiver reads that file
with `load_receiver_config`. Keys are camelCase (Kubernetes style); Python code may use the snake_case field names.

The models are strict (no "1" for 1), frozen, and forbid unknown keys, so a typo in a ConfigMap is an error
naming the key, not silently ignored. This module imports only pydantic (and PyYAML when loading), so the
operator can import it without the receiver's runtime dependencies, and `ReceiverConfig.model_json_schema()`
gives the schema for the CRD and the Helm chart.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from kct.attribution.config import AttributionConfig
from kct.configfile import ConfigError, read_yaml, validate_document
from kct.models import StrictModel

__all__ = [
    "DEFAULT_PRIVATE_ATTRIBUTE_PATTERNS",
    "AttributionConfig",
    "AuthConfig",
    "ConfigError",
    "ConnectionsConfig",
    "KafkaSinkConfig",
    "LimitsConfig",
    "ListenConfig",
    "LoggingConfig",
    "ObservabilityConfig",
    "PrivacyConfig",
    "QuotaOverride",
    "QuotaOverridesFile",
    "QuotasConfig",
    "RateLimitConfig",
    "ReceiverConfig",
    "ReceiverTuning",
    "RuntimeConfig",
    "ShutdownConfig",
    "TlsConfig",
    "ValidationConfig",
    "dump_config_yaml",
    "load_receiver_config",
    "parse_receiver_config",
]

DEFAULT_ENTITY = "<default>"

# KIP-714 "Private metrics": nothing that identifies the application's host, OS, process, runtime
# environment or credentials. Patterns are attribute keys; `*` matches any run of characters.
DEFAULT_PRIVATE_ATTRIBUTE_PATTERNS: tuple[str, ...] = (
    "host.*",
    "os.*",
    "device.*",
    "process.command",
    "process.command_line",
    "process.command_args",
    "process.executable.*",
    "process.owner",
    "process.user.*",
    "process.real_user.*",
    "process.saved_user.*",
    "process.environment_variable.*",
    "process.working_directory",
    "container.*",
    "k8s.*",
    "cloud.*",
    "net.host.*",
    "enduser.*",
    "user.*",
    "*password*",
    "*passwd*",
    "*secret*",
    "*token*",
    "*credential*",
    "*sasl.*",
    "*ssl.key*",
    "*api_key*",
    "*apikey*",
    "*private_key*",
)




PositiveInt = Annotated[int, Field(gt=0)]
Port = Annotated[int, Field(ge=0, le=65535)]


class TlsConfig(StrictModel):
    """TLS on the listener; with `clientCaFile` clients present a certificate it signed (mTLS). The files are
    re-read when they change (checked every `reloadIntervalMs`): new connections get the new certificate, open
    ones keep theirs."""

    cert_file: str = Field(description="PEM server certificate (chain) path.")
    key_file: str = Field(description="PEM private key path.")
    client_ca_file: str | None = Field(
        default=None, description="PEM CA bundle; when set, client certificates are verified (mutual TLS)."
    )
    client_certificate: Literal["require", "request"] = Field(
        default="require",
        description="With clientCaFile: `require` refuses the handshake without a valid client certificate; "
        "`request` lets it through (health probes, /metrics) but refuses pushes and /v1/clients without one.",
    )
    allowed_subjects: tuple[str, ...] = Field(
        default=(),
        description="With clientCaFile: accepted client certificates name one of these as CN or DNS SAN; "
        "empty = any certificate the CA signed.",
    )
    min_version: Literal["TLSv1.2", "TLSv1.3"] = Field(default="TLSv1.2", description="Oldest TLS version accepted.")
    cipher_suites: tuple[str, ...] = Field(
        default=(),
        description="TLS 1.2 cipher suites (OpenSSL names); empty = Python's secure defaults. TLS 1.3 suites "
        "are not restricted.",
    )
    reload_interval_ms: PositiveInt = Field(
        default=5000, description="How often the certificate, key and client CA files are checked for changes."
    )


class ListenConfig(StrictModel):
    host: str = Field(default="0.0.0.0", description="Address to bind.")
    port: Port = Field(default=4318, description="OTLP/HTTP port (4318 is the OTLP/HTTP default).")
    tls: TlsConfig | None = None
    reuse_port: bool = Field(
        default=False, description="SO_REUSEPORT, so several receiver processes can share one port."
    )
    backlog: PositiveInt = 1024


class AuthConfig(StrictModel):
    bearer_token_env: str | None = Field(
        default=None,
        description="Environment variable holding the bearer token every push must carry "
        "(`Authorization: Bearer <token>`). Null (and no bearerTokenFile) disables token checks (then use "
        "mTLS or a NetworkPolicy).",
    )
    bearer_token_file: str | None = Field(
        default=None,
        description="File holding the bearer token (e.g. a mounted Kubernetes Secret; surrounding whitespace "
        "ignored). Re-read without restart when it changes: checked at most once a second, and on a push "
        "with an unknown token. Exclusive with bearerTokenEnv.",
    )
    previous_token_grace_seconds: int = Field(
        default=300,
        ge=0,
        description="After bearerTokenFile changes, the previous token is still accepted this long, so senders "
        "whose copy of the Secret is updated later (kubelet syncs each pod on its own schedule, up to ~2 "
        "minutes apart) lose no push. 0: only the new token.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> AuthConfig:
        if self.bearer_token_env is not None and self.bearer_token_file is not None:
            raise ValueError(
                "auth.bearerTokenEnv and auth.bearerTokenFile are both set; set one (a file is re-read when it "
                "changes, an environment variable only at start)"
            )
        return self


class LimitsConfig(StrictModel):
    max_compressed_bytes: PositiveInt = Field(
        default=512 * 1024, description="Largest request body as received (413 above)."
    )
    max_decompressed_bytes: PositiveInt = Field(
        default=960 * 1024,
        description="Largest body after decompression (413 above; bombs are cut off, never inflated "
        "whole). Keep below the topic's max.message.bytes (1 MiB by default) minus headers.",
    )
    max_inflight_requests: PositiveInt = Field(
        default=1024,
        description="Pushes being processed or awaiting Kafka at once; more wait for a place in arrival order "
        "(limits.maxQueuedRequests, limits.maxQueueWaitMs).",
    )
    max_queued_requests: PositiveInt = Field(
        default=1024,
        description="Pushes waiting in arrival order for a place when limits.maxInflightRequests are taken; "
        "above, 503 (reason queue_full) with Retry-After.",
    )
    max_queue_wait_ms: PositiveInt = Field(
        default=500,
        description="Longest a push may wait for its turn, from its arrival (the request whole) to the start "
        "of its processing; a push older than this when its turn comes, or still waiting for a place, is "
        "refused with 503 (reason queue_wait) and Retry-After before any work on it.",
    )
    max_inflight_bytes: PositiveInt = Field(
        default=64 * 1024 * 1024,
        description="Body bytes (received + decompressed) held by in-flight pushes (503 above).",
    )
    overload_retry_after_seconds: PositiveInt = Field(
        default=2, description="Retry-After (seconds) sent with 503 when overloaded or Kafka is down."
    )


class ConnectionsConfig(StrictModel):
    """What one connection may hold, and for how long, so slow, idle or many senders cannot exhaust the
    receiver's memory or descriptors. A request's head is checked (token, content type and encoding, declared
    length) as soon as it is whole, before its body is read: a refused request is answered and the connection
    closed without reading the body. Timeouts answer 408 (header, body) or close silently (idle, or no byte
of a request yet); over
    `maxOpen` a new connection is answered 503 with Retry-After and closed. Every such close is counted in
    `kct_receiver_connections_closed_total{reason}`."""

    max_open: PositiveInt = Field(
        default=4096,
        description="Open connections at most; above, a new connection is answered 503 (Retry-After: "
        "limits.overloadRetryAfterSeconds) and closed. Keep below the process's open-file limit.",
    )
    header_timeout_ms: PositiveInt = Field(
        default=10_000,
        description="Time from a connection's opening, or a request's first byte, to the end of its head; "
        "above, 408 and close (closed silently if not a byte of the request came).",
    )
    body_timeout_ms: PositiveInt = Field(
        default=30_000,
        description="Time from the end of a request's head to the last byte of its body (408 and close above): "
        "bounds how long a sender trickling a body holds its buffer.",
    )
    idle_timeout_ms: PositiveInt = Field(
        default=75_000,
        description="Time a keep-alive connection may wait for its next request (closed silently above).",
    )
    max_buffered_bytes: PositiveInt = Field(
        default=32 * 1024 * 1024,
        description="Bytes of requests not yet whole, summed over all connections; the connection whose bytes "
        "go over is answered 503 and closed. At least limits.maxCompressedBytes.",
    )


class PrivacyConfig(StrictModel):
    """Which attribute keys (resource, scope and data point) are dropped before storing (KIP-714).

    A key is kept when it matches an `allow` pattern, otherwise dropped when it matches a `deny` pattern,
    otherwise kept or dropped per `defaultAction`. Patterns are keys with `*` wildcards.
    """

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = DEFAULT_PRIVATE_ATTRIBUTE_PATTERNS
    default_action: Literal["keep", "drop"] = "keep"
    check_data_point_attributes: bool = Field(
        default=True, description="Also filter data point attributes (costs a walk over every point)."
    )


class ValidationConfig(StrictModel):
    check_data_points: bool = Field(
        default=True,
        description="Check every data point (a number point has a value, histogram buckets fit their "
        "bounds) and drop bad ones (partial success); metric-level checks always run.",
    )


class RateLimitConfig(StrictModel):
    """Per client instance push-interval rate limiting, as the broker does it (KIP-714)."""

    enabled: bool = True
    default_interval_ms: PositiveInt | None = Field(
        default=None,
        description="Interval for pushes without the broker's `kct-push-interval-ms` header; "
        "null = such pushes are not rate limited.",
    )
    tolerance: float = Field(
        default=0.2,
        ge=0.0,
        lt=1.0,
        description="Fraction of the interval a push may arrive early (the plugin's queue adds jitter "
        "after the broker's own check).",
    )
    min_state_ttl_ms: PositiveInt = Field(
        default=60_000, description="State per client instance lives MAX(this, 3 x interval)."
    )
    max_tracked_clients: PositiveInt = Field(
        default=500_000, description="Bound on tracked client instances; the least recent are evicted."
    )


class QuotaOverride(StrictModel):
    """A quota for one KIP-257 entity: `<user, client-id>`, `<user>` or `<client-id>`.

    `user` / `clientId` are a name, `"<default>"` (the default entity), or absent (not part of the entity).
    Rates are per second; absent = not set at this level (a less specific level applies).
    """

    user: str | None = None
    client_id: str | None = None
    byte_rate: Annotated[float, Field(gt=0)] | None = None
    push_rate: Annotated[float, Field(gt=0)] | None = None

    @model_validator(mode="after")
    def _names_an_entity(self) -> QuotaOverride:
        if self.user is None and self.client_id is None:
            raise ValueError("a quota override needs `user`, `clientId` or both (use \"<default>\" for defaults)")
        if self.byte_rate is None and self.push_rate is None:
            raise ValueError("a quota override needs `byteRate`, `pushRate` or both")
        return self


class QuotaOverridesFile(StrictModel):
    """The overrides file (`quotas.overridesFile`), re-read when it changes."""

    overrides: tuple[QuotaOverride, ...] = ()


class QuotasConfig(StrictModel):
    """KIP-13 rate quotas over N windows, resolved per KIP-257 entity precedence."""

    enabled: bool = True
    window_count: Annotated[int, Field(ge=2, le=120)] = 10
    window_size_ms: PositiveInt = 1000
    default_byte_rate: Annotated[float, Field(gt=0)] | None = Field(
        default=None,
        description="Decompressed OTLP bytes/s per client id when no override applies; null = unlimited.",
    )
    default_push_rate: Annotated[float, Field(gt=0)] | None = Field(
        default=None, description="Pushes/s per client id when no override applies; null = unlimited."
    )
    overrides: tuple[QuotaOverride, ...] = ()
    overrides_file: str | None = Field(
        default=None, description="YAML file with `overrides:`; re-read on change, no restart needed."
    )
    reload_interval_ms: PositiveInt = 5000
    max_tracked_entities: PositiveInt = 200_000


class KafkaSinkConfig(StrictModel):
    bootstrap_servers: str | None = None
    bootstrap_servers_env: str | None = Field(
        default=None, description="Environment variable with the bootstrap servers (wins over the value)."
    )
    topic: str = Field(default="client-telemetry", min_length=1, max_length=249, pattern=r"^[a-zA-Z0-9._-]+$")
    producer_properties: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="librdkafka properties (e.g. security.protocol, compression.type)."
    )
    producer_properties_from_env: dict[str, str] = Field(
        default_factory=dict, description="librdkafka property -> environment variable (e.g. sasl.password)."
    )
    client_properties_dir: str | None = Field(
        default=None,
        description="Directory of Kafka client properties, one file per property (a mounted Secret: "
        "security.protocol, sasl.mechanism, sasl.username, sasl.password, ssl.ca.pem, ...), read at start and "
        "translated for librdkafka; the properties above win over it.",
    )
    delivery_timeout_ms: PositiveInt = Field(
        default=10_000, description="How long a push waits for Kafka's acknowledgement before 503."
    )
    readiness_timeout_ms: PositiveInt = 2000
    readiness_interval_ms: PositiveInt = 2000

    @model_validator(mode="after")
    def _has_bootstrap(self) -> KafkaSinkConfig:
        if self.bootstrap_servers is None and self.bootstrap_servers_env is None:
            raise ValueError("set `bootstrapServers` or `bootstrapServersEnv`")
        reserved = {"enable.idempotence", "acks", "bootstrap.servers"} & (
            set(self.producer_properties) | set(self.producer_properties_from_env)
        )
        if reserved:
            raise ValueError(f"producer properties {sorted(reserved)} are set by the receiver, remove them")
        return self


class ObservabilityConfig(StrictModel):
    """Self-observability layers (like an API gateway's global/proxy/backend): enable what you use."""

    ingress: bool = Field(default=True, description="HTTP server metrics (http.server.*) and rejections.")
    pipeline: bool = Field(default=True, description="Decode, filter, rate-limit and quota metrics.")
    sink: bool = Field(default=True, description="Kafka producer metrics (messaging.client.*).")
    metrics_path: str = "/metrics"


class LoggingConfig(StrictModel):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    format: Literal["json", "text"] = "json"
    access_log: bool = False


class ShutdownConfig(StrictModel):
    drain_timeout_ms: PositiveInt = Field(
        default=20_000, description="On SIGTERM: time allowed for in-flight pushes and the producer flush."
    )


class RuntimeConfig(StrictModel):
    """How the process runs, not what it does: both choices answer every push the same way. The defaults
    are the measured better ones; the alternatives are there for a platform where a default misbehaves."""

    event_loop: Literal["uvloop", "asyncio"] = Field(
        default="asyncio",
        description="The event loop: `asyncio` (the standard library's) or `uvloop` (libuv). asyncio's is the "
        "default: at about the same CPU per push (interleaved benchmark: within a shared machine's noise, up to "
        "a few percent more under overload), it accepts a burst of new connections (a fleet reconnecting after "
        "a restart) at once, where uvloop left some of them for seconds in the kernel's accept queue while the "
        "loop was busy. uvloop is a dependency of the package on Linux and "
        "macOS; where it is chosen but not installed the receiver logs that and runs asyncio's loop.",
    )
    delivery_wakeup: Literal["eventfd", "thread"] = Field(
        default="eventfd",
        description="How Kafka delivery reports reach the event loop: `eventfd` (librdkafka signals its queue "
        "on a descriptor the loop watches; no thread hand-off) or `thread` (a polling thread per producer). "
        "Where the eventfd cannot be had (not Linux, another librdkafka layout) the receiver logs that and "
        "uses the thread.",
    )


class ReceiverTuning(StrictModel):
    """What a deployment tunes: every section except where to listen, the token and Kafka, which whoever
    deploys the receiver decides (the operator fills them from the TelemetryReceiver). A TelemetryReceiver's
    `spec.receiver` is this model plus the operator's own fields, so a section added here is accepted by the
    CRD, rendered into the ConfigMap and read by the receiver without another edit."""

    limits: LimitsConfig = LimitsConfig()
    """Request size and in-flight limits."""
    connections: ConnectionsConfig = ConnectionsConfig()
    """Connection cap, header/body/idle timeouts and buffered bytes (slow senders cannot exhaust the receiver)."""
    privacy: PrivacyConfig = PrivacyConfig()
    """Attribute keys dropped before storing (KIP-714 private metrics)."""
    validation: ValidationConfig = ValidationConfig()
    """Data point validation."""
    rate_limit: RateLimitConfig = RateLimitConfig()
    """Per client instance push-interval enforcement (KIP-714)."""
    quotas: QuotasConfig = QuotasConfig()
    """Byte-rate and push-rate quotas (KIP-13 windows, KIP-257 entities `user` / `clientId`)."""
    observability: ObservabilityConfig = ObservabilityConfig()
    """Self-observability layers (ingress, pipeline, sink) exposed for Prometheus."""
    logging: LoggingConfig = LoggingConfig()
    """Log level and format."""
    shutdown: ShutdownConfig = ShutdownConfig()
    """Graceful drain on SIGTERM."""
    runtime: RuntimeConfig = RuntimeConfig()
    """Event loop and Kafka delivery-report wake-up (how the process runs; same answers either way)."""
    attribution: AttributionConfig = AttributionConfig()
    """Which Kubernetes workload sent each push (pod, owner, selected labels) as resource attributes."""

    def tuning(self) -> dict[str, Any]:
        """The tuned sections by field name (for building a `ReceiverConfig` from a subclass)."""
        return {name: getattr(self, name) for name in ReceiverTuning.model_fields}


class ReceiverConfig(ReceiverTuning):
    """The whole receiver configuration (the file given to `kct receiver --config`)."""

    listen: ListenConfig = ListenConfig()
    auth: AuthConfig = AuthConfig()
    kafka: KafkaSinkConfig

    @model_validator(mode="after")
    def _limits_consistent(self) -> ReceiverConfig:
        lim = self.limits
        if lim.max_inflight_bytes < lim.max_decompressed_bytes:
            raise ValueError(
                f"limits.maxInflightBytes: {lim.max_inflight_bytes} is below limits.maxDecompressedBytes "
                f"({lim.max_decompressed_bytes}); no push could ever be admitted"
            )
        buffered = self.connections.max_buffered_bytes
        if buffered < lim.max_compressed_bytes:
            raise ValueError(
                f"connections.maxBufferedBytes: {buffered} is below limits.maxCompressedBytes "
                f"({lim.max_compressed_bytes}); a push of the largest allowed size could never be read"
            )
        return self


def parse_receiver_config(data: object, source: str = "<config>") -> ReceiverConfig:
    """Validate an already-parsed YAML/JSON document (JSON semantics: arrays may fill tuples)."""
    return validate_document(ReceiverConfig, data, source)


def load_receiver_config(path: str | os.PathLike[str]) -> ReceiverConfig:
    """Read and validate the YAML configuration file."""
    return parse_receiver_config(read_yaml(path), str(path))


def load_quota_overrides(path: str | os.PathLike[str]) -> QuotaOverridesFile:
    """Read and validate a quota overrides file (empty file: no overrides)."""
    data = read_yaml(path)
    return QuotaOverridesFile() if data is None else validate_document(QuotaOverridesFile, data, str(path))


def dump_config_yaml(config: ReceiverConfig) -> str:
    """Serialize for a ConfigMap: camelCase keys, defaults included, round-trips through `load_receiver_config`."""
    import yaml

    return str(yaml.safe_dump(config.model_dump(mode="json", by_alias=True), sort_keys=False))


def resolve_env(name: str, field: str) -> str:
    """The value of environment variable `name`, named by config field `field`; ConfigError if unset/empty."""
    value = os.environ.get(name)
    if not value:
        raise ConfigError(f"{field}: environment variable {name!r} is not set or empty")
    return value
