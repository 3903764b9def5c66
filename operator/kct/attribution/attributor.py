"""One push's attribution: the pod index first, then the rules, else ambiguous or unattributed.

The precedence (documented on `AttributionConfig`): the address is evidence of who sent a push, a rule a
declaration for when there is none, so a pod that held the address wins over any rule; rules are tried in
list order and the first that matches wins; an address shared by hostNetwork pods is `ambiguous` (counted,
nothing added) unless a rule names the client.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Final, Literal

from kct.attribution.config import AttributionConfig, AttributionRule
from kct.attribution.index import Attributes, PodIndex

__all__ = ["Attribution", "Attributor", "Outcome"]

Outcome = Literal["pod", "rule", "ambiguous", "unattributed"]


@dataclass(frozen=True, slots=True)
class Attribution:
    outcome: Outcome
    attributes: Attributes = ()


_AMBIGUOUS: Final = Attribution("ambiguous")
_UNATTRIBUTED: Final = Attribution("unattributed")


def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile("".join(".*" if part == "*" else re.escape(part) for part in re.split(r"(\*)", pattern)))


class _Rule:
    __slots__ = ("attribution", "client_id", "principal")

    def __init__(self, rule: AttributionRule) -> None:
        self.principal = _glob(rule.principal) if rule.principal is not None else None
        self.client_id = _glob(rule.client_id) if rule.client_id is not None else None
        self.attribution = Attribution("rule", tuple(sorted(rule.attributes.items())))

    def matches(self, principal: str, client_id: str) -> bool:
        return (self.principal is None or self.principal.fullmatch(principal) is not None) and (
            self.client_id is None or self.client_id.fullmatch(client_id) is not None
        )


class Attributor:
    """Attributes pushes from the pod index (fed by a watch) and the configured rules."""

    def __init__(self, config: AttributionConfig, index: PodIndex | None = None) -> None:
        self.config = config
        self.index = index if index is not None else PodIndex(config)
        self._rules = tuple(_Rule(rule) for rule in config.rules)
        # Rule matching is a regex per rule; the same few (principal, client id) pairs push over and over.
        self._match_rule = lru_cache(maxsize=4096)(self._first_rule)

    def attribute(self, address: str | None, principal: str | None, client_id: str | None, at_ms: int) -> Attribution:
        found = self.index.lookup(address, at_ms) if address else None
        if found is not None and found.outcome == "pod":
            return Attribution("pod", found.attributes)
        if self._rules:
            rule = self._match_rule(principal or "", client_id or "")
            if rule is not None:
                return rule
        if found is not None and found.outcome == "ambiguous":
            return _AMBIGUOUS
        return _UNATTRIBUTED

    def _first_rule(self, principal: str, client_id: str) -> Attribution | None:
        return next((r.attribution for r in self._rules if r.matches(principal, client_id)), None)
