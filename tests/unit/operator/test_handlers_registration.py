"""The kopf wiring: which handlers `kct operator` registers for ClientMetricsSubscriptions."""

from __future__ import annotations

import kopf

from kct.controller.kernel import OperatorConfig
from kct.controller.subscription_handlers import register_subscription_handlers


def test_handlers_registered_on_an_explicit_registry() -> None:
    """Given a fresh registry, When the subscription handlers are registered, Then it holds the claims
    index, create/update/resume/delete handlers, the resync timer (with the configured interval) and
    the startup/login/cleanup activities; the default registry is untouched."""
    registry = kopf.OperatorRegistry()
    register_subscription_handlers(registry, OperatorConfig(resync_seconds=7))
    resource = kopf.Resource("telemetry.kct.dev", "v1alpha1", "clientmetricssubscriptions")
    changing = sorted((h.id, str(h.reason), bool(h.initial)) for h in registry._changing.get_all_handlers())
    assert changing == [
        ("delete", "delete", False),
        ("reconcile", "None", True),  # resume: runs for every existing resource at operator start
        ("reconcile", "create", False),
        ("reconcile", "update", False),
    ]
    timers = registry._spawning.get_all_handlers()
    assert [(t.id, getattr(t, "interval", None)) for t in timers] == [("resync", 7)]
    assert [h.id for h in registry._indexing.get_all_handlers()] == ["cms_claims"]
    activities = {h.activity.value for h in registry._activities.get_all_handlers() if h.activity}
    assert {"startup", "cleanup", "authentication"} <= activities
    assert all(resource.plural in str(h.selector) for h in timers)


def test_one_entry_point_registers_both_controllers() -> None:
    """Given a fresh registry, When `register_handlers` runs (what `kct operator` calls), Then both kinds have
    their reconcile handlers, and kopf's startup (finalizer, storage) and login handlers are there once."""
    from kct.controller.runner import register_handlers

    registry = kopf.OperatorRegistry()
    register_handlers(registry, OperatorConfig())
    selectors = {str(h.selector) for h in registry._changing.get_all_handlers()}
    assert any("clientmetricssubscriptions" in s for s in selectors)
    assert any("telemetryreceivers" in s for s in selectors)
    ids = [h.id for h in registry._activities.get_all_handlers()]
    assert ids.count("configure") == 1 and ids.count("login") == 1 and "configure-receivers" in ids
