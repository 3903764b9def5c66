"""Writing a reconcile's `Outcome` through kopf: the one place both controllers' handlers do it.

A handler runs the blocking reconcile in a thread, then `write_outcome` merges its status into kopf's
patch, posts its events (truncated to what the API server accepts; best-effort: an event that cannot be
posted never fails a reconcile) and, when the outcome asks for a retry, raises
`kopf.TemporaryError(delay=...)`. kopf applies the patch even when the handler raises, so the condition
naming the cause is visible while the retries go on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Final

import kopf

from kct.controller.kernel import Event, Outcome

__all__ = ["EVENT_MESSAGE_LIMIT", "post_events", "raise_for_retry", "write_outcome"]

EVENT_MESSAGE_LIMIT: Final = 1024
log = logging.getLogger(__name__)


def post_events(body: Any, events: Iterable[Event]) -> None:
    for event in events:
        try:
            kopf.event(body, type=event.type, reason=event.reason, message=event.message[:EVENT_MESSAGE_LIMIT])
        except Exception:  # events are best-effort; never fail a reconcile for them
            log.debug("posting event failed", exc_info=True)


def raise_for_retry(outcome: Outcome) -> None:
    if outcome.retry_after is not None:
        raise kopf.TemporaryError(outcome.error or "retrying", delay=outcome.retry_after)


def write_outcome(outcome: Outcome, body: Any, patch: kopf.Patch | None, *, retry: bool = True) -> None:
    """Status into `patch` (when there is one), events posted, then a retry raised if asked and `retry`."""
    if patch is not None:
        for key, value in outcome.status.items():
            patch.status[key] = value
    post_events(body, outcome.events)
    if retry:
        raise_for_retry(outcome)
