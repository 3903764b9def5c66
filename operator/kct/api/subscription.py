"""ClientMetricsSubscription: which clients push which metrics, how often (KIP-714).

One resource becomes one CLIENT_METRICS config resource on the broker (`metrics`, `interval.ms`,
`match`). The models here are the only description of the spec: the CRD's openAPIV3Schema is generated
from them (`kct crds generate`), and the operator parses every resource through them, so what the API
server checks at apply time and what the operator accepts cannot drift apart. Checks the API server
cannot do (RE2 syntax of the match regexes) live in validators here and surface as `InvalidSpec`.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

from pydantic import Field, field_validator, model_validator

from kct.api._base import SpecModel, cel_rule
from kct.api.regex import re2_syntax_error

__all__ = [
    "BROKER_MAX_EFFECTIVE_INTERVAL_MS",
    "DEFAULT_INTERVAL_MS",
    "MATCH_SELECTOR_KEYS",
    "MAX_INTERVAL_MS",
    "MIN_INTERVAL_MS",
    "ClientMetricsSubscriptionSpec",
    "KafkaConnection",
    "MatchSelectors",
    "SecretReference",
    "effective_subscription_name",
]

MIN_INTERVAL_MS: Final = 100
MAX_INTERVAL_MS: Final = 3_600_000
DEFAULT_INTERVAL_MS: Final = 300_000
# Brokers push no less often than every 5 minutes, whatever the subscription asks (KIP-714).
BROKER_MAX_EFFECTIVE_INTERVAL_MS: Final = 300_000

# camelCase spec key -> the selector name the broker's `match` config uses.
MATCH_SELECTOR_KEYS: Final[dict[str, str]] = {
    "clientInstanceId": "client_instance_id",
    "clientId": "client_id",
    "clientSoftwareName": "client_software_name",
    "clientSoftwareVersion": "client_software_version",
    "clientSourceAddress": "client_source_address",
    "clientSourcePort": "client_source_port",
}

_NO_COMMA = cel_rule(
    "!self.contains(',')",
    "must not contain ',': the broker stores the list comma-separated",
)

MetricPrefix = Annotated[
    str,
    Field(
        min_length=1,
        max_length=512,
        description="A metric-name prefix, e.g. `org.apache.kafka.producer.`; `*` alone means every metric.",
        json_schema_extra={"x-kubernetes-validations": [_NO_COMMA]},
    ),
]

_NO_COMMA_OR_EQUALS = cel_rule(
    "!self.contains(',') && !self.contains('=')",
    "must not contain ',' or '=': the broker stores match selectors as a comma-separated key=regex list",
)

SelectorRegex = Annotated[
    str,
    Field(
        min_length=1,
        max_length=1024,
        json_schema_extra={"x-kubernetes-validations": [_NO_COMMA_OR_EQUALS]},
    ),
]


class MatchSelectors(SpecModel):
    """Which clients the subscription applies to. Every value is an anchored RE2 regular expression
    matched against the whole label; all given selectors must match (AND). Absent = all clients."""

    client_instance_id: SelectorRegex | None = None
    """Client instance id (a UUID the broker assigns), e.g. `b69cc35a-7a54-4790-aa69-cc2bd4ee4538`."""
    client_id: SelectorRegex | None = None
    """The client's `client.id`, e.g. `checkout-producer-.*`."""
    client_software_name: SelectorRegex | None = None
    """Client library name, e.g. `apache-kafka-java` or `confluent-kafka-python`."""
    client_software_version: SelectorRegex | None = None
    """Client library version, e.g. `3\\.7\\..*`."""
    client_source_address: SelectorRegex | None = None
    """Source IP address of the client connection as the broker sees it."""
    client_source_port: SelectorRegex | None = None
    """Source port of the client connection as the broker sees it."""

    @field_validator("*")
    @classmethod
    def _re2_syntax(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if "," in value or "=" in value:
            raise ValueError(
                f"{value!r} must not contain ',' or '=': the broker stores match selectors as a "
                "comma-separated key=regex list"
            )
        problem = re2_syntax_error(value)
        if problem is not None:
            raise ValueError(f"{value!r} is not a valid RE2 regular expression: {problem}")
        return value

    def selectors(self) -> dict[str, str]:
        """The given selectors, by their camelCase spec key, in the spec's key order."""
        return {key: value for key, value in self.to_kube().items() if value is not None}


class SecretReference(SpecModel):
    """A Secret in the resource's namespace."""

    name: str = Field(min_length=1, max_length=253)
    """Name of the Secret. Each data key is a Kafka client property (e.g. `security.protocol`,
    `sasl.mechanism`, `sasl.username`, `sasl.password`, `ssl.ca.pem`); see docs/user-guide.md."""


class KafkaConnection(SpecModel):
    """Which Kafka cluster to configure. Absent: the operator's default cluster
    (`KAFKA_BOOTSTRAP_SERVERS` in the operator's environment)."""

    bootstrap_servers: str = Field(min_length=1, max_length=4096, pattern=r"^[^\s]+$")
    """Comma-separated `host:port` list."""
    secret_ref: SecretReference | None = None
    """Secret holding client properties for SASL/TLS."""


_SUBSCRIPTION_NAME_IMMUTABLE = cel_rule(
    "self == oldSelf", "spec.subscriptionName is immutable once set", reason="FieldValueForbidden"
)


class ClientMetricsSubscriptionSpec(SpecModel):
    """A KIP-714 client metrics subscription, reconciled into the broker's CLIENT_METRICS config
    resource of the same name."""

    metrics: list[MetricPrefix] = Field(
        max_length=1000,
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule("!('*' in self) || size(self) == 1", "'*' (all metrics) must be the only entry")
            ]
        },
    )
    """Metric-name prefixes to subscribe to. `["*"]` subscribes to all metrics, `[]` to none."""
    interval_ms: int = Field(default=DEFAULT_INTERVAL_MS, ge=MIN_INTERVAL_MS, le=MAX_INTERVAL_MS)
    """Push interval in milliseconds (100..3600000). Brokers cap the effective interval at 300000
    (5 minutes); larger values are accepted with a warning condition."""
    match: MatchSelectors | None = None
    """Client selectors; absent = every client."""
    subscription_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=249,
        pattern=r"^[A-Za-z0-9._-]+$",
        json_schema_extra={"x-kubernetes-validations": [_SUBSCRIPTION_NAME_IMMUTABLE]},
    )
    """Name of the CLIENT_METRICS resource on the broker. Defaults to `metadata.name`; immutable."""
    kafka: KafkaConnection | None = None
    """Cluster connection; absent = the operator's default cluster."""

    @field_validator("metrics")
    @classmethod
    def _metrics_entries(cls, value: list[str]) -> list[str]:
        for index, entry in enumerate(value):
            if "," in entry:
                raise ValueError(f"entry {index} ({entry!r}) must not contain ','")
        if "*" in value and len(value) != 1:
            raise ValueError("'*' (all metrics) must be the only entry")
        return value

    @model_validator(mode="before")
    @classmethod
    def _no_nulls(cls, data: Any) -> Any:
        # Kubernetes drops null fields on write; treat an explicit null like an absent field.
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if value is not None}
        return data


def effective_subscription_name(spec: dict[str, Any] | None, metadata_name: str) -> str:
    """The CLIENT_METRICS resource name a raw (possibly invalid) resource claims."""
    if isinstance(spec, dict):
        name = spec.get("subscriptionName")
        if isinstance(name, str) and name:
            return name
    return metadata_name
