"""The one input of every builder, and the configs derived from the spec.

`ReceiverParams` is everything the builders read: the parsed spec plus what the controller found out
(the Kafka cluster, the token Secret, the generated token). Builders are pure functions of it, so the
golden files in tests/unit/render/golden/ pin their whole output.

`receiver_config` turns the spec into the receiver's own `ReceiverConfig` (what `kct receiver --config`
reads) and `aggregation_config` into the Spark job's `AggregationConfig`: one model per program, used by
the program and by the operator that renders it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Final

import yaml
from pydantic import ValidationError

from kct import __version__
from kct.aggregation.config import (
    AggregationConfig,
    ExportSettings,
    OtlpExportConfig,
    ParquetOutputConfig,
    RunConfig,
    SourceConfig,
    SparkConfig,
)
from kct.api.telemetry_receiver import ExportSpec, SecretKeyReference, TelemetryReceiverSpec
from kct.receiver.config import (
    AuthConfig,
    KafkaSinkConfig,
    ListenConfig,
    ReceiverConfig,
    TlsConfig,
    dump_config_yaml,
)
from kct.render.certificates import TlsMaterial
from kct.render.names import ChildNames
from kct.validation import format_validation_error

__all__ = [
    "AGGREGATION_CONFIG_DIR",
    "AGGREGATION_CONFIG_KEY",
    "CLIENT_CA_DIR",
    "CLIENT_CA_FILE",
    "EXPORT_CA_DIR",
    "KAFKA_CLIENT_DIR",
    "OTLP_PORT",
    "RECEIVER_CONFIG_DIR",
    "RECEIVER_CONFIG_KEY",
    "TLS_DIR",
    "TOKEN_DIR",
    "TOKEN_FILE",
    "ReceiverParams",
    "aggregation_config",
    "aggregation_config_yaml",
    "config_hash",
    "export_header_env",
    "kafka_client_dir",
    "kafka_secret_name",
    "kafka_secret_parts",
    "producer_secret_env",
    "receiver_config",
    "receiver_config_yaml",
]

OTLP_PORT: Final = 4318
# The push token Secret is mounted as a file (not an env var) so a rotated token reaches running receivers:
# kubelet updates the file, the receiver re-reads it (`kct.receiver.tokens`).
TOKEN_DIR: Final = "/etc/kct/token"
TOKEN_FILE: Final = f"{TOKEN_DIR}/token"
# The serving certificate and key (`tls.crt`, `tls.key`) and the client CA of mTLS, mounted as whole Secret
# volumes so kubelet updates the files on rotation and the receiver reloads them (no restart).
TLS_DIR: Final = "/etc/kct/tls"
CLIENT_CA_DIR: Final = "/etc/kct/client-ca"
CLIENT_CA_FILE: Final = f"{CLIENT_CA_DIR}/ca.crt"
RECEIVER_CONFIG_DIR: Final = "/etc/kct/receiver"
RECEIVER_CONFIG_KEY: Final = "receiver.yaml"
AGGREGATION_CONFIG_DIR: Final = "/etc/kct/aggregation"
AGGREGATION_CONFIG_KEY: Final = "aggregation.yaml"
# spec.kafka.secretRef, mounted whole into the receivers and the Spark job: one file per client property.
KAFKA_CLIENT_DIR: Final = "/etc/kct/kafka-client"
# The export's CA bundle (spec.aggregation.export.tls.caSecretRef), mounted into the driver (it sends).
EXPORT_CA_DIR: Final = "/etc/kct/export-ca"
API_VERSION: Final = "telemetry.kct.dev/v1alpha1"
KIND: Final = "TelemetryReceiver"


@dataclass(frozen=True)
class ReceiverParams:
    """One TelemetryReceiver, parsed, plus what the controller resolved for it."""

    name: str
    namespace: str
    uid: str
    spec: TelemetryReceiverSpec
    bootstrap_servers: str
    """The output topic's cluster (spec.kafka or the operator's default)."""
    generated_token: str | None = None
    """The token of the generated Secret (auth enabled, no tokenSecretRef); None otherwise."""
    tls: TlsMaterial | None = None
    """The operator's CA and serving certificate (`tls.mode: issued`); None otherwise."""
    kafka_secret_version: str | None = None
    """resourceVersion of spec.kafka.secretRef's Secret as the controller last read it (None: no Secret, or not
    read). The pods read that Secret when they start, so it is part of their config hash: a changed Secret
    restarts them."""
    version: str = __version__

    @property
    def names(self) -> ChildNames:
        return ChildNames(self.name)

    @property
    def token_ref(self) -> SecretKeyReference | None:
        """Where the pods read the token from; None when auth is disabled."""
        auth = self.spec.receiver.auth
        if not auth.enabled:
            return None
        return auth.token_secret_ref or SecretKeyReference(name=self.names.token_secret, key="token")

    @property
    def endpoint(self) -> str:
        scheme = "https" if self.spec.receiver.tls.enabled else "http"
        return f"{scheme}://{self.names.receiver}.{self.namespace}.svc:{OTLP_PORT}/v1/metrics"

    @property
    def issued_tls(self) -> TlsMaterial | None:
        """The operator's certificates when `tls.mode` is issued (the other modes bring their own)."""
        return self.tls if self.spec.receiver.tls.mode == "issued" else None

    @property
    def serving_secret(self) -> str | None:
        """The `kubernetes.io/tls` Secret the pods serve; None with TLS disabled."""
        tls = self.spec.receiver.tls
        if tls.mode == "disabled":
            return None
        return tls.secret_name if tls.mode == "secret" and tls.secret_name else self.names.tls_secret

    @property
    def ca_bundle_ref(self) -> SecretKeyReference | None:
        """Where brokers read the CA bundle to trust; None with TLS disabled."""
        tls = self.spec.receiver.tls
        if tls.mode == "disabled":
            return None
        if tls.mode == "secret" and tls.secret_name:
            return SecretKeyReference(name=tls.secret_name, key="ca.crt")
        return SecretKeyReference(name=self.names.ca_bundle_secret, key="ca.crt")

    def owner_reference(self) -> dict[str, Any]:
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def receiver_config(spec: TelemetryReceiverSpec, bootstrap_servers: str) -> ReceiverConfig:
    """The receiver's config for `spec`; raises ValueError (naming `spec.` fields) when inconsistent.

    The tuned sections are copied as they are (`spec.receiver` is a `ReceiverTuning`); only what the operator
    decides is set here: where to listen, the mounted token file, the cluster and the topic."""
    settings = spec.receiver
    try:
        return ReceiverConfig(
            **settings.tuning(),
            listen=ListenConfig(host="0.0.0.0", port=OTLP_PORT, tls=_listen_tls(spec)),
            auth=AuthConfig(bearer_token_file=TOKEN_FILE if settings.auth.enabled else None),
            kafka=KafkaSinkConfig(
                bootstrap_servers=bootstrap_servers,
                topic=spec.topic.name,
                producer_properties=dict(settings.producer_properties),
                producer_properties_from_env=producer_secret_env(spec),
                client_properties_dir=kafka_client_dir(spec),
            ),
        )
    except ValidationError as error:
        raise ValueError(format_validation_error(error, "spec.receiver")) from None


