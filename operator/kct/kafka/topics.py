"""Topic admin: the few topic calls the TelemetryReceiver controller needs.

Like `kct.kafka.port`, one `Protocol` (`TopicAdmin`), one real implementation over kafka-python
(`KafkaPythonTopicAdmin`, which reuses the lazily connecting, error-translating client of
`KafkaPythonClientMetricsAdmin`) and one in-memory fake (`InMemoryTopicAdmin`). What to do with a
topic (create, grow, which configs to set) is decided by `plan_topic`, a pure function, so the rule
"partitions only grow" is written once and tested without a broker.

Errors are those of `kct.kafka.errors`; a topic-level refusal (invalid replication factor, policy
violation) is an `InvalidClientMetricsConfigError`, i.e. a `ValueError`: the spec is wrong.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from kct.kafka.errors import InvalidClientMetricsConfigError, KafkaNotAuthorizedError, KafkaUnreachableError
from kct.kafka.kafka_python import KafkaPythonClientMetricsAdmin, _error_for_code

__all__ = [
    "InMemoryTopicAdmin",
    "KafkaPythonTopicAdmin",
    "TopicAdmin",
    "TopicPlan",
    "TopicState",
    "plan_topic",
]


@dataclass(frozen=True)
class TopicState:
    """A topic as the broker describes it."""

    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str] = field(default_factory=dict)
    """Configs set on the topic itself (not broker defaults)."""


@runtime_checkable
class TopicAdmin(Protocol):
    """Topics of one Kafka cluster. Blocking calls; async callers run them in a thread."""

    def describe_topic(self, name: str) -> TopicState | None:
        """The topic, or None when it does not exist."""
        ...

    def create_topic(
        self, name: str, partitions: int, replication_factor: int | None, configs: Mapping[str, str]
    ) -> None:
        """Create the topic (`replication_factor` None = the broker's default). No-op if it exists."""
        ...

    def grow_partitions(self, name: str, total: int) -> None:
        """Raise the partition count to `total` (never lowers it)."""
        ...

    def alter_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        """SET these topic configs (incrementally; others untouched)."""
        ...

    def delete_topic(self, name: str) -> None:
        """Delete the topic. No-op when absent."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class TopicPlan:
    """What reconciling a topic must do, given its desired and actual state."""

    create: bool = False
    grow_to: int | None = None
    set_configs: Mapping[str, str] = field(default_factory=dict)
    shrink_refused: tuple[int, int] | None = None
    """(actual, requested) when the spec asks for fewer partitions than the topic has."""

    @property
    def changes(self) -> bool:
        return self.create or self.grow_to is not None or bool(self.set_configs)


def plan_topic(partitions: int, configs: Mapping[str, str], actual: TopicState | None) -> TopicPlan:
    """Partitions only grow (Kafka cannot remove partitions without losing data); configs converge."""
    if actual is None:
        return TopicPlan(create=True)
    grow_to = partitions if partitions > actual.partitions else None
    shrink = (actual.partitions, partitions) if partitions < actual.partitions else None
    differing = {key: value for key, value in configs.items() if actual.configs.get(key) != value}
    return TopicPlan(grow_to=grow_to, set_configs=differing, shrink_refused=shrink)


_TIMEOUT_MS = 30_000
_UNKNOWN_TOPIC = 3
_TOPIC_ALREADY_EXISTS = 36


class KafkaPythonTopicAdmin(KafkaPythonClientMetricsAdmin):
    """`TopicAdmin` (and `ClientMetricsAdmin`) over one cluster, with kafka-python."""

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


@dataclass
class InMemoryTopicAdmin:
    """Satisfies `TopicAdmin`; behaves like a broker where the controller cares (partitions never
    shrink, creation is idempotent) and can be told to fail (`unreachable`, `unauthorized`)."""

    topics: dict[str, TopicState] = field(default_factory=dict)
    default_replication_factor: int = 1
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

    def create_topic(
        self, name: str, partitions: int, replication_factor: int | None, configs: Mapping[str, str]
    ) -> None:
        self._check()
        with self._lock:
            self.calls.append(("create", name))
            if name not in self.topics:
                rf = replication_factor or self.default_replication_factor
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
