"""TelemetryReceiver: one resource for the whole collection path in a namespace.

The receiver Deployment and its Service, config, token, disruption budget, autoscaler and network
policy; the Kafka topic it writes to; and the Spark application that aggregates that topic. Like
ClientMetricsSubscription, the models here are the only description of the spec (the CRD schema is
generated from them), and the receiver's settings are not re-described: `spec.receiver` holds the
receiver's own config sub-models (`kct.receiver.config`), and `spec.aggregation.window` / `rules` the
Spark job's (`kct.aggregation.config`), so what the CRD accepts is exactly what those programs read.

Spec fields that only the operator understands (replicas, scheduling, the token Secret, the topic's
partitions) stay here; the operator turns the whole spec into a `ReceiverConfig` in
`kct.render.receiver_config`.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Final, Literal

from pydantic import ConfigDict, Field, WithJsonSchema, model_validator

from kct.aggregation.config import AggregationTuning, ExportSettings
from kct.api._base import SpecModel, cel_rule
from kct.api.status import Condition
from kct.api.subscription import KafkaConnection
from kct.receiver.config import ReceiverTuning

__all__ = [
    "DEFAULT_AGGREGATION_IMAGE",
    "DEFAULT_RECEIVER_IMAGE",
    "AggregationExportStatus",
    "AggregationSpec",
    "AggregationStatus",
    "AutoscalingSpec",
    "CaSecretReference",
    "ClientAuthSpec",
    "DriverSpec",
    "ExecutorSpec",
    "ExportSpec",
    "ExportTlsSpec",
    "IssuedCertificatesSpec",
    "NetworkPolicySpec",
    "OutputTopicSpec",
    "PodDisruptionBudgetSpec",
    "ReceiverAuthSpec",
    "ReceiverSettings",
    "ReceiverTlsSpec",
    "ResourceRequirements",
    "SecretKeyReference",
    "TelemetryReceiverSpec",
    "TelemetryReceiverStatus",
    "TlsStatus",
    "Toleration",
    "TopicStatus",
    "parse_receiver_spec",
]

DEFAULT_RECEIVER_IMAGE: Final = "ghcr.io/kct-dev/kct:0.1.0"
DEFAULT_AGGREGATION_IMAGE: Final = "ghcr.io/kct-dev/kct-spark:0.1.0"

# Kubernetes quantities are written `1`, `0.5`, `500m` or `256Mi`: integer or string.
Quantity = Annotated[
    int | str,
    WithJsonSchema(
        {
            "x-kubernetes-int-or-string": True,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
            r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$",
        }
    ),
]
# Opaque Kubernetes structures (affinity, network policy peers) passed through to the children.
KubeObject = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]
PullPolicy = Literal["Always", "IfNotPresent", "Never"]
# A container/volume-safe size like Spark's `512m`, `2g`.
SparkMemory = Annotated[str, Field(pattern=r"^[0-9]+[kmgtKMGT]?$", max_length=16)]


class ResourceRequirements(SpecModel):
    """Compute resources of the receiver container (core/v1 ResourceRequirements)."""

    requests: dict[str, Quantity] | None = None
    """e.g. `{cpu: 250m, memory: 256Mi}`."""
    limits: dict[str, Quantity] | None = None
    """e.g. `{memory: 512Mi}`."""


class Toleration(SpecModel):
    """A core/v1 Toleration."""

    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class AutoscalingSpec(SpecModel):
    """A HorizontalPodAutoscaler (autoscaling/v2) on CPU; when enabled it owns the replica count."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    "self.minReplicas <= self.maxReplicas",
                    "minReplicas must not exceed maxReplicas",
                    field_path=".minReplicas",
                )
            ]
        }
    )

    enabled: bool = True
    """False removes the HorizontalPodAutoscaler and returns to `spec.replicas`."""
    min_replicas: int = Field(default=2, ge=1, le=1000)
    """Fewest replicas."""
    max_replicas: int = Field(default=10, ge=1, le=1000)
    """Most replicas; at least minReplicas."""
    target_cpu_utilization_percentage: int = Field(default=70, ge=1, le=100, alias="targetCPUUtilizationPercentage")
    """Average CPU utilization (percent of the CPU request) the autoscaler aims for."""

    @model_validator(mode="after")
    def _min_not_above_max(self) -> AutoscalingSpec:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"minReplicas: {self.min_replicas} is above maxReplicas ({self.max_replicas}); "
                "minReplicas must not exceed maxReplicas"
            )
        return self


