"""The admin port implemented with kafka-python (>= 3.0).

Why kafka-python and not confluent-kafka: librdkafka's admin API has no CLIENT_METRICS resource type
(16) and no call to list config resources; kafka-python 3 has both, in pure Python. Its admin client
is blocking (it runs its own network thread) and not safe for concurrent calls, so each instance
keeps a few clients, each used by one thread at a time; async callers use `asyncio.to_thread`.

kafka-python reports per-resource errors of DescribeConfigs by dropping them and those of
IncrementalAlterConfigs as strings; both are turned into our typed errors here, so callers only ever
see `kct.kafka.errors`.
"""

from __future__ import annotations

import logging
import queue
import re
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

import kafka.errors as kafka_errors
from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType, KafkaAdminClient

from kct.kafka.errors import (
    InvalidClientMetricsConfigError,
    KafkaAdminError,
    KafkaNotAuthorizedError,
    KafkaUnreachableError,
)
from kct.kafka.topics import TopicState

__all__ = ["AdminClients", "KafkaPythonClientMetricsAdmin", "KafkaPythonTopicAdmin", "translate_error"]

log = logging.getLogger(__name__)
T = TypeVar("T")

_UNREACHABLE = (
    kafka_errors.KafkaTimeoutError,
    kafka_errors.KafkaConnectionError,
    kafka_errors.NodeNotReadyError,
    kafka_errors.RequestTimedOutError,
    kafka_errors.Cancelled,
    kafka_errors.MetadataEmptyBrokerList,
    ConnectionError,
    TimeoutError,
)
_NOT_AUTHORIZED = (kafka_errors.AuthorizationError, kafka_errors.SaslAuthenticationFailedError)
_INVALID = (
    kafka_errors.InvalidConfigurationError,
    kafka_errors.InvalidRequestError,
    kafka_errors.PolicyViolationError,
    kafka_errors.InvalidReplicationFactorError,  # more replicas than brokers: the spec is wrong, not the network
)
_ERRNO = re.compile(r"\[Error (-?\d+)\]")


def translate_error(error: BaseException) -> KafkaAdminError:
    """kafka-python's exception -> ours."""
    if isinstance(error, KafkaAdminError):
        return error
    # Broker errors print as "[Error 40] InvalidConfigurationError: detail" already.
    text = str(error)
    if not isinstance(error, kafka_errors.BrokerResponseError) and not text.startswith(type(error).__name__):
        text = f"{type(error).__name__}: {text}"
    if isinstance(error, _NOT_AUTHORIZED):
        return KafkaNotAuthorizedError(text)
    if isinstance(error, _INVALID):
        return InvalidClientMetricsConfigError(text)
    if isinstance(error, _UNREACHABLE) or getattr(error, "retriable", False):
        return KafkaUnreachableError(text)
    return KafkaAdminError(text)


def _error_for_code(code: int, message: str | None) -> KafkaAdminError:
    error_type = kafka_errors.for_code(code)
    return translate_error(error_type(message or ""))


class _AdminClient(KafkaAdminClient):  # type: ignore[misc]
    """KafkaAdminClient that does not leak its network thread when bootstrap fails and that raises
    per-resource DescribeConfigs errors instead of returning empty configs."""

    def __init__(self, **configs: Any) -> None:
        try:
            super().__init__(**configs)
        except BaseException:
            for closer in (getattr(self, "_client", None), getattr(self, "_net", None)):
                stop = getattr(closer, "close", None) or getattr(closer, "stop", None)
                if stop is not None:
                    try:
                        stop()
                    except Exception:  # pragma: no cover - best-effort cleanup
                        log.debug("cleanup after failed bootstrap", exc_info=True)
            raise

    @classmethod
    def _describe_configs_process_responses(cls, responses: Any, config_filter: Any = "modified") -> Any:
        for response in responses:
            for result in response.results:
                if result.error_code:
                    raise _error_for_code(result.error_code, result.error_message)
        return super()._describe_configs_process_responses(responses, config_filter)


