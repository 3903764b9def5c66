"""Topic admin: the few topic calls the TelemetryReceiver controller needs.

The port: one `Protocol` (`TopicAdmin`) and the values it speaks (`TopicState`); the real implementation
over kafka-python is `kct.kafka.kafka_python.KafkaPythonTopicAdmin` (on the lazily connecting,
error-translating `AdminClients` the CLIENT_METRICS admin uses too), the in-memory fake
`kct.kafka.fake.InMemoryTopicAdmin`. Importing this module loads no Kafka client. What to do with a
topic (create, grow, which configs to set) is decided by `plan_topic`, a pure function, so the rule
"partitions only grow" is written once and tested without a broker. How durable it is (replication factor,
`min.insync.replicas`) is decided by `plan_durability`, pure too, against the broker count the admin reports:
a replication factor is only chosen at creation (Kafka changes it by reassignment, not by config), and
`min.insync.replicas` is a topic config, so its drift is reverted like any other.

Errors are those of `kct.kafka.errors`; a topic-level refusal (invalid replication factor, policy
violation) is an `InvalidClientMetricsConfigError`, i.e. a `ValueError`: the spec is wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

__all__ = [
    "DEFAULT_REPLICATION_FACTOR",
    "MIN_INSYNC_REPLICAS",
    "Durability",
    "TopicAdmin",
    "TopicPlan",
    "TopicState",
    "plan_durability",
    "plan_topic",
]

DEFAULT_REPLICATION_FACTOR = 3
"""Replicas of a topic whose spec names none (fewer on a smaller cluster): Kafka's usual production choice,
enough to lose one broker and still have two copies of every acknowledged write."""
MIN_INSYNC_REPLICAS = "min.insync.replicas"


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

    def broker_count(self) -> int:
        """Brokers of the cluster that can hold replicas (fenced ones left out)."""
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


@dataclass(frozen=True)
class Durability:
    """The replication a topic gets or has, and what cannot be done about the spec's wish.

    `replication_factor`: what to create the topic with, or what it has. `min_insync_replicas`: the config to
    converge to, None when it is refused (then the topic's own value is left alone). `refused`: why the topic
    cannot be created (None: it can). `replication_differs`: (has, asked) for an existing topic whose
    replication is not the spec's. `min_insync_refused`: (asked, replicas) when the spec's min ISR exceeds
    the replicas an existing topic has."""

    replication_factor: int
    min_insync_replicas: int | None
    brokers: int
    refused: str | None = None
    replication_differs: tuple[int, int] | None = None
    min_insync_refused: tuple[int, int] | None = None


def plan_durability(
    replication_factor: int | None, min_insync_replicas: int | None, brokers: int, actual: TopicState | None
) -> Durability:
    """The replication factor and min ISR of a topic, from the spec's (None: the defaults) and the broker count.

    Defaults: min(DEFAULT_REPLICATION_FACTOR, brokers) replicas, and a min ISR of one less (at least 1), so
    writes go on with one replica down and an acknowledged write has two copies once there are three. Rules
    (messages name the spec's field, as `kct.api` spells it): a new topic cannot have more replicas than the
    cluster has brokers; the min ISR cannot exceed the replicas (a produce with acks=all would always fail),
    counted on the topic itself when it exists (its replication is what it is)."""
    wanted = replication_factor if replication_factor is not None else min(DEFAULT_REPLICATION_FACTOR, max(brokers, 1))
    replicas = actual.replication_factor if actual is not None else wanted
    isr = min_insync_replicas if min_insync_replicas is not None else max(1, replicas - 1)
    if actual is None:
        if wanted > brokers:
            return Durability(wanted, None, brokers, refused=(
                f"replicationFactor: {wanted} is above the cluster's {brokers} broker(s); a partition cannot "
                "have more replicas than there are brokers"))
        if isr > wanted:
            source = "" if replication_factor is not None else (
                f" (the default: min({DEFAULT_REPLICATION_FACTOR}, brokers))")
            return Durability(wanted, None, brokers, refused=(
                f"minInsyncReplicas: {isr} is above the replication factor {wanted}{source}; minInsyncReplicas must "
                "not exceed the replicas, or no write could ever be acknowledged"))
        return Durability(wanted, isr, brokers)
    differs = (replicas, wanted) if replicas != wanted else None
    if isr > replicas:
        return Durability(replicas, None, brokers, replication_differs=differs, min_insync_refused=(isr, replicas))
    return Durability(replicas, isr, brokers, replication_differs=differs)
