"""kopf handlers for TelemetryReceiver: thin adapters around `kct.controller.receiver`.

- create / update / resume: reconcile; Kafka or API errors raise `kopf.TemporaryError(delay=...)`
  after the status patch that names the cause (kopf applies the patch even when the handler raises).
- a timer every `resync_seconds`: reconcile again, which re-applies every child (drift on our fields
  reverted, deleted children re-created) and refreshes the Deployment's readiness in status.
- child events: when a child carrying our labels is deleted, or a receiver Deployment's controller has
  caught up with a change, the owner is reconciled at once (its status patched through the API).
- delete: the topic is deleted only with `spec.topic.deleteOnRemoval`; the children go with the
  resource through their ownerReferences (Kubernetes' garbage collector).

The finalizer, progress annotations and login are configured by the subscription handlers'
startup handler (`kct.controller.handlers`), which `kct operator` always registers alongside.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Final

import kopf

from kct.api.crds import GROUP, VERSION
from kct.api.subscription import KafkaConnection
from kct.controller.children import ChildrenClient, KubernetesChildren
from kct.controller.handlers import OperatorConfig
from kct.controller.kafka_clients import AdminPool, KubernetesSecretReader, read_properties_file
from kct.controller.kernel import Outcome
from kct.controller.receiver import ReceiverResource, TopicAdminFactory, delete_receiver, reconcile_receiver
from kct.kafka.port import ClientMetricsAdmin
from kct.kafka.topics import TopicAdmin
from kct.render.names import MANAGED_BY, OWNER_LABEL

__all__ = ["PLURAL", "register_receiver_handlers", "topic_admin_factory"]

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


def _kafka_python_topic_admin(bootstrap_servers: str, properties: Any) -> ClientMetricsAdmin:
    from kct.kafka.properties import kafka_python_settings
    from kct.kafka.topics import KafkaPythonTopicAdmin

    settings: dict[str, Any] = kafka_python_settings(properties)
    settings.pop("bootstrap_servers", None)
    return KafkaPythonTopicAdmin(bootstrap_servers, settings)


def topic_admin_factory(pool: AdminPool) -> TopicAdminFactory:
    """The pool's per-cluster cache (Secrets, rotation) handing out topic admins."""

    def admin_for(connection: KafkaConnection | None, namespace: str) -> TopicAdmin:
        admin = pool(connection, namespace)
        if not isinstance(admin, TopicAdmin):
            raise TypeError(f"{type(admin).__name__} is not a TopicAdmin; build the pool with topic admins")
        return admin

    return admin_for


def _memo_children(memo: kopf.Memo) -> ChildrenClient:
    children = memo.get("receiver_children")
    if children is None:
        raise RuntimeError("the receiver startup handler did not run")
    result: ChildrenClient = children
    return result


def _memo_topics(memo: kopf.Memo) -> AdminPool:
    pool = memo.get("receiver_topic_admins")
    if not isinstance(pool, AdminPool):
        raise RuntimeError("the receiver startup handler did not run")
    return pool


def _post_events(body: Any, outcome: Outcome) -> None:
    for event in outcome.events:
        try:
            kopf.event(body, type=event.type, reason=event.reason, message=event.message[:1024])
        except Exception:  # events are best-effort; never fail a reconcile for them
            log.debug("posting event failed", exc_info=True)


def register_receiver_handlers(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    resource = (GROUP, VERSION, PLURAL)

    async def reconcile(body: Any, memo: kopf.Memo, retry: int) -> Outcome:
        pool = _memo_topics(memo)
        outcome = await asyncio.to_thread(
            reconcile_receiver,
            ReceiverResource.from_body(body),
            _memo_children(memo),
            topic_admin_factory(pool),
            default_bootstrap=pool.default_bootstrap,
            retry=retry,
            backoff_base=config.backoff_base_seconds,
            backoff_max=config.backoff_max_seconds,
        )
        _post_events(body, outcome)
        return outcome

    @kopf.on.startup(id="configure-receivers", registry=registry)
    def configure(memo: kopf.Memo, **_: Any) -> None:
        import os
        from pathlib import Path

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

    @kopf.on.cleanup(id="close-receiver-admins", registry=registry)
    def close_admins(memo: kopf.Memo, **_: Any) -> None:
        pool = memo.get("receiver_topic_admins")
        if isinstance(pool, AdminPool):
            pool.close()

    @kopf.on.resume(*resource, id="reconcile", registry=registry)
    @kopf.on.create(*resource, id="reconcile", registry=registry)
    @kopf.on.update(*resource, id="reconcile", registry=registry)
    async def reconcile_handler(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, retry: int, **_: Any) -> None:
        outcome = await reconcile(body, memo, retry)
        for key, value in outcome.status.items():
            patch.status[key] = value
        if outcome.retry_after is not None:
            raise kopf.TemporaryError(outcome.error or "retrying", delay=outcome.retry_after)

    @kopf.timer(
        *resource, id="resync", interval=config.resync_seconds, initial_delay=config.resync_seconds, registry=registry
    )
    async def resync(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
        # No retries from the timer: the next tick is the retry, and the change handler has its own.
        outcome = await reconcile(body, memo, 0)
        for key, value in outcome.status.items():
            patch.status[key] = value

    @kopf.on.delete(*resource, id="delete", registry=registry)
    async def delete_handler(body: kopf.Body, memo: kopf.Memo, retry: int, **_: Any) -> None:
        outcome = await asyncio.to_thread(
            delete_receiver,
            ReceiverResource.from_body(body),
            topic_admin_factory(_memo_topics(memo)),
            retry=retry,
            backoff_base=config.backoff_base_seconds,
            backoff_max=config.backoff_max_seconds,
        )
        _post_events(body, outcome)
        if outcome.retry_after is not None:
            raise kopf.TemporaryError(outcome.error or "retrying", delay=outcome.retry_after)

    async def reconcile_owner(namespace: str, owner: str, memo: kopf.Memo) -> None:
        children = _memo_children(memo)
        body = await asyncio.to_thread(children.get, f"{GROUP}/{VERSION}", KIND, namespace, owner)
        if body is None or (body.get("metadata") or {}).get("deletionTimestamp"):
            return
        outcome = await reconcile(body, memo, 0)
        if outcome.status and isinstance(children, KubernetesChildren):
            await asyncio.to_thread(children.patch_status, f"{GROUP}/{VERSION}", KIND, namespace, owner, outcome.status)

    labels: dict[str, Any] = {"app.kubernetes.io/managed-by": MANAGED_BY, OWNER_LABEL: kopf.PRESENT}
    for group, version, plural in _WATCHED_CHILDREN:

        @kopf.on.event(group, version, plural, labels=labels, id=f"child-{plural}", registry=registry)
        async def child_changed(type: str, body: kopf.Body, memo: kopf.Memo, namespace: str | None, **_: Any) -> None:
            owners = [ref for ref in body.get("metadata", {}).get("ownerReferences") or [] if ref.get("kind") == KIND]
            if not owners or namespace is None:
                return
            settled = False
            if body.get("kind") == "Deployment" and type == "MODIFIED":
                # Reconcile once the Deployment controller has seen the latest change (a hand edit is then
                # reverted, and readiness reaches the owner's status without waiting for the resync).
                status = body.get("status") or {}
                settled = status.get("observedGeneration") == body.get("metadata", {}).get("generation")
            if type == "DELETED" or settled:
                await reconcile_owner(namespace, str(owners[0].get("name")), memo)