class SecretKeyReference(SpecModel):
    """A key of a Secret in the resource's namespace."""

    name: str = Field(min_length=1, max_length=253)
    """Secret name."""
    key: str = Field(default="token", min_length=1, max_length=253)
    """Key holding the value."""


class ReceiverAuthSpec(SpecModel):
    """Bearer-token authentication of pushes (`Authorization: Bearer <token>`)."""

    enabled: bool = True
    """False accepts unauthenticated pushes (then restrict who can connect with `networkPolicy`)."""
    token_secret_ref: SecretKeyReference | None = None
    """An existing Secret with the token. Absent: the operator generates a Secret
    `<name>-token` (key `token`) once and keeps it."""


# TLS 1.2 cipher suites (OpenSSL names) accepted by default: forward secrecy and AEAD only. TLS 1.3's suites
# are all of that kind and are not restricted (Python's ssl cannot choose among them).
DEFAULT_CIPHER_SUITES: Final = (
    "ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-RSA-AES256-GCM-SHA384", "ECDHE-ECDSA-CHACHA20-POLY1305", "ECDHE-RSA-CHACHA20-POLY1305",
)
CipherSuite = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
# An accepted client certificate subject: a CN or a DNS SAN, compared exactly.
Subject = Annotated[str, Field(min_length=1, max_length=253)]


