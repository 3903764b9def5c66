"""Topic admin: the few topic calls the TelemetryReceiver controller needs.

The port: one `Protocol` (`TopicAdmin`) and the values it speaks (`TopicState`); the real implementation
over kafka-python is `kct.kafka.kafka_python.KafkaPythonTopicAdmin` (on the lazily connecting,
error-translating `AdminClients` the CLIENT_METRICS admin uses too), the in-memory fake
`kct.kafka.fake.InMemoryTopicAdmin`. Importing this module loads no Kafka client. What to do with a
topic (create, grow, which configs to set) is decided by `plan_topic`, a pure function, so the rule
"partitions only grow" is written once and tested without a broker.

Errors are those of `kct.kafka.errors`; a topic-level refusal (invalid replication factor, policy
violation) is an `InvalidClientMetricsConfigError`, i.e. a `ValueError`: the spec is wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

__all__ = [
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
