"""In-memory admins for unit tests (and demos without a broker): CLIENT_METRICS and topics.

It behaves like a broker where it matters to the operator: SET/DELETE are per config, a resource with
no configs left does not exist, and it can be told to fail (`unreachable`, `unauthorized`,
`reject_next`) to exercise error paths. `calls` records every alter for assertions.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from kct.kafka.errors import InvalidClientMetricsConfigError, KafkaNotAuthorizedError, KafkaUnreachableError
from kct.kafka.topics import TopicState

__all__ = ["InMemoryClientMetricsAdmin", "InMemoryTopicAdmin"]


@dataclass
class InMemoryClientMetricsAdmin:
    """Satisfies `kct.kafka.port.ClientMetricsAdmin`."""

    resources: dict[str, dict[str, str]] = field(default_factory=dict)
    unreachable: bool = False
    unauthorized: bool = False
    reject_next: str | None = None  # message of an InvalidClientMetricsConfigError for the next alter
    calls: list[tuple[str, dict[str, str], tuple[str, ...]]] = field(default_factory=list)
    closed: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _check(self) -> None:
        if self.unreachable:
            raise KafkaUnreachableError("no broker answered (fake)")
        if self.unauthorized:
            raise KafkaNotAuthorizedError("CLUSTER_AUTHORIZATION_FAILED (fake)")

    def list_subscriptions(self) -> list[str]:
        self._check()
        with self._lock:
            return sorted(self.resources)

    def describe_subscription(self, name: str) -> dict[str, str]:
        self._check()
        with self._lock:
            return dict(self.resources.get(name, {}))

    def alter_subscription(self, name: str, set_configs: Mapping[str, str], delete_configs: Collection[str]) -> None:
        self._check()
        with self._lock:
            if self.reject_next is not None:
                message, self.reject_next = self.reject_next, None
                raise InvalidClientMetricsConfigError(message)
            self.calls.append((name, dict(set_configs), tuple(delete_configs)))
            configs = self.resources.setdefault(name, {})
            configs.update(set_configs)
            for key in delete_configs:
                configs.pop(key, None)
            if not configs:
                del self.resources[name]

    def delete_subscription(self, name: str) -> None:
        existing = self.describe_subscription(name)
        if existing:
            self.alter_subscription(name, {}, tuple(existing))

    def close(self) -> None:
        self.closed = True


@dataclass
class InMemoryTopicAdmin:
    """Satisfies `TopicAdmin`; behaves like a broker where the controller cares (partitions never
    shrink, creation is idempotent, no more replicas than `brokers`) and can be told to fail (`unreachable`,
    `unauthorized`)."""

    topics: dict[str, TopicState] = field(default_factory=dict)
    default_replication_factor: int = 1
    brokers: int = 1
    unreachable: bool = False
    unauthorized: bool = False
    calls: list[tuple[str, str]] = field(default_factory=list)
    closed: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _check(self) -> None:
        if self.unreachable:
            raise KafkaUnreachableError("no broker answered (fake)")
        if self.unauthorized:
            raise KafkaNotAuthorizedError("TOPIC_AUTHORIZATION_FAILED (fake)")

    def describe_topic(self, name: str) -> TopicState | None:
        self._check()
        with self._lock:
            return self.topics.get(name)

    def broker_count(self) -> int:
        self._check()
        return self.brokers

    def create_topic(
        self, name: str, partitions: int, replication_factor: int | None, configs: Mapping[str, str]
    ) -> None:
        self._check()
        with self._lock:
            self.calls.append(("create", name))
            if name not in self.topics:
                rf = replication_factor or self.default_replication_factor
                if rf > self.brokers:  # the broker's INVALID_REPLICATION_FACTOR
                    raise InvalidClientMetricsConfigError(
                        f"[Error 38] InvalidReplicationFactorError: replication factor {rf} larger than "
                        f"available brokers {self.brokers}")
                self.topics[name] = TopicState(name, partitions, rf, dict(configs))

    def grow_partitions(self, name: str, total: int) -> None:
        self._check()
        with self._lock:
            self.calls.append(("grow", name))
            state = self.topics[name]
            if total < state.partitions:
                raise InvalidClientMetricsConfigError(f"topic {name!r} has {state.partitions} partitions")
            self.topics[name] = TopicState(name, total, state.replication_factor, state.configs)

    def alter_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        self._check()
        with self._lock:
            self.calls.append(("alter", name))
            state = self.topics[name]
            self.topics[name] = TopicState(
                name, state.partitions, state.replication_factor, {**state.configs, **configs}
            )

    def delete_topic(self, name: str) -> None:
        self._check()
        with self._lock:
            self.calls.append(("delete", name))
            self.topics.pop(name, None)

    def close(self) -> None:
        self.closed = True