class IssuedCertificatesSpec(SpecModel):
    """The CA and serving certificate the operator issues when `tls.mode` is `issued` (ECDSA P-256). Renewal
    happens on the periodic resync once less than `renewBeforeHours` is left; a renewed CA is published in the
    trust bundle next to the old one (trusted until it expires) and signs serving certificates only after
    `caPropagationMinutes`, so brokers that reload their trust file in that time lose no push."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule("self.renewBeforeHours < self.validityHours",
                         "renewBeforeHours must be below validityHours", field_path=".renewBeforeHours"),
                cel_rule("self.caRenewBeforeHours < self.caValidityHours",
                         "caRenewBeforeHours must be below caValidityHours", field_path=".caRenewBeforeHours"),
            ]
        }
    )

    validity_hours: int = Field(default=2160, ge=1, le=87600)
    """Lifetime of a serving certificate (default 90 days)."""
    renew_before_hours: int = Field(default=720, ge=0, le=87600)
    """A serving certificate is re-issued when less than this is left (default 30 days)."""
    ca_validity_hours: int = Field(default=43800, ge=2, le=175200)
    """Lifetime of the CA (default 5 years)."""
    ca_renew_before_hours: int = Field(default=8760, ge=1, le=175200)
    """The CA is renewed when less than this is left (default 1 year): the overlap in which both CAs are
    trusted."""
    ca_propagation_minutes: int = Field(default=10, ge=0, le=10080)
    """Time a renewed CA sits in the published bundle before it signs serving certificates (kubelet's Secret
    sync and the brokers' trust-file reload must carry it to every broker first)."""

    @model_validator(mode="after")
    def _renew_before_validity(self) -> IssuedCertificatesSpec:
        if self.renew_before_hours >= self.validity_hours:
            raise ValueError(f"renewBeforeHours: {self.renew_before_hours} must be below validityHours "
                             f"({self.validity_hours})")
        if self.ca_renew_before_hours >= self.ca_validity_hours:
            raise ValueError(f"caRenewBeforeHours: {self.ca_renew_before_hours} must be below caValidityHours "
                             f"({self.ca_validity_hours})")
        return self


class CaSecretReference(SpecModel):
    """A key of a Secret in the resource's namespace holding a PEM CA bundle."""

    name: str = Field(min_length=1, max_length=253)
    """Secret name."""
    key: str = Field(default="ca.crt", min_length=1, max_length=253)
    """Key holding the PEM bundle."""


class ClientAuthSpec(SpecModel):
    """Mutual TLS: pushes must come with a client certificate signed by `caSecretRef`'s CA. The identity used
    for quotas and records is then the certificate's (its CN), never the `kct-principal` header. Health probes
    and `/metrics` need no certificate (kubelet and scrapers present none)."""

    ca_secret_ref: CaSecretReference
    """The CA bundle client certificates must chain to (e.g. the brokers' issuer's `ca.crt`)."""
    allowed_subjects: list[Subject] = Field(default_factory=list, max_length=256)
    """Accepted subjects: a certificate is accepted when its CN or one of its DNS SANs is listed. Empty: any
    certificate the CA signed."""


class ReceiverTlsSpec(SpecModel):
    """TLS on the receivers' OTLP port (on by default). `issued`: the operator runs its own CA and issues and
    renews the serving certificate; `secret`: a `kubernetes.io/tls` Secret (`tls.crt`, `tls.key`, optional
    `ca.crt`; what cert-manager writes) kept up to date by someone else; `disabled`: plain HTTP (the token
    then crosses the network in clear). Receivers reload changed certificate files without restart."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule("self.mode != 'secret' || has(self.secretName)",
                         "secretName is required when mode is secret", field_path=".secretName"),
                cel_rule("self.mode != 'disabled' || !has(self.clientAuth)",
                         "clientAuth needs TLS: mode must not be disabled", field_path=".clientAuth"),
            ]
        }
    )

    mode: Literal["issued", "secret", "disabled"] = "issued"
    """Where the serving certificate comes from (see above)."""
    secret_name: str | None = Field(default=None, min_length=1, max_length=253)
    """The `kubernetes.io/tls` Secret of `mode: secret`."""
    issued: IssuedCertificatesSpec = IssuedCertificatesSpec()
    """Validity and renewal of the operator's certificates (`mode: issued`)."""
    min_version: Literal["TLSv1.2", "TLSv1.3"] = "TLSv1.2"
    """Oldest TLS version accepted."""
    cipher_suites: list[CipherSuite] = Field(default_factory=lambda: list(DEFAULT_CIPHER_SUITES), max_length=64)
    """TLS 1.2 cipher suites (OpenSSL names); the default keeps forward-secret AEAD suites only."""
    client_auth: ClientAuthSpec | None = None
    """Mutual TLS; absent: no client certificate asked for."""

    @model_validator(mode="after")
    def _consistent(self) -> ReceiverTlsSpec:
        if self.mode == "secret" and self.secret_name is None:
            raise ValueError("secretName: required when mode is secret")
        if self.mode == "disabled" and self.client_auth is not None:
            raise ValueError("clientAuth: needs TLS, but mode is disabled")
        return self

    @property
    def enabled(self) -> bool:
        return self.mode != "disabled"


# Producer properties that carry credentials. A CR and the ConfigMap rendered from it are readable by anyone
# who may read the namespace's configuration; credentials belong in Secrets (`producerPropertiesFromSecrets`).
# The API server refuses the known credential keys at apply time (a CEL rule of map lookups: one over every
# key's text would exceed its cost budget); the operator also refuses any key containing one of the words, in
# any case, and flags it in status.
SECRET_PROPERTY_WORDS: Final = ("password", "secret")
SECRET_PROPERTY_KEYS: Final = (
    "sasl.password", "sasl.plain.password", "sasl.jaas.config", "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.config", "ssl.key.password", "ssl.keystore.password", "ssl.truststore.password",
    "ssl.key.pem", "ssl.keystore.key", "ssl.keystore.pem",
)


def secret_looking(key: str) -> bool:
    """True for a producer property whose value is a credential (SECRET_PROPERTY_WORDS/KEYS)."""
    lowered = key.lower()
    return lowered in SECRET_PROPERTY_KEYS or any(word in lowered for word in SECRET_PROPERTY_WORDS)


def _secret_property_rule() -> str:
    """The API server's part of `secret_looking`: the known credential keys, each a constant-cost map lookup."""
    keys = ", ".join(f"'{key}'" for key in SECRET_PROPERTY_KEYS)
    return f"!has(self.producerProperties) || ![{keys}].exists(k, k in self.producerProperties)"


_SECRET_PROPERTY_MESSAGE: Final = (
    "producerProperties must not hold credentials (keys containing password or secret, sasl.jaas.config, "
    "private keys): the CR and the receiver's ConfigMap are not secret; use producerPropertiesFromSecrets"
)


class ReceiverSettings(ReceiverTuning):
    """The receiver's settings: every section of its own config (`kct receiver --config`) that a deployment
    tunes (inherited from `ReceiverTuning`, so a new section needs no edit here), plus how the operator
    provides the token and Kafka credentials. Listening address, bootstrap servers and topic are set by the
    operator."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(_secret_property_rule(), _SECRET_PROPERTY_MESSAGE, field_path=".producerProperties"),
                cel_rule(
                    "!has(self.quotas) || !has(self.quotas.overrides) || "
                    "self.quotas.overrides.all(o, has(o.user) || has(o.clientId))",
                    "every quota override names its KIP-257 entity: user, clientId or both "
                    '("<default>" for the default entity)',
                    field_path=".quotas.overrides",
                ),
                cel_rule(
                    "!has(self.quotas) || !has(self.quotas.overrides) || "
                    "self.quotas.overrides.all(o, has(o.byteRate) || has(o.pushRate))",
                    "every quota override sets byteRate, pushRate or both",
                    field_path=".quotas.overrides",
                ),
            ]
        }
    )

    auth: ReceiverAuthSpec = ReceiverAuthSpec()
    """Push authentication."""
    tls: ReceiverTlsSpec = ReceiverTlsSpec()
    """TLS (and optionally mTLS) on the OTLP port; on by default with certificates the operator issues."""
    producer_properties: dict[str, str] = Field(default_factory=dict, max_length=256)
    """Extra librdkafka producer properties (e.g. `compression.type: zstd`). Credentials are refused here
    (keys containing password or secret, `sasl.jaas.config`, private keys): use
    `producerPropertiesFromSecrets`."""
    producer_properties_from_secrets: dict[str, SecretKeyReference] = Field(default_factory=dict)
    """librdkafka producer properties whose values are Secret keys (e.g. `sasl.password:
    {name: kafka-user, key: password}`); the pods get them as environment variables, never in the ConfigMap."""

    @model_validator(mode="after")
    def _no_credentials_in_plain_properties(self) -> ReceiverSettings:
        found = sorted(key for key in self.producer_properties if secret_looking(key))
        if found:
            raise ValueError(f"producerProperties: {', '.join(found)}: {_SECRET_PROPERTY_MESSAGE}")
        return self


class OutputTopicSpec(SpecModel):
    """The Kafka topic the receiver writes one record per push to. Created by the operator.

    Durable by default: without `replicationFactor` the topic gets min(3, brokers) replicas, and without
    `minInsyncReplicas` it pins `min.insync.replicas` to one less than its replicas (at least 1), so an
    acknowledged push (the receiver produces with acks=all) is on two brokers once there are three, and
    one broker may be down without stopping writes."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    "!has(self.replicationFactor) || !has(self.minInsyncReplicas) || "
                    "self.minInsyncReplicas <= self.replicationFactor",
                    "minInsyncReplicas must not exceed replicationFactor: no write could ever be acknowledged",
                    field_path=".minInsyncReplicas",
                )
            ]
        }
    )

    name: str = Field(default="client-telemetry", min_length=1, max_length=249, pattern=r"^[a-zA-Z0-9._-]+$")
    """Topic name."""
    partitions: int = Field(default=6, ge=1, le=10000)
    """Partition count. Partitions only grow: a smaller number is reported in status, not applied."""
    replication_factor: int | None = Field(default=None, ge=1, le=32)
    """Replicas per partition at creation; absent = min(3, the cluster's brokers). At most the cluster's
    brokers (checked when the topic is created). Kafka cannot change an existing topic's replication by
    config: a difference is reported in status (`ReplicationFactorDiffers`), not applied."""
    min_insync_replicas: int | None = Field(default=None, ge=1, le=32)
    """`min.insync.replicas` of the topic: replicas that must have a write before it is acknowledged;
    absent = the replication factor less one, at least 1. At most `replicationFactor`. Drift is reverted."""
    retention_ms: int | None = Field(default=None, ge=-1)
    """`retention.ms` of the topic (-1 = forever); absent = the broker's default."""
    delete_on_removal: bool = False
    """Delete the topic when the TelemetryReceiver is deleted. Default false: the data outlives the resource."""

    @model_validator(mode="after")
    def _min_insync_within_replicas(self) -> OutputTopicSpec:
        rf, isr = self.replication_factor, self.min_insync_replicas
        if rf is not None and isr is not None and isr > rf:
            raise ValueError(
                f"minInsyncReplicas: {isr} is above replicationFactor ({rf}); minInsyncReplicas must not "
                "exceed replicationFactor: no write could ever be acknowledged"
            )
        return self


