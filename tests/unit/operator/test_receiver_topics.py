"""The topic rules: partitions only grow; configs converge; replication is chosen at creation against the
brokers, min ISR never above the replicas; the fake behaves like a broker."""

from __future__ import annotations

import pytest

from kct.kafka.errors import InvalidClientMetricsConfigError, KafkaUnreachableError
from kct.kafka.fake import InMemoryTopicAdmin
from kct.kafka.topics import TopicAdmin, TopicState, plan_durability, plan_topic


def test_missing_topic_is_created() -> None:
    """Given no topic, When planned, Then it is created."""
    assert plan_topic(6, {}, None).create


def test_partitions_grow_but_never_shrink() -> None:
    """Given a topic with 6 partitions, When 8 are asked, Then it grows to 8; When 3 are asked, Then nothing
    is done and the refusal (6 kept, 3 asked) is reported."""
    actual = TopicState("t", 6, 1, {})
    assert plan_topic(8, {}, actual).grow_to == 8
    shrink = plan_topic(3, {}, actual)
    assert shrink.grow_to is None and shrink.shrink_refused == (6, 3) and not shrink.changes


def test_only_differing_configs_are_set() -> None:
    """Given retention.ms already right and another config unmanaged, Then nothing is set; a new value is."""
    actual = TopicState("t", 1, 1, {"retention.ms": "1000", "cleanup.policy": "delete"})
    assert not plan_topic(1, {"retention.ms": "1000"}, actual).changes
    assert plan_topic(1, {"retention.ms": "2000"}, actual).set_configs == {"retention.ms": "2000"}


def test_fake_is_a_topic_admin_and_fails_on_demand() -> None:
    """Given the fake, Then it satisfies the Protocol, creation is idempotent, and `unreachable` raises."""
    fake = InMemoryTopicAdmin()
    assert isinstance(fake, TopicAdmin)
    fake.create_topic("t", 3, None, {"retention.ms": "5"})
    fake.create_topic("t", 9, None, {})
    assert fake.describe_topic("t") == TopicState("t", 3, 1, {"retention.ms": "5"})
    fake.unreachable = True
    with pytest.raises(KafkaUnreachableError):
        fake.describe_topic("t")


def test_durability_defaults_to_three_replicas_and_one_less_in_sync_capped_by_the_brokers() -> None:
    """Given no replication in the spec, When a new topic is planned on 1, 2, 3 and 5 brokers, Then it gets
    min(3, brokers) replicas and min.insync.replicas one less (at least 1): writes go on with a replica down."""
    planned = {brokers: plan_durability(None, None, brokers, None) for brokers in (1, 2, 3, 5)}
    assert {b: (d.replication_factor, d.min_insync_replicas) for b, d in planned.items()} == {
        1: (1, 1), 2: (2, 1), 3: (3, 2), 5: (3, 2)}
    assert all(d.refused is None for d in planned.values())


def test_more_replicas_than_brokers_refuses_the_new_topic_naming_the_field_and_the_rule() -> None:
    """Given replicationFactor 3 on a one-broker cluster, When a new topic is planned, Then it is refused with
    a message naming the field, the value, the broker count and the rule."""
    refused = plan_durability(3, None, 1, None).refused
    assert refused == ("replicationFactor: 3 is above the cluster's 1 broker(s); a partition cannot have more "
                       "replicas than there are brokers")


def test_a_min_isr_above_the_default_replication_refuses_the_new_topic() -> None:
    """Given minInsyncReplicas 3 and no replicationFactor on two brokers (the default: 2 replicas), Then the
    topic is refused naming minInsyncReplicas and the default it was checked against."""
    refused = plan_durability(None, 3, 2, None).refused
    assert refused is not None and refused.startswith("minInsyncReplicas: 3 is above the replication factor 2 ")
    assert "(the default: min(3, brokers))" in refused


def test_an_existing_topics_replication_is_reported_not_changed_and_its_min_isr_follows_it() -> None:
    """Given a topic created with 1 replica on a 3-broker cluster, When planned with the defaults, Then the
    difference (has 1, asked 3) is reported, nothing is refused, and the min ISR converges to what 1 replica
    allows (1), not to 2 (which would block every acks=all write)."""
    existing = TopicState("t", 6, 1, {"min.insync.replicas": "2"})
    planned = plan_durability(None, None, 3, existing)
    assert (planned.replication_factor, planned.min_insync_replicas) == (1, 1)
    assert planned.replication_differs == (1, 3) and planned.refused is None and planned.min_insync_refused is None


def test_an_explicit_min_isr_above_an_existing_topics_replicas_is_refused_and_left_alone() -> None:
    """Given a topic with 2 replicas and minInsyncReplicas 3 in the spec (replicationFactor 3), Then the
    min ISR is refused (asked 3, replicas 2) and not set; the replication difference is reported too."""
    planned = plan_durability(3, 3, 3, TopicState("t", 1, 2, {}))
    assert planned.min_insync_replicas is None and planned.min_insync_refused == (3, 2)
    assert planned.replication_differs == (2, 3)


def test_the_fake_counts_brokers_and_refuses_more_replicas_like_a_broker() -> None:
    """Given a fake with 2 brokers, Then it reports 2, creates a topic with 2 replicas and refuses 3 with the
    broker's INVALID_REPLICATION_FACTOR (a ValueError: the spec is wrong)."""
    fake = InMemoryTopicAdmin(brokers=2)
    assert fake.broker_count() == 2
    fake.create_topic("ok", 1, 2, {})
    assert fake.topics["ok"].replication_factor == 2
    with pytest.raises(InvalidClientMetricsConfigError, match="InvalidReplicationFactor"):
        fake.create_topic("too-many", 1, 3, {})
    assert "too-many" not in fake.topics
