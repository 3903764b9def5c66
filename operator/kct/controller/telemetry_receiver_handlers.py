"""kopf handlers for TelemetryReceiver: thin adapters around `kct.controller.telemetry_receiver`.

- create / update / resume: reconcile; Kafka or API errors raise `kopf.TemporaryError(delay=...)`
  after the status patch that names the cause (kopf applies the patch even when the handler raises).
- a timer every `resync_seconds`: reconcile again, which re-applies every child (drift on our fields
  reverted, deleted children re-created) and refreshes the Deployment's readiness in status.
- child events: when a child carrying our labels is deleted, or a receiver Deployment's controller has
  caught up with a change, the owner is reconciled at once (its status patched through the API).
- application events (with `OperatorConfig.watch_spark_applications`): when the spark-operator reports a
  state of the aggregation's (Scheduled)SparkApplication that the owner's `status.aggregation` does not show
  yet, or the application is deleted, the owner is reconciled at once, not at the next resync.
- delete: the topic is deleted only with `spec.topic.deleteOnRemoval`; the children go with the
  resource through their ownerReferences (Kubernetes' garbage collector).

kopf serialises a resource's own change and delete handlers, but neither its timer nor another object's
event: a reconcile from either could still be creating the topic when the delete handler deletes it, and
bring the topic back after the resource is gone. So every reconcile and the delete take one lock per
receiver; a reconcile holding it skips a resource being deleted, and an event's reconcile reads the owner
only once it holds the lock.

The child and application watches pass `children_selector()` to the API server (kopf's
`settings.watching.label_selectors`, set at startup before any watch starts): the operator never receives a
Secret or ConfigMap it did not create. Secrets that a spec references (`spec.kafka.secretRef`, a push
token's Secret) are read by name when needed, never watched, so they need no label.

The finalizer, progress annotations and login are configured by the subscription handlers'
startup handler (`kct.controller.subscription_handlers`); `kct.controller.runner.register_handlers`, the one entry point
`kct operator` uses, registers both controllers together.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any, Final

import kopf

from kct.api.crds import GROUP, VERSION
from kct.controller.children import ChildrenClient, KubernetesChildren
from kct.controller.kafka_clients import AdminPool, KubernetesSecretReader, read_properties_file
from kct.controller.kernel import KeyedLocks, OperatorConfig, Outcome
from kct.controller.kopf_outcome import post_events, write_outcome
from kct.controller.metrics import OperatorMetrics
from kct.controller.telemetry_receiver import (
    ReceiverResource,
    TopicAdminFactory,
    application_state,
    delete_receiver,
    reconcile_receiver,
)
from kct.kafka.topics import TopicAdmin
from kct.render.names import MANAGED_BY, OWNER_LABEL, children_selector

__all__ = ["PLURAL", "ReceiverHandlers", "register_receiver_handlers", "topic_admin_factory"]

PLURAL: Final = "telemetryreceivers"
KIND: Final = "TelemetryReceiver"
log = logging.getLogger(__name__)

# Children whose deletion is noticed at once (the rest, SparkApplications included, at the next resync).
_WATCHED_CHILDREN: Final = (
    ("", "v1", "configmaps"),
    ("", "v1", "secrets"),
    ("", "v1", "services"),
    ("apps", "v1", "deployments"),
    ("policy", "v1", "poddisruptionbudgets"),
    ("autoscaling", "v2", "horizontalpodautoscalers"),
    ("networking.k8s.io", "v1", "networkpolicies"),
)
# The aggregation's applications, whose state the spark-operator writes as the job starts, runs and fails.
_WATCHED_APPLICATIONS: Final = (
    ("sparkoperator.k8s.io", "v1beta2", "sparkapplications"),
    ("sparkoperator.k8s.io", "v1beta2", "scheduledsparkapplications"),
)


def _kafka_python_topic_admin(bootstrap_servers: str, properties: Any) -> TopicAdmin:
    from kct.kafka.kafka_python import KafkaPythonTopicAdmin
    from kct.kafka.properties import kafka_python_settings

    settings: dict[str, Any] = kafka_python_settings(properties)
    settings.pop("bootstrap_servers", None)
    return KafkaPythonTopicAdmin(bootstrap_servers, settings)


def topic_admin_factory(pool: AdminPool[TopicAdmin]) -> TopicAdminFactory:
    """The pool's per-cluster cache (Secrets, rotation) handing out topic admins."""
    return pool


def _memo_children(memo: kopf.Memo) -> ChildrenClient:
    children = memo.get("receiver_children")
    if children is None:
        raise RuntimeError("the receiver startup handler did not run")
    result: ChildrenClient = children
    return result


