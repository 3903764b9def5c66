"""The kopf handlers' bodies, called as kopf calls them (keyword arguments, a memo) with in-memory fakes:
what lands in the status patch, which events and retries follow, and what the child watch reconciles."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import kopf
import pytest

from kct.api.status import ClientMetricsSubscriptionStatus
from kct.api.telemetry_receiver import TelemetryReceiverStatus
from kct.controller.children import InMemoryChildren
from kct.controller.kafka_clients import AdminPool
from kct.controller.kernel import KeyedLocks, OperatorConfig
from kct.controller.subscription_handlers import CLAIMS_INDEX, SubscriptionHandlers, claims_index
from kct.controller.telemetry_receiver_handlers import ReceiverHandlers
from kct.kafka.fake import InMemoryClientMetricsAdmin, InMemoryTopicAdmin
from kct.kafka.topics import TopicState

AVAILABLE = {
    "observedGeneration": 1, "replicas": 1, "readyReplicas": 1, "availableReplicas": 1, "updatedReplicas": 1,
    "conditions": [{"type": "Available", "status": "True"}],
}


def receiver_body(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "telemetry.kct.dev/v1alpha1",
        "kind": "TelemetryReceiver",
        "metadata": {"namespace": "ns", "name": "tr", "uid": "uid-tr", "generation": 1},
        "spec": {"replicas": 1, "topic": {"name": "raw"}, **spec},
    }


def receiver_memo(kube: InMemoryChildren, kafka: InMemoryTopicAdmin) -> kopf.Memo:
    pool = AdminPool("broker:9092", construct=lambda bootstrap, properties: kafka)
    return kopf.Memo(receiver_children=kube, receiver_topic_admins=pool)


def ready(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == "Ready")


async def test_receiver_change_handler_writes_a_valid_status_and_creates_the_topic() -> None:
    """Given a new TelemetryReceiver, When the change handler runs, Then the patch holds a status the CRD's
    model accepts, with Ready=True, and the topic exists."""
    kube, kafka = InMemoryChildren(deployment_status=dict(AVAILABLE)), InMemoryTopicAdmin()
    patch = kopf.Patch()
    body = kopf.Body(receiver_body(topic={"name": "raw", "partitions": 3}))
    await ReceiverHandlers(OperatorConfig()).on_change(body=body, patch=patch, memo=receiver_memo(kube, kafka), retry=0)
    status = dict(patch["status"])
    TelemetryReceiverStatus.model_validate(status)
    assert ready(status)["status"] == "True"
    assert kafka.topics["raw"].partitions == 3 and status["topic"]["partitions"] == 3


async def test_receiver_change_handler_retries_while_kafka_is_unreachable() -> None:
    """Given an unreachable broker, Then the handler patches Ready=False/KafkaUnreachable and raises kopf's
    TemporaryError with a delay (kopf applies the patch and retries)."""
    kube, kafka = InMemoryChildren(deployment_status=dict(AVAILABLE)), InMemoryTopicAdmin(unreachable=True)
    patch = kopf.Patch()
    with pytest.raises(kopf.TemporaryError) as retried:
        await ReceiverHandlers(OperatorConfig(backoff_base_seconds=3)).on_change(
            body=kopf.Body(receiver_body()), patch=patch, memo=receiver_memo(kube, kafka), retry=0
        )
    assert retried.value.delay == 3
    assert ready(dict(patch["status"]))["reason"] == "KafkaUnreachable"


async def test_resync_never_raises_for_retries() -> None:
    kube, kafka = InMemoryChildren(deployment_status=dict(AVAILABLE)), InMemoryTopicAdmin(unreachable=True)
    patch = kopf.Patch()
    await ReceiverHandlers(OperatorConfig()).resync(body=kopf.Body(receiver_body()), patch=patch,
                                                   memo=receiver_memo(kube, kafka))
    assert ready(dict(patch["status"]))["reason"] == "KafkaUnreachable"


async def test_a_deleted_child_reconciles_its_owner_and_patches_the_owners_status() -> None:
    """Given a reconciled receiver stored in the API server, When its Service is deleted behind its back,
    Then the child watch re-creates the Service and writes the owner's status through the port."""
    kube, kafka = InMemoryChildren(deployment_status=dict(AVAILABLE)), InMemoryTopicAdmin()
    owner = receiver_body()
    kube.objects[("TelemetryReceiver", "ns", "tr")] = owner
    memo = receiver_memo(kube, kafka)
    handlers = ReceiverHandlers(OperatorConfig())
    await handlers.on_change(body=kopf.Body(owner), patch=kopf.Patch(), memo=memo, retry=0)
    service = kube.objects.pop(("Service", "ns", "tr-receiver"))
    await handlers.child_changed(type="DELETED", body=kopf.Body(service), memo=memo, namespace="ns")
    assert ("Service", "ns", "tr-receiver") in kube.objects
    status = kube.objects[("TelemetryReceiver", "ns", "tr")]["status"]
    TelemetryReceiverStatus.model_validate(status)
    assert ready(status)["status"] == "True"