def _listen_tls(spec: TelemetryReceiverSpec) -> TlsConfig | None:
    """The listener's TLS from `spec.receiver.tls`: the mounted Secret's files. With mTLS, a client certificate
    is `request`ed, not required at the handshake: kubelet's probes and the scraper present none, and the
    receiver refuses pushes without one."""
    tls = spec.receiver.tls
    if not tls.enabled:
        return None
    client = tls.client_auth
    return TlsConfig(
        cert_file=f"{TLS_DIR}/tls.crt",
        key_file=f"{TLS_DIR}/tls.key",
        client_ca_file=CLIENT_CA_FILE if client is not None else None,
        client_certificate="request",
        allowed_subjects=tuple(client.allowed_subjects) if client is not None else (),
        min_version=tls.min_version,
        cipher_suites=tuple(tls.cipher_suites),
    )


def kafka_secret_name(spec: TelemetryReceiverSpec) -> str | None:
    """The Secret of spec.kafka.secretRef (the cluster's credentials and CA), if any."""
    return None if spec.kafka is None or spec.kafka.secret_ref is None else spec.kafka.secret_ref.name


def kafka_client_dir(spec: TelemetryReceiverSpec) -> str | None:
    """Where the pods read spec.kafka.secretRef's properties (KAFKA_CLIENT_DIR), if the spec names a Secret."""
    return None if kafka_secret_name(spec) is None else KAFKA_CLIENT_DIR