class _Slot:
    """One lazily connected KafkaAdminClient; used by one thread at a time."""

    def __init__(self) -> None:
        self.client: _AdminClient | None = None

    def reset(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            try:
                client.close()
            except Exception:  # pragma: no cover - best-effort
                log.debug("closing admin client", exc_info=True)


class AdminClients:
    """A few lazily connected kafka-python admin clients of one cluster, each used by one thread at a time.
    Connects on first use and reconnects after connection errors, so a broker that comes back is used again
    without restarting the caller; every error leaves as a `kct.kafka.errors` type.

    kafka-python's admin client is not safe for concurrent calls, and an alter costs a KRaft commit
    (~30 ms here), so calls are spread over `connections` clients (4 clients: ~9 ms per alter instead of
    ~32 ms when many resources reconcile at once). Both admins below are built on one of these."""

    def __init__(
        self,
        bootstrap_servers: str,
        settings: Mapping[str, Any] | None = None,
        *,
        client_id: str = "kct-operator",
        request_timeout_ms: int = 10_000,
        connections: int = 4,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self._config: dict[str, Any] = {
            "client_id": client_id,
            "request_timeout_ms": request_timeout_ms,
            "bootstrap_timeout_ms": request_timeout_ms,
            "reconnect_backoff_max_ms": 5_000,
        }
        self._config.update(settings or {})
        self._config["bootstrap_servers"] = bootstrap_servers.split(",")
        self._slots: queue.LifoQueue[_Slot] = queue.LifoQueue()
        for _ in range(max(1, connections)):
            self._slots.put(_Slot())
        self._connections = max(1, connections)

    def call(self, operation: Callable[[_AdminClient], T]) -> T:
        """`operation` on a free client; errors translated (`translate_error`)."""
        slot = self._slots.get()  # LIFO: reuse the warm client first, open more only under load
        try:
            if slot.client is None:
                slot.client = _AdminClient(**self._config)
            return operation(slot.client)
        except Exception as error:
            translated = translate_error(error)
            if isinstance(translated, KafkaUnreachableError | KafkaNotAuthorizedError):
                slot.reset()
            if translated is error:
                raise
            raise translated from error
        finally:
            self._slots.put(slot)

    def close(self) -> None:
        slots = [self._slots.get() for _ in range(self._connections)]  # waits for calls in flight
        for slot in slots:
            slot.reset()
            self._slots.put(slot)


class KafkaPythonClientMetricsAdmin:
    """`ClientMetricsAdmin` over one cluster (arguments: those of `AdminClients`)."""

    def __init__(self, bootstrap_servers: str, settings: Mapping[str, Any] | None = None, **options: Any) -> None:
        self._clients = AdminClients(bootstrap_servers, settings, **options)
        self._call = self._clients.call
        self.bootstrap_servers = bootstrap_servers

    def list_subscriptions(self) -> list[str]:
        def call(client: _AdminClient) -> list[str]:
            found = client.list_config_resources([ConfigResourceType.CLIENT_METRICS])
            return sorted(found.get("client_metrics", []))

        return self._call(call)

    def describe_subscription(self, name: str) -> dict[str, str]:
        def call(client: _AdminClient) -> dict[str, str]:
            result = client.describe_configs([ConfigResource(ConfigResourceType.CLIENT_METRICS, name)])
            configs = result.get("client_metrics", {}).get(name, {})
            return {key: entry["value"] for key, entry in configs.items() if entry.get("value") is not None}

        return self._call(call)

    def alter_subscription(self, name: str, set_configs: Mapping[str, str], delete_configs: Collection[str]) -> None:
        ops: dict[str, tuple[AlterConfigOp, str | None]] = {
            key: (AlterConfigOp.SET, value) for key, value in set_configs.items()
        }
        ops.update({key: (AlterConfigOp.DELETE, None) for key in delete_configs})
        if not ops:
            return

        def call(client: _AdminClient) -> None:
            resource = ConfigResource(ConfigResourceType.CLIENT_METRICS, name, configs=ops)
            result = client.alter_configs([resource], raise_on_unknown=False, incremental=True)
            outcome = result.get("client_metrics", {}).get(name, "OK")
            if outcome != "OK":
                found = _ERRNO.search(str(outcome))
                if found is None:
                    raise KafkaAdminError(str(outcome))
                detail = str(outcome).split(": ", 1)[-1]
                raise _error_for_code(int(found.group(1)), detail)

        self._call(call)

    def delete_subscription(self, name: str) -> None:
        existing = self.describe_subscription(name)
        if existing:
            self.alter_subscription(name, {}, tuple(existing))

    def close(self) -> None:
        self._clients.close()


_TIMEOUT_MS = 30_000
_UNKNOWN_TOPIC = 3
_TOPIC_ALREADY_EXISTS = 36


class KafkaPythonTopicAdmin:
    """`TopicAdmin` over one cluster (arguments: those of `AdminClients`)."""

    def __init__(self, bootstrap_servers: str, settings: Mapping[str, Any] | None = None, **options: Any) -> None:
        self._clients = AdminClients(bootstrap_servers, settings, **options)
        self._call = self._clients.call
        self.bootstrap_servers = bootstrap_servers

    def close(self) -> None:
        self._clients.close()

    def describe_topic(self, name: str) -> TopicState | None:
        from kafka.admin import ConfigResource, ConfigResourceType

        def call(client: Any) -> TopicState | None:
            described = client.describe_topics([name])
            found = next((t for t in described if t.get("name") == name), None)
            if found is None or found.get("error_code") == _UNKNOWN_TOPIC:
                return None
            if found.get("error_code"):
                raise _error_for_code(int(found["error_code"]), f"describe topic {name!r}")
            partitions = found.get("partitions") or []
            replication = max((len(p.get("replica_nodes") or []) for p in partitions), default=0)
            result = client.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
            raw = result.get("topic", {}).get(name, {})
            configs = {key: str(entry["value"]) for key, entry in raw.items() if entry.get("value") is not None}
            return TopicState(name, len(partitions), replication, configs)

        result: TopicState | None = self._call(call)
        return result

    def broker_count(self) -> int:
        def call(client: Any) -> int:
            brokers = client.describe_cluster().get("brokers") or []
            # A fenced broker (KRaft) takes no new replicas: the count a topic's creation is checked against.
            return sum(1 for broker in brokers if not broker.get("is_fenced"))

        count: int = self._call(call)
        return count

    def create_topic(
        self, name: str, partitions: int, replication_factor: int | None, configs: Mapping[str, str]
    ) -> None:
        import kafka.errors as kafka_errors
        from kafka.admin import NewTopic

        topic = NewTopic(name, partitions, replication_factor or -1, topic_configs=dict(configs))

        def call(client: Any) -> None:
            try:
                client.create_topics([topic], timeout_ms=_TIMEOUT_MS)
            except kafka_errors.TopicAlreadyExistsError:
                return

        self._call(call)

    def grow_partitions(self, name: str, total: int) -> None:
        from kafka.admin import NewPartitions

        self._call(lambda client: client.create_partitions({name: NewPartitions(total)}, timeout_ms=_TIMEOUT_MS))

    def alter_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType

        if not configs:
            return
        ops = {key: (AlterConfigOp.SET, value) for key, value in configs.items()}

        def call(client: Any) -> None:
            resource = ConfigResource(ConfigResourceType.TOPIC, name, configs=ops)
            result = client.alter_configs([resource], raise_on_unknown=False, incremental=True)
            outcome = result.get("topic", {}).get(name, "OK")
            if outcome != "OK":
                raise InvalidClientMetricsConfigError(f"topic {name!r} configs {dict(configs)}: {outcome}")

        self._call(call)

    def delete_topic(self, name: str) -> None:
        import kafka.errors as kafka_errors

        def call(client: Any) -> None:
            try:
                client.delete_topics([name], timeout_ms=_TIMEOUT_MS)
            except kafka_errors.UnknownTopicOrPartitionError:
                return

        self._call(call)
