"""The broker's CLIENT_METRICS config format, both ways (pure functions, no I/O).

A subscription is three configs on a CLIENT_METRICS resource: `metrics` (comma-separated metric-name
prefixes, `*` = all), `interval.ms` and `match` (comma-separated `selector=regex`, selectors in
snake_case). `desired_configs` turns a spec into them; `parse_configs` reads them back (for drift
detection and for `kct client-metrics`, which turns existing subscriptions into resources).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kct.api.subscription import DEFAULT_INTERVAL_MS, MATCH_SELECTOR_KEYS, ClientMetricsSubscriptionSpec

__all__ = [
    "INTERVAL",
    "MANAGED_CONFIGS",
    "MATCH",
    "METRICS",
    "ConfigChanges",
    "ParsedSubscription",
    "config_changes",
    "desired_configs",
    "parse_configs",
]

METRICS: Final = "metrics"
INTERVAL: Final = "interval.ms"
MATCH: Final = "match"
MANAGED_CONFIGS: Final = (METRICS, INTERVAL, MATCH)

_SNAKE_TO_CAMEL: Final = {snake: camel for camel, snake in MATCH_SELECTOR_KEYS.items()}


def desired_configs(spec: ClientMetricsSubscriptionSpec) -> dict[str, str]:
    """The CLIENT_METRICS configs that make the broker follow `spec`. `match` is absent when the spec
    selects every client (the caller DELETEs it then)."""
    configs = {METRICS: ",".join(spec.metrics), INTERVAL: str(spec.interval_ms)}
    selectors = spec.match.selectors() if spec.match is not None else {}
    if selectors:
        configs[MATCH] = ",".join(f"{MATCH_SELECTOR_KEYS[key]}={regex}" for key, regex in selectors.items())
    return configs


@dataclass(frozen=True)
class ParsedSubscription:
    """CLIENT_METRICS configs read back into spec terms. `unknown` keeps what we could not map."""

    metrics: tuple[str, ...] = ()
    interval_ms: int | None = None
    match: dict[str, str] = field(default_factory=dict)  # camelCase selector -> regex
    unknown: dict[str, str] = field(default_factory=dict)

    def comparable(self) -> tuple[tuple[str, ...], int, tuple[tuple[str, str], ...]]:
        """What matters for equality with the spec (order of selectors does not)."""
        return (self.metrics, self.interval_ms or DEFAULT_INTERVAL_MS, tuple(sorted(self.match.items())))

    def to_spec(self, subscription_name: str | None = None) -> dict[str, Any]:
        """A ClientMetricsSubscription spec (camelCase dict) equivalent to these configs."""
        spec: dict[str, Any] = {"metrics": list(self.metrics)}
        spec["intervalMs"] = self.interval_ms if self.interval_ms is not None else DEFAULT_INTERVAL_MS
        if self.match:
            spec["match"] = dict(self.match)
        if subscription_name is not None:
            spec["subscriptionName"] = subscription_name
        return spec


def _split_list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def parse_configs(configs: Mapping[str, str]) -> ParsedSubscription:
    metrics = tuple(_split_list(configs.get(METRICS, "")))
    interval: int | None = None
    raw_interval = configs.get(INTERVAL)
    unknown: dict[str, str] = {}
    if raw_interval is not None:
        try:
            interval = int(raw_interval)
        except ValueError:
            unknown[INTERVAL] = raw_interval
    match: dict[str, str] = {}
    for item in _split_list(configs.get(MATCH, "")):
        key, sep, regex = item.partition("=")
        camel = _SNAKE_TO_CAMEL.get(key.strip())
        if sep and camel is not None:
            match[camel] = regex.strip()
        else:
            unknown[f"{MATCH}:{item}"] = item
    for key, value in configs.items():
        if key not in MANAGED_CONFIGS:
            unknown[key] = value
    return ParsedSubscription(metrics=metrics, interval_ms=interval, match=match, unknown=unknown)


@dataclass(frozen=True)
class ConfigChanges:
    """One IncrementalAlterConfigs worth of changes."""

    set_configs: dict[str, str]
    delete_configs: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.set_configs or self.delete_configs)


def config_changes(desired: Mapping[str, str], actual: Mapping[str, str]) -> ConfigChanges:
    """What to send so that `actual` (as described by the broker) becomes `desired`. Values are
    compared in spec terms, so `a, b` equals `a,b` and selector order does not matter."""
    want = parse_configs(desired)
    have = parse_configs(actual)
    set_configs: dict[str, str] = {}
    if want.metrics != have.metrics or METRICS not in actual:
        set_configs[METRICS] = desired[METRICS]
    if want.interval_ms != have.interval_ms or INTERVAL not in actual:
        set_configs[INTERVAL] = desired[INTERVAL]
    if MATCH in desired and sorted(want.match.items()) != sorted(have.match.items()):
        set_configs[MATCH] = desired[MATCH]
    delete = tuple(key for key in MANAGED_CONFIGS if key not in desired and actual.get(key))
    return ConfigChanges(set_configs=set_configs, delete_configs=delete)
