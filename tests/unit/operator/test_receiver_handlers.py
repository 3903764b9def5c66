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


def _selector_matches(selector: str, labels: dict[str, str]) -> bool:
    """Equality (`k=v`) and existence (`k`) terms, the only ones `children_selector` uses."""
    for term in selector.split(","):
        key, has_value, value = term.partition("=")
        if key not in labels or (has_value and labels[key] != value):
            return False
    return True


def test_children_are_watched_through_a_server_side_label_selector() -> None:
    """Given the receiver handlers with Spark applications watched, When their startup handler runs, Then
    every watched child kind (Secrets and ConfigMaps among them) and application kind gets the children's
    label selector for the API server, the TelemetryReceivers themselves none, and the labels every child
    is rendered with satisfy it (so nothing the operator owns is filtered out)."""
    from kct.controller.telemetry_receiver_handlers import ReceiverHandlers
    from kct.render.names import child_labels, children_selector

    handlers = ReceiverHandlers(OperatorConfig(watch_spark_applications=True))
    registry = kopf.OperatorRegistry()
    handlers.register(registry)
    settings = kopf.OperatorSettings()
    memo = kopf.Memo(receiver_children=object(), receiver_topic_admins=AdminPool("b:9092", construct=lambda b, p: p))
    handlers.configure(settings=settings, memo=memo)

    watched = {h.id.removeprefix("child-").removeprefix("application-") for h in registry._watching.get_all_handlers()}
    assert {"secrets", "configmaps", "sparkapplications"} <= watched
    for group, version, plural in handlers.watched_kinds():
        assert settings.watching.label_selectors.collect(kopf.Resource(group, version, plural)) == [
            "app.kubernetes.io/managed-by=kct-operator,telemetry.kct.dev/receiver"], plural
    assert {plural for _, _, plural in handlers.watched_kinds()} == watched
    receivers = kopf.Resource("telemetry.kct.dev", "v1alpha1", "telemetryreceivers")
    assert settings.watching.label_selectors.collect(receivers) == []
    assert _selector_matches(children_selector(), child_labels("telemetry", "receiver", "1.0"))
    assert not _selector_matches(children_selector(), {"app.kubernetes.io/managed-by": "someone-else"})