def producer_secret_env(spec: TelemetryReceiverSpec) -> dict[str, str]:
    """librdkafka property -> the environment variable carrying its Secret value (sorted, stable names)."""
    properties = sorted(spec.receiver.producer_properties_from_secrets)
    return {prop: f"KCT_KAFKA_SECRET_{index}" for index, prop in enumerate(properties)}


def receiver_config_yaml(params: ReceiverParams) -> str:
    return dump_config_yaml(receiver_config(params.spec, params.bootstrap_servers))


def _source(params: ReceiverParams) -> SourceConfig:
    source = SourceConfig(bootstrap_servers=params.bootstrap_servers, topic=params.spec.topic.name,
                          client_properties_dir=kafka_client_dir(params.spec))
    aggregation = params.spec.aggregation
    if aggregation is None or aggregation.max_records_per_trigger is None:
        return source
    return source.model_copy(update={"max_records_per_partition": aggregation.max_records_per_trigger})


def export_header_env(export: ExportSpec) -> dict[str, str]:
    """Export header -> the driver's environment variable carrying its Secret value (sorted, stable names)."""
    return {header: f"KCT_EXPORT_HEADER_{index}" for index, header in enumerate(sorted(export.headers_from_secrets))}


def _export_config(export: ExportSpec | None) -> OtlpExportConfig | None:
    """The job's export section: the shared settings, plain headers, and `${ENV}` references for the Secret
    ones (the job expands them when it loads its config: the values never reach the ConfigMap)."""
    if export is None:
        return None
    shared = {name: getattr(export, name) for name in ExportSettings.model_fields}
    secret_headers = {header: f"${{{variable}}}" for header, variable in export_header_env(export).items()}
    headers = {**export.headers, **secret_headers}
    ca = export.tls.ca_secret_ref
    return OtlpExportConfig(**shared, headers=headers, ca_file=None if ca is None else f"{EXPORT_CA_DIR}/{ca.key}")


def aggregation_config(params: ReceiverParams) -> AggregationConfig | None:
    """The Spark job's config, or None when aggregation is absent or disabled."""
    aggregation = params.spec.aggregation
    if aggregation is None or not aggregation.enabled:
        return None
    return AggregationConfig(
        **aggregation.tuning(),
        source=_source(params),
        parquet=ParquetOutputConfig(path=aggregation.sink_path),
        export=_export_config(aggregation.export),
        run=RunConfig(
            mode="stream",
            # scheduled: each run drains what arrived since the last one, then stops (availableNow).
            until_drained=aggregation.mode == "scheduled",
            trigger_seconds=aggregation.trigger_seconds,
        ),
        spark=SparkConfig(app_name=params.names.aggregation),
    )


def aggregation_config_yaml(config: AggregationConfig) -> str:
    return str(yaml.safe_dump(config.model_dump(mode="json", by_alias=True), sort_keys=False))


def kafka_secret_parts(params: ReceiverParams) -> tuple[str, ...]:
    """What a pod's config hash adds for spec.kafka.secretRef: its version, when known (nothing otherwise, so
    the hashes of receivers without a Secret are what they were)."""
    version = params.kafka_secret_version
    return () if version is None or kafka_secret_name(params.spec) is None else (f"kafka-secret:{version}",)


def config_hash(*parts: str) -> str:
    """Short, stable hash of the inputs that must roll the pods when they change."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]
