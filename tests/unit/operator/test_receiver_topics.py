"""The topic rule: partitions only grow; configs converge; the fake behaves like a broker."""

from __future__ import annotations

import pytest

from kct.kafka.errors import KafkaUnreachableError
from kct.kafka.fake import InMemoryTopicAdmin
from kct.kafka.topics import TopicAdmin, TopicState, plan_topic


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
