"""`status.clients` and the `ClientsMatched` condition of one ClientMetricsSubscription, without kopf.

`clients_outcome` is a pure function of the subscription as last seen, the census's live clients and the
time: it returns only the status fields that changed (an empty patch when nothing did, so thousands of
subscriptions ticking every few seconds write nothing while their clients stay as they are) and the
Warning event to post when a subscription has matched nothing for longer than the warning period.

`ClientsMatched` is a condition of its own and `Ready` is never touched: `kubectl wait --for=condition=Ready`
and kstatus keep meaning "the broker has the configs". The condition's message carries no count, so it
changes only on a transition; the counts live in `status.clients`. While nothing matches, the condition is
Unknown (AwaitingClients) and its lastTransitionTime is when the matches stopped: the warning period counts
from there, across operator restarts, without a clock of our own. `lastPushTime` alone moves with every
push, so on its own it is rewritten at most once per `push_time_step_s`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kct.api.client_census import ClientsSummary, summarize
from kct.api.matching import broker_selectors
from kct.api.status import SubscriptionClients
from kct.controller.conditions import ConditionStatus, ConditionType, Reason, find_condition, set_condition
from kct.controller.kernel import Event, Outcome
from kct.controller.resource import ResourceView
from kct.otlp.clients_doc import ClientEntry

__all__ = ["ClientsPolicy", "clients_outcome", "clients_status"]


@dataclass(frozen=True)
class ClientsPolicy:
    """How long nothing may match before ClientsMatched=False and a Warning, and how stale `lastPushTime`
    may get before it alone is worth a write."""

    warn_after_s: float = 600.0
    push_time_step_s: float = 60.0


def _rfc3339(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(stamp: Any) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return None


def clients_status(summary: ClientsSummary, left_out: int) -> dict[str, Any]:
    """`status.clients` as the CRD's model writes it."""
    fields: dict[str, Any] = {
        "matched": summary.matched,
        "bySoftware": [{"name": n, "version": v, "count": c} for n, v, c in summary.by_software],
        "topWorkloads": [{"workload": w, "count": c} for w, c in summary.top_workloads],
    }
    if summary.last_push_ms is not None:
        fields["lastPushTime"] = _rfc3339(summary.last_push_ms)
    if left_out:
        fields["leftOut"] = left_out
    return SubscriptionClients.model_validate(fields).to_kube()


def _worth_writing(new: Mapping[str, Any], old: Mapping[str, Any] | None, step_s: float) -> bool:
    if old is None:
        return True
    if {k: v for k, v in new.items() if k != "lastPushTime"} != {k: v for k, v in old.items() if k != "lastPushTime"}:
        return True
    new_time, old_time = _parse(new.get("lastPushTime")), _parse(old.get("lastPushTime"))
    if new_time is None or old_time is None:
        return new.get("lastPushTime") != old.get("lastPushTime")
    return abs((new_time - old_time).total_seconds()) >= step_s


def _condition(
    previous: Mapping[str, Any] | None, matched: int | None, policy: ClientsPolicy, now: dt.datetime
) -> tuple[ConditionStatus, Reason, str]:
    """The ClientsMatched condition: `matched` None means no receiver was read lately."""
    if matched is None:
        return "Unknown", Reason.RECEIVERS_SILENT, "no receiver's client registry was read lately"
    if matched:
        return "True", Reason.CLIENTS_MATCHED, "live clients match spec.match"
    waiting: tuple[ConditionStatus, Reason, str] = (
        "Unknown", Reason.AWAITING_CLIENTS,
        f"no live client matches spec.match; a Warning follows after {policy.warn_after_s:g} s without one",
    )
    reason = (previous or {}).get("reason")
    if reason == Reason.NO_MATCHING_CLIENTS:
        return "False", Reason.NO_MATCHING_CLIENTS, str((previous or {}).get("message", ""))
    if reason != Reason.AWAITING_CLIENTS:
        return waiting  # the wait starts now
    since = _parse((previous or {}).get("lastTransitionTime"))
    if since is None or (now - since).total_seconds() < policy.warn_after_s:
        return waiting
    return (
        "False", Reason.NO_MATCHING_CLIENTS,
        f"no live client has matched spec.match for more than {policy.warn_after_s:g} s "
        f"(since {(previous or {}).get('lastTransitionTime')}): check spec.match against `kubectl kct clients`",
    )


def clients_outcome(
    resource: ResourceView,
    clients: Iterable[ClientEntry] | None,
    left_out: int,
    policy: ClientsPolicy,
    now: dt.datetime,
) -> Outcome:
    """The status fields that changed (none: an empty patch) and the Warning to post; `clients` None when no
    receiver answered lately (the counts are then left as they were and the condition says Unknown)."""
    status: dict[str, Any] = {}
    matched: int | None = None
    if clients is not None:
        match = resource.spec.get("match")
        summary = summarize(clients, broker_selectors(match if isinstance(match, Mapping) else None))
        matched = summary.matched
        fresh = clients_status(summary, left_out)
        old = resource.status.get("clients")
        if _worth_writing(fresh, old, policy.push_time_step_s):
            # A merge patch keeps the keys it does not name: null the ones that went (leftOut, lastPushTime).
            status["clients"] = {**{key: None for key in old or {} if key not in fresh}, **fresh}
    conditions = resource.status.get("conditions") or []
    previous = find_condition(conditions, ConditionType.CLIENTS_MATCHED)
    state, reason, message = _condition(previous, matched, policy, now)
    events: tuple[Event, ...] = ()
    if previous is None or (previous.get("status"), previous.get("reason"), previous.get("message")) != (
        state, str(reason), message
    ):
        restart = previous is not None and previous.get("reason") != reason
        base = [c for c in conditions if c.get("type") != ConditionType.CLIENTS_MATCHED] if restart else conditions
        status["conditions"] = set_condition(base, ConditionType.CLIENTS_MATCHED, state, reason, message, now=now)
        if reason == Reason.NO_MATCHING_CLIENTS:
            events = (Event("Warning", Reason.NO_MATCHING_CLIENTS, message),)
    return Outcome(status, events)
