"""One admin client per Kafka cluster, shared by every handler through the kopf memo.

A cluster is identified by its bootstrap servers plus the Secret (namespace/name and
resourceVersion) holding its client properties, so a rotated Secret gets a fresh client. Resources
without `spec.kafka` use the operator's default cluster (`KAFKA_BOOTSTRAP_SERVERS`, optional
`KCT_KAFKA_PROPERTIES_FILE` with `key=value` lines).
"""

from __future__ import annotations

import base64
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar, overload

from kct.api.subscription import KafkaConnection
from kct.controller.kernel import NO_DEFAULT_CLUSTER, ConnectionProblem, SecretMissing
from kct.kafka.port import ClientMetricsAdmin

__all__ = [
    "AdminPool",
    "KubernetesSecretReader",
    "SecretReader",
    "kafka_python_admin",
    "read_properties_file",
]


class SecretReader(Protocol):
    def read(self, namespace: str, name: str) -> tuple[str, dict[str, str]]:
        """(resourceVersion, decoded data) of a Secret; raises LookupError when it does not exist."""
        ...


class KubernetesSecretReader:
    """Reads Secrets with the official client (in-cluster config, else KUBECONFIG)."""

    def __init__(self) -> None:
        from kubernetes import client

        from kct.controller.kube_config import kube_api_client

        self._core = client.CoreV1Api(kube_api_client())

    def read(self, namespace: str, name: str) -> tuple[str, dict[str, str]]:
        from kubernetes.client.exceptions import ApiException

        try:
            secret = self._core.read_namespaced_secret(name, namespace)
        except ApiException as error:
            if error.status == 404:
                raise LookupError(f"Secret {namespace}/{name} not found") from error
            raise
        data = {key: base64.b64decode(value).decode() for key, value in (secret.data or {}).items()}
        data.update(secret.string_data or {})
        version = secret.metadata.resource_version if secret.metadata is not None else ""
        return str(version), data


def read_properties_file(path: Path) -> dict[str, str]:
    """`key=value` lines, `#` comments, as in a Java client.properties file."""
    properties: dict[str, str] = {}
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith(("#", "!")) and "=" in stripped:
            key, _, value = stripped.partition("=")
            properties[key.strip()] = value.strip()
    return properties


def kafka_python_admin(bootstrap_servers: str, properties: Mapping[str, str]) -> ClientMetricsAdmin:
    from kct.kafka.kafka_python import KafkaPythonClientMetricsAdmin
    from kct.kafka.properties import kafka_python_settings

    settings: dict[str, Any] = kafka_python_settings(properties)
    settings.pop("bootstrap_servers", None)
    return KafkaPythonClientMetricsAdmin(bootstrap_servers, settings)


class _Closable(Protocol):
    def close(self) -> None: ...


Admin = TypeVar("Admin", bound=_Closable)
AdminConstructor = Callable[[str, Mapping[str, str]], Admin]


class AdminPool(Generic[Admin]):
    """Admins of one kind (CLIENT_METRICS admins by default, topic admins for the receivers), cached per
    cluster: `pool(connection, namespace)` is an admin factory. Thread-safe (reconciles run in threads)."""

    @overload
    def __init__(
        self: AdminPool[ClientMetricsAdmin],
        default_bootstrap: str | None = None,
        default_properties: Mapping[str, str] | None = None,
        *,
        secrets: SecretReader | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self,
        default_bootstrap: str | None = None,
        default_properties: Mapping[str, str] | None = None,
        *,
        secrets: SecretReader | None = None,
        construct: AdminConstructor[Admin],
    ) -> None: ...

    def __init__(
        self,
        default_bootstrap: str | None = None,
        default_properties: Mapping[str, str] | None = None,
        *,
        secrets: SecretReader | None = None,
        construct: AdminConstructor[Any] = kafka_python_admin,
    ) -> None:
        self.default_bootstrap = default_bootstrap
        self.default_properties = dict(default_properties or {})
        self._secrets = secrets
        self._construct: AdminConstructor[Admin] = construct
        self._admins: dict[tuple[str, str, str], Admin] = {}
        self._lock = threading.Lock()

    @staticmethod
    def from_environment(secrets: SecretReader | None = None) -> AdminPool[ClientMetricsAdmin]:
        properties_file = os.environ.get("KCT_KAFKA_PROPERTIES_FILE")
        return AdminPool(
            os.environ.get("KAFKA_BOOTSTRAP_SERVERS") or None,
            read_properties_file(Path(properties_file)) if properties_file else None,
            secrets=secrets,
        )

    def __call__(self, connection: KafkaConnection | None, namespace: str) -> Admin:
        if connection is None:
            if not self.default_bootstrap:
                raise ConnectionProblem(NO_DEFAULT_CLUSTER)
            return self._get((self.default_bootstrap, "", ""), self.default_bootstrap, self.default_properties)
        properties: dict[str, str] = {}
        secret_key, version = "", ""
        if connection.secret_ref is not None:
            if self._secrets is None:
                raise ConnectionProblem("secretRef given but the operator cannot read Secrets")
            secret_key = f"{namespace}/{connection.secret_ref.name}"
            try:
                version, properties = self._secrets.read(namespace, connection.secret_ref.name)
            except LookupError as error:
                last_known = self._last_built(connection.bootstrap_servers, secret_key)
                raise SecretMissing(f"secretRef: {error}", last_known) from error
        return self._get((connection.bootstrap_servers, secret_key, version), connection.bootstrap_servers, properties)

    def _last_built(self, bootstrap: str, secret_key: str) -> Admin | None:
        """The admin built from the last data seen in a Secret that no longer exists, if any."""
        with self._lock:
            return next((admin for key, admin in self._admins.items() if key[:2] == (bootstrap, secret_key)), None)

    def _get(self, key: tuple[str, str, str], bootstrap: str, properties: Mapping[str, str]) -> Admin:
        with self._lock:
            admin = self._admins.get(key)
            if admin is not None:
                return admin
            # A Secret changed (new resourceVersion): drop the clients built from its old data.
            for stale in [k for k in self._admins if k[:2] == key[:2]]:
                self._admins.pop(stale).close()
            try:
                admin = self._construct(bootstrap, properties)
            except ValueError as error:
                raise ConnectionProblem(str(error)) from error
            self._admins[key] = admin
            return admin

    def close(self) -> None:
        with self._lock:
            for admin in self._admins.values():
                admin.close()
            self._admins.clear()