def _memo_topics(memo: kopf.Memo) -> AdminPool[TopicAdmin]:
    pool = memo.get("receiver_topic_admins")
    if not isinstance(pool, AdminPool):
        raise RuntimeError("the receiver startup handler did not run")
    topics: AdminPool[TopicAdmin] = pool  # the startup handler builds it with topic admins
    return topics


class ReceiverHandlers:
    """The TelemetryReceiver handlers, one method each, so each can be called alone (unit tests pass kopf's
    keyword arguments and in-memory fakes in the memo); `register` puts them on a registry."""

    def __init__(self, config: OperatorConfig, metrics: OperatorMetrics | None = None) -> None:
        self.config = config
        self.metrics = metrics if metrics is not None else OperatorMetrics()
        self.locks = KeyedLocks()  # per receiver (namespace, name): see the module's docstring

    def register(self, registry: kopf.OperatorRegistry) -> None:
        resource = (GROUP, VERSION, PLURAL)
        kopf.on.startup(id="configure-receivers", registry=registry)(self.configure)
        kopf.on.cleanup(id="close-receiver-admins", registry=registry)(self.close_admins)
        for on in (kopf.on.resume, kopf.on.create, kopf.on.update):
            on(*resource, id="reconcile", registry=registry)(self.on_change)
        interval = self.config.resync_seconds
        kopf.timer(*resource, id="resync", interval=interval, initial_delay=interval, registry=registry)(self.resync)
        kopf.on.delete(*resource, id="delete", registry=registry)(self.on_delete)
        labels: dict[str, Any] = {"app.kubernetes.io/managed-by": MANAGED_BY, OWNER_LABEL: kopf.PRESENT}
        for group, version, plural in _WATCHED_CHILDREN:  # server-side selectors: see `configure`
            kopf.on.event(group, version, plural, labels=labels, id=f"child-{plural}", registry=registry)(
                self.child_changed
            )
        if self.config.watch_spark_applications:
            for group, version, plural in _WATCHED_APPLICATIONS:
                kopf.on.event(group, version, plural, labels=labels, id=f"application-{plural}", registry=registry)(
                    self.application_changed
                )

    def watched_kinds(self) -> tuple[tuple[str, str, str], ...]:
        """(group, version, plural) of every kind watched for our children's events."""
        applications = _WATCHED_APPLICATIONS if self.config.watch_spark_applications else ()
        return (*_WATCHED_CHILDREN, *applications)

    def configure(self, settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        """Startup: server-side label selectors on the children's watches (the handlers' own `labels`
        filter only on the operator's side, after the API server has sent every object), then the
        Kubernetes client and the pool of topic admins, unless the memo has them (tests)."""
        import os
        from pathlib import Path

        for group, version, plural in self.watched_kinds():
            settings.watching.label_selectors[group, version, plural] = children_selector()

        if memo.get("receiver_children") is None:
            memo["receiver_children"] = KubernetesChildren()
        if not isinstance(memo.get("receiver_topic_admins"), AdminPool):
            properties_file = os.environ.get("KCT_KAFKA_PROPERTIES_FILE")
            memo["receiver_topic_admins"] = AdminPool(
                os.environ.get("KAFKA_BOOTSTRAP_SERVERS") or None,
                read_properties_file(Path(properties_file)) if properties_file else None,
                secrets=KubernetesSecretReader(),
                construct=_kafka_python_topic_admin,
            )

    def close_admins(self, memo: kopf.Memo, **_: Any) -> None:
        pool = memo.get("receiver_topic_admins")
        if isinstance(pool, AdminPool):
            pool.close()

    async def reconcile(self, body: kopf.Body, memo: kopf.Memo, retry: int) -> Outcome | None:
        """Under the receiver's lock; None when the resource is being deleted (the delete handler owns it
        then: kopf's body is a live view)."""
        async with self.locks(_key(body)):
            if (body.get("metadata") or {}).get("deletionTimestamp"):
                return None
            return await self._reconcile(body, memo, retry)

    async def _reconcile(self, body: Mapping[str, Any], memo: kopf.Memo, retry: int) -> Outcome:
        """Run the blocking reconcile in a thread; the caller holds the receiver's lock."""
        pool = _memo_topics(memo)
        started = time.perf_counter()
        outcome = await asyncio.to_thread(
            reconcile_receiver,
            ReceiverResource.from_body(body),
            _memo_children(memo),
            topic_admin_factory(pool),
            default_bootstrap=pool.default_bootstrap,
            retry=retry,
            backoff_base=self.config.backoff_base_seconds,
            backoff_max=self.config.backoff_max_seconds,
        )
        self.metrics.observe_reconcile(KIND, time.perf_counter() - started, outcome)
        if "aggregation" in outcome.status or outcome.error is None:  # a stopped reconcile keeps the gauges
            namespace, name = _key(body)
            self.metrics.observe_export(namespace, name, (outcome.status.get("aggregation") or {}).get("export"))
        return outcome

    async def on_change(self, body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, retry: int, **_: Any) -> None:
        """create / update / resume: reconcile, write status, retry later when the outcome asks."""
        outcome = await self.reconcile(body, memo, retry)
        if outcome is not None:
            write_outcome(outcome, body, patch)

    async def resync(self, body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
        """The timer: no retries from here (the next tick is the retry; the change handler has its own)."""
        outcome = await self.reconcile(body, memo, 0)
        if outcome is not None:
            write_outcome(outcome, body, patch, retry=False)

    async def on_delete(self, body: kopf.Body, memo: kopf.Memo, retry: int, **_: Any) -> None:
        """After any reconcile in flight (it could otherwise create the topic again afterwards)."""
        async with self.locks(_key(body)):
            outcome = await asyncio.to_thread(
                delete_receiver,
                ReceiverResource.from_body(body),
                topic_admin_factory(_memo_topics(memo)),
                retry=retry,
                backoff_base=self.config.backoff_base_seconds,
                backoff_max=self.config.backoff_max_seconds,
            )
        write_outcome(outcome, body, None)
        if outcome.retry_after is None:
            self.metrics.forget_receiver(*_key(body))

    async def reconcile_owner(self, namespace: str, owner: str, memo: kopf.Memo) -> None:
        """Reconcile the TelemetryReceiver `owner` now (outside its own handlers) and patch its status; read
        under the owner's lock, so an owner whose delete handler ran or is waiting is seen deleting."""
        children = _memo_children(memo)
        async with self.locks((namespace, owner)):
            body = await asyncio.to_thread(children.get, f"{GROUP}/{VERSION}", KIND, namespace, owner)
            if body is None or (body.get("metadata") or {}).get("deletionTimestamp"):
                return
            outcome = await self._reconcile(body, memo, 0)
        post_events(body, outcome.events)
        if outcome.status:
            await asyncio.to_thread(children.patch_status, f"{GROUP}/{VERSION}", KIND, namespace, owner, outcome.status)

    async def child_changed(
        self, type: str, body: kopf.Body, memo: kopf.Memo, namespace: str | None, **_: Any
    ) -> None:
        """A child was deleted, or a receiver Deployment's controller caught up with a change: reconcile its
        owner at once (a hand edit is then reverted, and readiness reaches status before the resync)."""
        owners = [ref for ref in body.get("metadata", {}).get("ownerReferences") or [] if ref.get("kind") == KIND]
        if not owners or namespace is None:
            return
        if type == "DELETED" or (type == "MODIFIED" and _deployment_settled(body)):
            await self.reconcile_owner(namespace, str(owners[0].get("name")), memo)


    async def application_changed(
        self, type: str, body: kopf.Body, memo: kopf.Memo, namespace: str | None, **_: Any
    ) -> None:
        """The spark-operator changed an aggregation application's status, or it was deleted: reconcile the
        owner when its `status.aggregation` is behind (the spark-operator also rewrites the status for every
        executor change; those leave the state as it is and cost nothing here)."""
        owners = [ref for ref in body.get("metadata", {}).get("ownerReferences") or [] if ref.get("kind") == KIND]
        if not owners or namespace is None or type not in {"MODIFIED", "DELETED"}:
            return
        name = str(owners[0].get("name"))
        if type == "MODIFIED":
            owner = await asyncio.to_thread(_memo_children(memo).get, f"{GROUP}/{VERSION}", KIND, namespace, name)
            shown = ((owner or {}).get("status") or {}).get("aggregation") or {}
            if all(shown.get(key) == value for key, value in application_state(body).items()):
                return
        await self.reconcile_owner(namespace, name, memo)


def _key(body: Mapping[str, Any]) -> tuple[str, str]:
    """A receiver's key in `ReceiverHandlers.locks`: (namespace, name), as `reconcile_owner` is called with."""
    metadata = body.get("metadata") or {}
    return str(metadata.get("namespace")), str(metadata.get("name"))


def _deployment_settled(body: Mapping[str, Any]) -> bool:
    """A Deployment whose controller has observed its latest generation."""
    if body.get("kind") != "Deployment":
        return False
    status = body.get("status") or {}
    return bool(status.get("observedGeneration") == (body.get("metadata") or {}).get("generation"))


def register_receiver_handlers(
    registry: kopf.OperatorRegistry, config: OperatorConfig, metrics: OperatorMetrics | None = None
) -> None:
    ReceiverHandlers(config, metrics).register(registry)
