"""KIP-714 "Private metrics": which attribute keys never reach the topic.

Clients must not expose their host, OS, process, runtime environment or credentials to the Kafka operator.
Our own metrics (librdkafka, the Java client) do not, but any OTLP sender can, so the receiver drops such
attributes before storing. Decisions are cached per key: a fleet uses a few dozen distinct keys, so the
patterns run once per key, not once per attribute.

Walking every data point's attributes in Python costs ~2.5 us per point (most of a push's CPU), so the
receiver first asks about the distinct keys its native scan collected (`keeps_all_raw`, decisions cached
per raw key): when every key is kept (the usual case for Kafka clients' metrics) nothing is walked.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, MutableSequence
from typing import Any

from kct.receiver.config import PrivacyConfig

__all__ = ["AttributeFilter"]

_CACHE_LIMIT = 4096


def _compile(patterns: Iterable[str]) -> re.Pattern[str] | None:
    parts = [fnmatch.translate(p) for p in patterns]
    return re.compile("|".join(parts)) if parts else None


class AttributeFilter:
    """Decides, per attribute key, keep or drop; and drops from a repeated KeyValue field in place."""

    def __init__(self, config: PrivacyConfig) -> None:
        self._allow = _compile(config.allow)
        self._deny = _compile(config.deny)
        self._default_keep = config.default_action == "keep"
        self.check_data_points = config.check_data_point_attributes
        self._decisions: dict[str, bool] = {}
        self._raw_decisions: dict[bytes, bool] = {}

    def keeps(self, key: str) -> bool:
        decision = self._decisions.get(key)
        if decision is None:
            if self._allow is not None and self._allow.match(key):
                decision = True
            elif self._deny is not None and self._deny.match(key):
                decision = False
            else:
                decision = self._default_keep
            if len(self._decisions) >= _CACHE_LIMIT:
                self._decisions.clear()  # senders inventing keys must not grow memory
            self._decisions[key] = decision
        return decision

    def keeps_all_raw(self, keys: Iterable[bytes]) -> bool:
        """True when every key (UTF-8 bytes, as on the wire) is kept; decisions cached per raw key."""
        raw = self._raw_decisions
        for key in keys:
            decision = raw.get(key)
            if decision is None:
                decision = self.keeps(key.decode("utf-8", "surrogateescape"))
                if len(raw) >= _CACHE_LIMIT:
                    raw.clear()  # senders inventing keys must not grow memory
                raw[key] = decision
            if not decision:
                return False
        return True

    def filter(self, attributes: MutableSequence[Any]) -> int:
        """Remove the private entries of a repeated `KeyValue` field; return how many were removed."""
        if not attributes:
            return 0
        decisions = self._decisions
        drop = [i for i, kv in enumerate(attributes) if not decisions.get(kv.key) and not self.keeps(kv.key)]
        for i in reversed(drop):
            del attributes[i]
        return len(drop)
