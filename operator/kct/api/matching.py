"""Which clients a ClientMetricsSubscription applies to, by the broker's own rule.

One function for everyone who asks (the `kubectl kct` plugin today, subscription status next), so what we
show can never disagree with what the broker does. The broker (ClientMetricsInstanceMetadata.isMatch,
KIP-714) matches a client when every selector in `match` matches: each value is a regular expression
matched against the *whole* label (Java's `Matcher.matches()`, RE2/J on recent brokers, so RE2 here); a
label the client does not have is no match; no selectors at all match every client.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import re2

from kct.api.subscription import MATCH_SELECTOR_KEYS

__all__ = ["SelectorOutcome", "SubscriptionMatch", "broker_selectors", "match_client", "matches"]

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False


@dataclass(frozen=True)
class SelectorOutcome:
    """One selector tried on one client: its broker key, the regex, the client's value (None: absent)."""

    key: str
    regex: str
    value: str | None
    matched: bool


@dataclass(frozen=True)
class SubscriptionMatch:
    matched: bool
    selectors: tuple[SelectorOutcome, ...]


@lru_cache(maxsize=1024)
def _compiled(regex: str) -> Any:
    try:
        return re2.compile(regex, _OPTIONS)
    except re2.error:
        return None  # the broker refuses such a subscription: it matches nobody


def broker_selectors(match: Mapping[str, str] | None) -> dict[str, str]:
    """A spec's `match` (camelCase keys, as in the CR) as broker keys (`clientId` -> `client_id`); unknown
    keys are kept as given, so they fail to match rather than silently match everything."""
    return {MATCH_SELECTOR_KEYS.get(key, key): value for key, value in (match or {}).items() if value is not None}


def match_client(selectors: Mapping[str, str], labels: Mapping[str, str | None]) -> SubscriptionMatch:
    """Whether the client with these KIP-714 `labels` (broker keys: `client_id`, `client_software_name`, ...)
    matches a subscription's `selectors` (broker keys), and how each selector fared."""
    outcomes = []
    for key, regex in selectors.items():
        value = labels.get(key)
        pattern = _compiled(regex)
        matched = value is not None and pattern is not None and pattern.fullmatch(value) is not None
        outcomes.append(SelectorOutcome(key, regex, value, matched))
    return SubscriptionMatch(all(o.matched for o in outcomes), tuple(outcomes))


# (regex, value) -> verdict, for `matches`: the operator asks the same questions every interval (each
# subscription, each live client), and a dict lookup is ~50x cheaper than the RE2 binding's fullmatch call.
# Bounded by clearing when full (the next interval refills it).
_VERDICTS_MAX = 200_000
_verdicts: dict[tuple[str, str], bool] = {}


def _verdict(regex: str, value: str) -> bool:
    key = (regex, value)
    found = _verdicts.get(key)
    if found is None:
        pattern = _compiled(regex)
        found = pattern is not None and pattern.fullmatch(value) is not None
        if len(_verdicts) >= _VERDICTS_MAX:
            _verdicts.clear()
        _verdicts[key] = found
    return found


def matches(selectors: Mapping[str, str], labels: Mapping[str, str | None]) -> bool:
    """`match_client(selectors, labels).matched`, without the per-selector account: the same rule, for
    counting many clients (the operator's status.clients) where only the verdict is wanted."""
    for key, regex in selectors.items():
        value = labels.get(key)
        if value is None or not _verdict(regex, value):
            return False
    return True