class DriverSpec(SpecModel):
    """The Spark driver pod."""

    cores: int = Field(default=1, ge=1, le=64)
    memory: SparkMemory = "1g"
    service_account: str | None = Field(default=None, max_length=253)
    """Service account with the rights spark-operator's driver needs (create executor pods)."""


class ExecutorSpec(SpecModel):
    """The Spark executor pods."""

    instances: int = Field(default=1, ge=1, le=1000)
    cores: int = Field(default=1, ge=1, le=64)
    memory: SparkMemory = "2g"


class ExportTlsSpec(SpecModel):
    """How an https export endpoint is verified."""

    ca_secret_ref: SecretKeyReference | None = None
    """A Secret key holding the PEM CA bundle (e.g. `{name: otlp-ca, key: ca.crt}`), mounted into the driver;
    absent: the image's system CAs."""


class ExportSpec(ExportSettings):
    """OTLP/HTTP export of each finished window's aggregates per client (the job's own export settings,
    inherited from `ExportSettings`, plus the Secrets the operator gives the driver)."""

    headers: dict[str, str] = Field(default_factory=dict)
    """Plain headers of every request (e.g. `X-Scope-OrgID: team-a`)."""
    headers_from_secrets: dict[str, SecretKeyReference] = Field(default_factory=dict)
    """Headers whose values are Secret keys (e.g. `Authorization: {name: otlp-auth, key: header}`); the driver
    gets them as environment variables, never in the ConfigMap."""
    tls: ExportTlsSpec = ExportTlsSpec()


