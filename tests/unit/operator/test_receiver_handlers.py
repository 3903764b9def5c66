"""The kopf wiring of the TelemetryReceiver controller, and `kct operator` registering it."""

from __future__ import annotations

import kopf

from kct.controller.kafka_clients import AdminPool
from kct.controller.kernel import OperatorConfig
from kct.controller.telemetry_receiver_handlers import register_receiver_handlers, topic_admin_factory
from kct.kafka.fake import InMemoryTopicAdmin


def test_handlers_registered_on_an_explicit_registry() -> None:
    """Given a fresh registry, When the receiver handlers are registered, Then it holds create/update/resume
    and delete handlers, the resync timer with the configured interval, and event handlers watching the
    children's kinds for deletions."""
    registry = kopf.OperatorRegistry()
    register_receiver_handlers(registry, OperatorConfig(resync_seconds=9))
    changing = sorted((h.id, str(h.reason)) for h in registry._changing.get_all_handlers())
    assert changing == [("delete", "delete"), ("reconcile", "None"), ("reconcile", "create"), ("reconcile", "update")]
    assert [(t.id, t.interval) for t in registry._spawning.get_all_handlers()] == [("resync", 9)]
    watched = {h.id for h in registry._watching.get_all_handlers()}
    assert {"child-deployments", "child-services", "child-configmaps", "child-secrets"} <= watched


def test_topic_admins_come_from_the_shared_pool() -> None:
    """Given an admin pool building topic admins, When the factory is asked for the default cluster, Then it
    hands out the pool's cached admin (one per cluster)."""
    fake = InMemoryTopicAdmin()
    pool = AdminPool("broker:9092", construct=lambda bootstrap, properties: fake)
    admin_for = topic_admin_factory(pool)
    assert admin_for(None, "ns") is fake and admin_for(None, "other") is fake
