"""kopf handlers for ClientMetricsSubscription: thin adapters around `kct.controller.subscription`.

Every handler does the same: turn kopf's kwargs into a `SubscriptionResource` and the claims index
into `Claim`s, run the blocking reconcile in a thread (kafka-python blocks), then write the outcome:
status fields into `patch.status`, events with `kopf.event`, and `kopf.TemporaryError(delay=...)` when
Kafka should be retried. kopf applies the patch even when the handler raises, so the condition naming
the cause is visible while the retries go on.

Handlers are registered on an explicit registry by `register_subscription_handlers`, with the
resync interval and backoffs from `OperatorConfig`, so tests and `kct operator` pick their own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import kopf

from kct.api.crds import GROUP, VERSION
from kct.controller.kafka_clients import AdminPool
from kct.controller.subscription import (
    Claim,
    Outcome,
    SubscriptionResource,
    delete_subscription,
    reconcile_subscription,
)

__all__ = ["PLURAL", "OperatorConfig", "register_subscription_handlers"]

PLURAL = "clientmetricssubscriptions"
CLAIMS_INDEX = "cms_claims"
STORAGE_PREFIX = f"operator.{GROUP}"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OperatorConfig:
    resync_seconds: float = 60.0
    backoff_base_seconds: float = 2.0
    backoff_max_seconds: float = 60.0


def _claims(index: Any, name: str) -> list[Claim]:
    try:
        store: Iterable[Claim] = index[name]
    except KeyError:
        return []
    return list(store)


def _admins(memo: kopf.Memo) -> AdminPool:
    pool = memo.get("admins")
    if not isinstance(pool, AdminPool):
        raise RuntimeError("the operator's startup handler did not create the admin pool")
    return pool


def _apply(outcome: Outcome, body: kopf.Body, patch: kopf.Patch) -> None:
    for key, value in outcome.status.items():
        patch.status[key] = value
    for event in outcome.events:
        try:
            kopf.event(body, type=event.type, reason=event.reason, message=event.message[:1024])
        except Exception:  # events are best-effort; never fail a reconcile for them
            log.debug("posting event failed", exc_info=True)


def register_subscription_handlers(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    resource = (GROUP, VERSION, PLURAL)

    @kopf.index(*resource, id=CLAIMS_INDEX, registry=registry)
    def claims_index(body: kopf.Body, **_: Any) -> dict[str, Claim]:
        subscription = SubscriptionResource.from_body(body)
        return {subscription.subscription_name: subscription.claim()}

    # One lock per CLIENT_METRICS name: a resync already talking to Kafka when its resource (or a
    # rival claimant) is deleted must finish before the delete runs, or it would recreate the configs.
    locks: dict[str, asyncio.Lock] = {}

    async def reconcile(
        body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, retry: int, index: Any, resync: bool
    ) -> Outcome | None:
        subscription = SubscriptionResource.from_body(body)
        async with locks.setdefault(subscription.subscription_name, asyncio.Lock()):
            if body.metadata.get("deletionTimestamp"):
                return None  # the delete handler owns it now (kopf's body is a live view)
            outcome = await asyncio.to_thread(
                reconcile_subscription,
                subscription,
                _claims(index, subscription.subscription_name),
                _admins(memo),
                resync=resync,
                retry=retry,
                backoff_base=config.backoff_base_seconds,
                backoff_max=config.backoff_max_seconds,
            )
        _apply(outcome, body, patch)
        return outcome

    @kopf.on.login(id="login", registry=registry)
    def login(**kwargs: Any) -> Any:
        # In-cluster service account, else KUBECONFIG (kopf's own kubeconfig reader as a fallback).
        return kopf.login_via_client(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.startup(id="configure", registry=registry)
    def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        settings.persistence.finalizer = f"{GROUP}/finalizer"
        # kopf ignores, when diffing, every annotation under the prefix of its own storage; keep that
        # prefix apart from telemetry.kct.dev/paused so pausing and resuming trigger the handlers.
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=STORAGE_PREFIX)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix=STORAGE_PREFIX, key="last-handled-configuration"
        )
        settings.peering.standalone = True
        settings.posting.level = logging.WARNING
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        if not isinstance(memo.get("admins"), AdminPool):
            memo["admins"] = AdminPool.from_environment()

    @kopf.on.cleanup(id="close-admins", registry=registry)
    def close_admins(memo: kopf.Memo, **_: Any) -> None:
        _admins(memo).close()

    @kopf.on.resume(*resource, id="reconcile", registry=registry)
    @kopf.on.create(*resource, id="reconcile", registry=registry)
    @kopf.on.update(*resource, id="reconcile", registry=registry)
    async def reconcile_subscription_handler(
        body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, retry: int, **kwargs: Any
    ) -> None:
        outcome = await reconcile(body, patch, memo, retry, kwargs[CLAIMS_INDEX], resync=False)
        if outcome is not None and outcome.retry_after is not None:
            raise kopf.TemporaryError(outcome.error or "retrying", delay=outcome.retry_after)

    @kopf.timer(
        *resource,
        id="resync",
        interval=config.resync_seconds,
        initial_delay=config.resync_seconds,
        registry=registry,
    )
    async def resync(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **kwargs: Any) -> None:
        # No retries from the timer: the next tick is the retry, and the change handler has its own.
        await reconcile(body, patch, memo, 0, kwargs[CLAIMS_INDEX], resync=True)

    @kopf.on.delete(*resource, id="delete", registry=registry)
    async def delete_subscription_handler(body: kopf.Body, memo: kopf.Memo, retry: int, **kwargs: Any) -> None:
        subscription = SubscriptionResource.from_body(body)
        async with locks.setdefault(subscription.subscription_name, asyncio.Lock()):
            outcome = await asyncio.to_thread(
                delete_subscription,
                subscription,
                _claims(kwargs[CLAIMS_INDEX], subscription.subscription_name),
                _admins(memo),
                retry=retry,
                backoff_base=config.backoff_base_seconds,
                backoff_max=config.backoff_max_seconds,
            )
        for event in outcome.events:
            kopf.event(body, type=event.type, reason=event.reason, message=event.message)
        if outcome.retry_after is not None:
            raise kopf.TemporaryError(outcome.error or "retrying", delay=outcome.retry_after)
        if outcome.error:
            # Released with something left behind: say it in the log too, since events cannot be posted in
            # a namespace being deleted.
            kwargs["logger"].warning(outcome.error)