class AggregationSpec(AggregationTuning):
    """The Spark job aggregating the topic (kubeflow spark-operator, `sparkoperator.k8s.io/v1beta2`): the
    job's own tuning (`window`, `rules`, inherited from `AggregationTuning`) plus how it runs."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    "self.mode != 'scheduled' || has(self.schedule)",
                    "schedule is required when mode is scheduled",
                    field_path=".schedule",
                )
            ]
        }
    )

    enabled: bool = True
    """False removes the Spark application (the aggregates already written stay)."""
    image: str = Field(default=DEFAULT_AGGREGATION_IMAGE, min_length=1)
    """Spark image with the job (`docker build --target spark`)."""
    image_pull_policy: PullPolicy = "IfNotPresent"
    spark_version: str = "4.2.0"
    mode: Literal["streaming", "scheduled"] = "streaming"
    """`streaming`: a SparkApplication running Structured Streaming continuously. `scheduled`: a
    ScheduledSparkApplication that drains the topic (availableNow) on `schedule`, resuming from its checkpoint."""
    schedule: str | None = Field(default=None, min_length=1, max_length=128)
    """Cron schedule for `mode: scheduled`, e.g. `*/15 * * * *`."""
    sink_path: str = Field(default="/data/aggregates", min_length=1)
    """Where Parquet tables go: a path on `sinkClaimName`'s volume, or an object store URL."""
    sink_claim_name: str | None = Field(default=None, max_length=253)
    """PersistentVolumeClaim mounted at `sinkPath` in driver and executors (ReadWriteMany)."""
    trigger_seconds: int = Field(default=30, ge=0, le=86400)
    """Micro-batch trigger of the streaming query."""
    max_records_per_trigger: int | None = Field(default=None, ge=1)
    """Upper bound on the records one micro-batch reads (Spark's maxOffsetsPerTrigger); unset: the job's
    default (200000). Bounds a micro-batch's memory and latency when a backlog is read."""
    driver: DriverSpec = DriverSpec()
    executor: ExecutorSpec = ExecutorSpec()
    spark_conf: dict[str, str] = Field(default_factory=dict)
    """Extra `sparkConf` entries."""
    export: ExportSpec | None = None
    """OTLP export of the aggregates (Prometheus's OTLP receiver, an OpenTelemetry Collector, ...); absent:
    Parquet only."""

    @model_validator(mode="after")
    def _schedule_when_scheduled(self) -> AggregationSpec:
        if self.mode == "scheduled" and self.schedule is None:
            raise ValueError("schedule: required when mode is scheduled")
        return self


