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
import time
from collections.abc import Iterable
from typing import Any

import kopf

from kct.api.crds import GROUP, VERSION
from kct.controller.kafka_clients import AdminPool
from kct.controller.kernel import KeyedLocks, OperatorConfig, Outcome
from kct.controller.kopf_outcome import write_outcome
from kct.controller.metrics import OperatorMetrics
from kct.controller.subscription import (
    Claim,
    SubscriptionResource,
    delete_subscription,
    reconcile_subscription,
)
from kct.kafka.port import ClientMetricsAdmin

__all__ = ["CLAIMS_INDEX", "PLURAL", "SubscriptionHandlers", "claims_index", "register_subscription_handlers"]

PLURAL = "clientmetricssubscriptions"
KIND = "ClientMetricsSubscription"
CLAIMS_INDEX = "cms_claims"
STORAGE_PREFIX = f"operator.{GROUP}"
log = logging.getLogger(__name__)




def _claims(index: Any, name: str) -> list[Claim]:
    try:
        store: Iterable[Claim] = index[name]
    except KeyError:
        return []
    return list(store)


def _admins(memo: kopf.Memo) -> AdminPool[ClientMetricsAdmin]:
    pool = memo.get("admins")
    if not isinstance(pool, AdminPool):
        raise RuntimeError("the operator's startup handler did not create the admin pool")
    admins: AdminPool[ClientMetricsAdmin] = pool
    return admins


def login(**kwargs: Any) -> Any:
    """In-cluster service account, else KUBECONFIG (kopf's own kubeconfig reader as a fallback)."""
    return kopf.login_via_client(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """Startup: kopf's settings (finalizer and storage under our domain, timeouts) and the admin pool."""
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


def close_admins(memo: kopf.Memo, **_: Any) -> None:
    _admins(memo).close()


def claims_index(body: kopf.Body, **_: Any) -> dict[str, Claim]:
    """The kopf index of who claims which CLIENT_METRICS name (ownership: oldest claim wins)."""
    subscription = SubscriptionResource.from_body(body)
    return {subscription.subscription_name: subscription.claim()}


class SubscriptionHandlers:
    """The ClientMetricsSubscription handlers, one method each, so each can be called alone (unit tests pass
    kopf's keyword arguments and an admin pool over the in-memory fake); `register` puts them on a registry."""

    def __init__(self, config: OperatorConfig, metrics: OperatorMetrics | None = None) -> None:
        self.config = config
        self.metrics = metrics if metrics is not None else OperatorMetrics()
        # One lock per CLIENT_METRICS name: a resync already talking to Kafka when its resource (or a
        # rival claimant) is deleted must finish before the delete runs, or it would recreate the configs.
        self.locks = KeyedLocks()

    def register(self, registry: kopf.OperatorRegistry) -> None:
        resource = (GROUP, VERSION, PLURAL)
        kopf.index(*resource, id=CLAIMS_INDEX, registry=registry)(claims_index)
        kopf.on.login(id="login", registry=registry)(login)
        kopf.on.startup(id="configure", registry=registry)(configure)
        kopf.on.cleanup(id="close-admins", registry=registry)(close_admins)
        for on in (kopf.on.resume, kopf.on.create, kopf.on.update):
            on(*resource, id="reconcile", registry=registry)(self.on_change)
        interval = self.config.resync_seconds
        kopf.timer(*resource, id="resync", interval=interval, initial_delay=interval, registry=registry)(self.resync)
        kopf.on.delete(*resource, id="delete", registry=registry)(self.on_delete)

    async def reconcile(self, body: kopf.Body, memo: kopf.Memo, retry: int, index: Any, resync: bool) -> Outcome | None:
        """Run the blocking reconcile in a thread, under the subscription name's lock; None when the
        resource is being deleted (the delete handler owns it then: kopf's body is a live view)."""
        subscription = SubscriptionResource.from_body(body)
        async with self.locks(subscription.subscription_name):
            if body.metadata.get("deletionTimestamp"):
                return None
            started = time.perf_counter()
            outcome = await asyncio.to_thread(
                reconcile_subscription,
                subscription,
                _claims(index, subscription.subscription_name),
                _admins(memo),
                resync=resync,
                retry=retry,
                backoff_base=self.config.backoff_base_seconds,
                backoff_max=self.config.backoff_max_seconds,
            )
        self.metrics.observe_reconcile(KIND, time.perf_counter() - started, outcome)
        return outcome

    async def on_change(self, body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, retry: int, **kwargs: Any) -> None:
        """create / update / resume: reconcile, write status and events, retry later when the outcome asks."""
        outcome = await self.reconcile(body, memo, retry, kwargs[CLAIMS_INDEX], resync=False)
        if outcome is not None:
            write_outcome(outcome, body, patch)

    async def resync(self, body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **kwargs: Any) -> None:
        """The timer: a difference found here is drift. No retries (the next tick is the retry)."""
        outcome = await self.reconcile(body, memo, 0, kwargs[CLAIMS_INDEX], resync=True)
        if outcome is not None:
            write_outcome(outcome, body, patch, retry=False)

    async def on_delete(self, body: kopf.Body, memo: kopf.Memo, retry: int, **kwargs: Any) -> None:
        subscription = SubscriptionResource.from_body(body)
        async with self.locks(subscription.subscription_name):
            outcome = await asyncio.to_thread(
                delete_subscription,
                subscription,
                _claims(kwargs[CLAIMS_INDEX], subscription.subscription_name),
                _admins(memo),
                retry=retry,
                backoff_base=self.config.backoff_base_seconds,
                backoff_max=self.config.backoff_max_seconds,
            )
        write_outcome(outcome, body, None)
        if outcome.error:
            # Released with something left behind: say it in the log too, since events cannot be posted in
            # a namespace being deleted.
            kwargs["logger"].warning(outcome.error)


def register_subscription_handlers(
    registry: kopf.OperatorRegistry, config: OperatorConfig, metrics: OperatorMetrics | None = None
) -> None:
    SubscriptionHandlers(config, metrics).register(registry)