class HeldTopicAdmin(InMemoryTopicAdmin):
    """Once `held` is set, a describe waits (in its reconcile's thread) until `released` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.held, self.entered, self.released = threading.Event(), threading.Event(), threading.Event()

    def describe_topic(self, name: str) -> TopicState | None:
        if self.held.is_set():
            self.entered.set()
            self.released.wait(timeout=10)
        return super().describe_topic(name)


async def test_the_delete_waits_for_a_child_events_reconcile_so_the_topic_stays_deleted() -> None:
    """Given a receiver with deleteOnRemoval whose child event's reconcile is about to read the topic, When
    the resource is deleted meanwhile, Then the delete handler waits for that reconcile and deletes the topic
    after it (without the wait, the reconcile found no topic and created it again after the delete)."""
    kube, kafka = InMemoryChildren(deployment_status=dict(AVAILABLE)), HeldTopicAdmin()
    owner = receiver_body(topic={"name": "raw", "deleteOnRemoval": True})
    kube.objects[("TelemetryReceiver", "ns", "tr")] = owner
    memo = receiver_memo(kube, kafka)
    handlers = ReceiverHandlers(OperatorConfig())
    await handlers.on_change(body=kopf.Body(owner), patch=kopf.Patch(), memo=memo, retry=0)
    assert "raw" in kafka.topics
    service = kube.objects.pop(("Service", "ns", "tr-receiver"))
    kafka.held.set()
    event = asyncio.create_task(
        handlers.child_changed(type="DELETED", body=kopf.Body(service), memo=memo, namespace="ns")
    )
    assert await asyncio.to_thread(kafka.entered.wait, 10)
    deleting = dict(owner, metadata={**owner["metadata"], "deletionTimestamp": "2026-11-28T07:00:00Z"})
    kube.objects[("TelemetryReceiver", "ns", "tr")] = deleting
    delete = asyncio.create_task(handlers.on_delete(body=kopf.Body(deleting), memo=memo, retry=0))
    await asyncio.wait({delete}, timeout=0.5)
    assert not delete.done(), "the delete ran while the event's reconcile was in flight"
    kafka.released.set()
    await asyncio.gather(event, delete)
    assert "raw" not in kafka.topics
    kafka.held.clear()
    await handlers.child_changed(type="DELETED", body=kopf.Body(service), memo=memo, namespace="ns")
    assert "raw" not in kafka.topics, "an event after the delete reconciled a deleting owner"


async def test_a_resync_tick_of_a_receiver_being_deleted_touches_nothing() -> None:
    """Given a receiver whose deletion has begun (kopf's live body shows the deletionTimestamp), When its
    timer fires, Then no topic is created, no child applied and no status written."""
    kube, kafka = InMemoryChildren(deployment_status=dict(AVAILABLE)), InMemoryTopicAdmin()
    body = receiver_body()
    body["metadata"]["deletionTimestamp"] = "2026-11-28T07:00:00Z"
    patch = kopf.Patch()
    await ReceiverHandlers(OperatorConfig()).resync(body=kopf.Body(body), patch=patch, memo=receiver_memo(kube, kafka))
    assert (kafka.topics, kube.applied, dict(patch)) == ({}, [], {})


async def test_a_child_without_our_owner_is_ignored() -> None:
    kube, kafka = InMemoryChildren(), InMemoryTopicAdmin()
    stray = {"kind": "Service", "metadata": {"name": "x", "namespace": "ns", "ownerReferences": []}}
    await ReceiverHandlers(OperatorConfig()).child_changed(
        type="DELETED", body=kopf.Body(stray), memo=receiver_memo(kube, kafka), namespace="ns"
    )
    assert kube.applied == [] and kafka.calls == []


def subscription_body(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "team-a", "name": "checkout", "uid": "uid-1", "generation": 1,
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"metrics": ["org.apache.kafka.producer."], "intervalMs": 60000, **spec},
    }


def subscription_memo(kafka: InMemoryClientMetricsAdmin) -> kopf.Memo:
    return kopf.Memo(admins=AdminPool("broker:9092", construct=lambda bootstrap, properties: kafka))


async def test_subscription_change_and_delete_handlers_drive_the_broker() -> None:
    """Given a subscription, When the change handler runs, Then the broker has its configs and the patch a
    valid Ready=True status; When the delete handler runs, Then the configs are gone."""
    kafka = InMemoryClientMetricsAdmin()
    body = kopf.Body(subscription_body())
    index = {name: [claim] for name, claim in claims_index(body=body).items()}
    handlers = SubscriptionHandlers(OperatorConfig())
    patch = kopf.Patch()
    await handlers.on_change(body=body, patch=patch, memo=subscription_memo(kafka), retry=0, **{CLAIMS_INDEX: index})
    status = dict(patch["status"])
    ClientMetricsSubscriptionStatus.model_validate(status)
    assert ready(status)["status"] == "True"
    assert kafka.resources["checkout"]["metrics"] == "org.apache.kafka.producer."
    await handlers.on_delete(body=body, memo=subscription_memo(kafka), retry=0, **{CLAIMS_INDEX: index})
    assert "checkout" not in kafka.resources


async def test_subscription_change_handler_retries_while_kafka_is_unreachable() -> None:
    kafka = InMemoryClientMetricsAdmin(unreachable=True)
    body = kopf.Body(subscription_body())
    index = {name: [claim] for name, claim in claims_index(body=body).items()}
    patch = kopf.Patch()
    with pytest.raises(kopf.TemporaryError):
        await SubscriptionHandlers(OperatorConfig()).on_change(
            body=body, patch=patch, memo=subscription_memo(kafka), retry=0, **{CLAIMS_INDEX: index}
        )
    assert ready(dict(patch["status"]))["reason"] == "KafkaUnreachable"


async def _reconciled_with_aggregation() -> tuple[InMemoryChildren, kopf.Memo, ReceiverHandlers, tuple[str, str, str]]:
    """A receiver with aggregation, reconciled once and stored (status included) as the API server has it."""
    kube, kafka = InMemoryChildren(deployment_status=dict(AVAILABLE)), InMemoryTopicAdmin()
    owner = receiver_body(aggregation={})
    kube.objects[("TelemetryReceiver", "ns", "tr")] = owner
    memo = receiver_memo(kube, kafka)
    handlers = ReceiverHandlers(OperatorConfig(watch_spark_applications=True))
    patch = kopf.Patch()
    await handlers.on_change(body=kopf.Body(owner), patch=patch, memo=memo, retry=0)
    owner["status"] = dict(patch["status"])
    (key,) = [key for key in kube.objects if key[0] == "SparkApplication"]
    return kube, memo, handlers, key


async def test_a_new_application_state_reaches_the_owners_status_at_once() -> None:
    """Given a reconciled receiver whose status shows its SparkApplication not yet seen by the spark-operator
    When the spark-operator reports the application RUNNING (a MODIFIED event)
    Then the owner is reconciled at once and its status.aggregation shows RUNNING."""
    kube, memo, handlers, key = await _reconciled_with_aggregation()
    kube.objects[key]["status"] = {"applicationState": {"state": "RUNNING"}}

    await handlers.application_changed(type="MODIFIED", body=kopf.Body(kube.objects[key]), memo=memo, namespace="ns")

    status = kube.objects[("TelemetryReceiver", "ns", "tr")]["status"]
    TelemetryReceiverStatus.model_validate(status)
    assert status["aggregation"]["state"] == "RUNNING"


async def test_an_application_event_the_owner_already_shows_reconciles_nothing() -> None:
    """Given a receiver whose status already shows its application's state
    When the spark-operator rewrites the application's status with the same state (an executor change)
    Then nothing is applied."""
    kube, memo, handlers, key = await _reconciled_with_aggregation()
    kube.objects[key]["status"] = {"applicationState": {"state": "RUNNING"}}
    await handlers.application_changed(type="MODIFIED", body=kopf.Body(kube.objects[key]), memo=memo, namespace="ns")
    applied = list(kube.applied)
    kube.objects[key]["status"]["executorState"] = {"tr-aggregation-exec-1": "RUNNING"}

    await handlers.application_changed(type="MODIFIED", body=kopf.Body(kube.objects[key]), memo=memo, namespace="ns")

    assert kube.applied == applied


async def test_a_deleted_application_is_recreated_at_once() -> None:
    kube, memo, handlers, key = await _reconciled_with_aggregation()
    application = kube.objects.pop(key)

    await handlers.application_changed(type="DELETED", body=kopf.Body(application), memo=memo, namespace="ns")

    assert key in kube.objects


def test_applications_are_watched_only_when_configured() -> None:
    """The chart turns the watch on with the RBAC for it (`rbac.sparkApplications`): without list/watch
    permission kopf's watch would fail, so it is off unless asked for."""
    def watched(config: OperatorConfig) -> set[str]:
        registry = kopf.OperatorRegistry()
        ReceiverHandlers(config).register(registry)
        return {str(h.selector.any_name) for h in registry._watching.get_all_handlers() if h.selector is not None}

    assert "sparkapplications" not in watched(OperatorConfig())
    assert {"sparkapplications", "scheduledsparkapplications"} <= watched(OperatorConfig(watch_spark_applications=True))


async def test_keyed_locks_share_a_lock_per_key_and_keep_none_unused() -> None:
    """Given two handlers on one key, Then they get one lock (the second waits) and another key gets its
    own; once nobody holds or awaits them, no lock is kept (none outlives its resource)."""
    locks = KeyedLocks()
    async with locks(("ns", "a")):
        assert locks(("ns", "a")).locked() and not locks(("ns", "b")).locked()
    assert len(locks) == 0