class PodDisruptionBudgetSpec(SpecModel):
    """The PodDisruptionBudget of the receiver pods."""

    enabled: bool = True
    max_unavailable: int = Field(default=1, ge=0)
    """Pods a voluntary disruption (node drain) may take down at once."""


class NetworkPolicySpec(SpecModel):
    """The NetworkPolicy of the receiver pods (on by default): ingress only to the OTLP port, which also
    serves the metrics. Its peers are networking/v1 NetworkPolicyPeer entries (namespaceSelector,
    podSelector, ipBlock); brokers outside the cluster or on the host network need an `ipBlock`."""

    enabled: bool = True
    """False: no NetworkPolicy (any pod may reach every port of the receivers)."""
    from_: list[KubeObject] = Field(default_factory=list, alias="from")
    """Peers allowed to push (the brokers). Empty = any source may reach the OTLP port (the default: the
    operator cannot know where the brokers run); other ports stay closed."""
    metrics_from: list[KubeObject] = Field(default_factory=list)
    """Peers allowed to scrape the metrics (the Prometheus pods), when `from` is set. The receiver serves
    `/metrics` on its OTLP port, so these peers reach that port too; pushes still need the token."""


class TelemetryReceiverSpec(SpecModel):
    """OTLP receivers for the brokers' telemetry plugin, their output topic and the aggregation job."""

    replicas: int = Field(default=2, ge=0, le=1000)
    """Receiver pods when autoscaling is absent or disabled."""
    autoscaling: AutoscalingSpec | None = None
    """CPU-based HorizontalPodAutoscaler; absent = fixed `replicas`."""
    image: str = Field(default=DEFAULT_RECEIVER_IMAGE, min_length=1)
    """Image with `kct` (`docker build --target runtime`)."""
    image_pull_policy: PullPolicy = "IfNotPresent"
    resources: ResourceRequirements = ResourceRequirements(
        requests={"cpu": "250m", "memory": "192Mi"}, limits={"memory": "384Mi"}
    )
    """Receiver container resources. The default is sized from measurements (docs/operations.md, "Receiver
    resources"): ~75 MiB RSS under 2,000 trickling connections and a connection flood, ~210 MiB in the worst
    case the default limits allow (in-flight and buffered bytes, every connection open); no CPU limit, as
    throttling only adds latency. The autoscaler's target is a percentage of the CPU request."""
    node_selector: dict[str, str] | None = None
    tolerations: list[Toleration] | None = None
    affinity: KubeObject | None = None
    """core/v1 Affinity, copied to the pod as given."""
    service_account_name: str | None = Field(default=None, max_length=253)
    """Service account of the receiver pods. Absent: `<name>-receiver`, created by the operator when
    `receiver.attribution` is enabled (the pods read pods, ReplicaSets and Jobs), else the namespace's default
    (the pods then call no Kubernetes API and mount no token)."""
    receiver: ReceiverSettings = ReceiverSettings()
    """The receiver's settings."""
    kafka: KafkaConnection | None = None
    """Cluster of the output topic; absent = the operator's default cluster. `secretRef` (client properties:
    `security.protocol`, `sasl.*`, `ssl.ca.pem`, ...) is used by the operator's admin client (topic management)
    and mounted into the receiver pods (their producers) and the Spark job (its Kafka source): no value is
    copied into a ConfigMap or the resource."""
    topic: OutputTopicSpec = OutputTopicSpec()
    """The output topic."""
    aggregation: AggregationSpec | None = None
    """Spark aggregation of the topic; absent = none."""
    pod_disruption_budget: PodDisruptionBudgetSpec = PodDisruptionBudgetSpec()
    network_policy: NetworkPolicySpec = NetworkPolicySpec()


def parse_receiver_spec(raw: Any) -> TelemetryReceiverSpec:
    """Validate a spec as the API server stores it. Parsed as JSON, so arrays fill the tuple fields of
    the receiver's models (strict Python validation would refuse them); top-level nulls count as absent,
    as Kubernetes drops null fields on write."""
    data = {key: value for key, value in (raw or {}).items() if value is not None} if isinstance(raw, dict) else raw
    return TelemetryReceiverSpec.model_validate_json(json.dumps(data if data is not None else {}))


class TopicStatus(SpecModel):
    """The output topic as last seen on the broker."""

    name: str
    partitions: int | None = None
    """Partitions the topic has."""
    requested_partitions: int | None = None
    """Partitions the spec asks for (differs when a shrink was refused)."""
    replication_factor: int | None = None
    """Replicas per partition the topic has."""
    requested_replication_factor: int | None = None
    """Replicas the spec asks for (its default resolved against the brokers; differs from `replicationFactor`
    for a topic created otherwise: Kafka does not change replication by config)."""
    min_insync_replicas: int | None = None
    """`min.insync.replicas` the topic has (absent: not set on the topic, the broker's default applies)."""
    brokers: int | None = None
    """Brokers of the cluster, as the operator last counted them."""
    bootstrap_servers: str | None = None


class AggregationExportStatus(SpecModel):
    """What an aggregation run's OTLP export did, as its driver reported it when it ended."""

    run: str | None = None
    """The SparkApplication of the run."""
    windows_sent: int | None = None
    """Windows exported."""
    windows_failed: int | None = None
    """Windows given up after the retries (in Parquet only)."""
    requests_failed: int | None = None
    """Export requests not accepted, each attempt counted."""
    series_sent: int | None = None
    series_dropped: int | None = None
    """Series over `maxSeriesPerWindow`, not exported."""
    last_error: str | None = None
    last_window_end_sent: str | None = None
    """End of the newest window exported."""


class AggregationStatus(SpecModel):
    """The Spark application of `spec.aggregation`, as the spark-operator reports it."""

    application: str
    """`SparkApplication/<name>` or `ScheduledSparkApplication/<name>`."""
    state: str | None = None
    """The spark-operator's state: `applicationState.state` of a SparkApplication (SUBMITTED, RUNNING,
    FAILED, ...), `scheduleState` of a ScheduledSparkApplication; absent until the spark-operator saw it."""
    message: str | None = None
    """The spark-operator's error message, when it gave one."""
    last_run: str | None = None
    """ScheduledSparkApplication: the SparkApplication of the last run."""
    export: AggregationExportStatus | None = None
    """With `spec.aggregation.export`: the OTLP export of the newest run whose driver reported it."""


class TlsStatus(SpecModel):
    """The receivers' TLS as the operator last set it up."""

    mode: str
    """`issued`, `secret` (the spec's)."""
    ca_bundle_secret: str | None = None
    """Where brokers read the CA bundle to trust (`kct.telemetry.tls.ca.file`), as `name/key`: during a CA
    renewal it holds the old and the new CA."""
    serving_secret: str | None = None
    """The `kubernetes.io/tls` Secret the receivers serve."""
    not_after: str | None = None
    """Expiry of the issued serving certificate (RFC 3339)."""
    ca_not_after: str | None = None
    """Expiry of the issuing CA (RFC 3339)."""


class TelemetryReceiverStatus(SpecModel):
    """What the operator observed and did."""

    observed_generation: int | None = None
    """The `.metadata.generation` last reconciled."""
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """`Ready` (True when the Deployment is available and the topic exists), `TopicReady`,
    `PartitionsShrinkRefused`, `ReplicationFactorDiffers`, `AggregationReady`, `AggregationExported`,
    `ReconciliationPaused`."""
    replicas: int | None = None
    """Receiver pods the Deployment has."""
    ready_replicas: int | None = None
    """Receiver pods ready."""
    endpoint: str | None = None
    """In-cluster OTLP/HTTP URL for the brokers' plugin (`kct.telemetry.endpoint`)."""
    token_secret: str | None = None
    """Secret (and key) holding the push token, as `name/key` (`kct.telemetry.token.file`)."""
    tls: TlsStatus | None = None
    """TLS of the endpoint (absent when `spec.receiver.tls.mode` is disabled)."""
    topic: TopicStatus | None = None
    aggregation: AggregationStatus | None = None
    """The aggregation's Spark application and its state (absent without `spec.aggregation`)."""
    config_hash: str | None = None
    """Hash of the rendered receiver config (the pods' `telemetry.kct.dev/config-hash` annotation)."""
    children: list[str] | None = None
    """The objects the operator applied, as `Kind/name`."""
    last_sync_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
