"""Byte-rate and push-rate quotas: KIP-13 measurement, KIP-257 entity resolution.

Measurement (KIP-13). A rate is measured over N samples of one window each (10 x 1 s by default). The
elapsed time is measured from the start of the oldest live sample and counted as at least N-1 full
windows, as Kafka's `Rate` does, so a fresh client is not throttled for a single burst. When a push would
take the rate above the quota Q, it is refused with

    delay = (total in the windows, this push included - Q x elapsed) / Q

which is KIP-13's "(overall produced in window - quota bound) / quota limit per second": with 5 MB/s,
10 windows, 5 MB/s for 9 s then 15 MB -> (60 - 50) / 5 = 2 s. Kafka appends then delays the response;
an HTTP receiver cannot hold the sender, so it refuses with 429 and Retry-After = the delay, and the
refused push is not counted.

Resolution (KIP-257). The quota for a push with principal `user` and client id `client` is the first of,
most specific first,

    1 <user, client>   2 <user, default client>   3 <user>
    4 <default user, client>   5 <default user, default client>   6 <default user>
    7 <client>   8 <default client>   9 the receiver's default (quotas.defaultByteRate / defaultPushRate)

that sets that quota type. Who shares the measured rate follows the level, as Kafka's metric tags do:
levels 1, 2, 4, 5 measure per (user, client); 3 and 6 per user (all its clients share); 7, 8 and 9 per
client id (all users share). Byte and push rates are resolved independently.
"""

from __future__ import annotations

import logging
import math
import os
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import Literal

from kct.receiver.config import DEFAULT_ENTITY, ConfigError, QuotaOverride, QuotasConfig, load_quota_overrides
from kct.receiver.errors import TooManyRequests

__all__ = [
    "QuotaKind",
    "QuotaLevel",
    "QuotaManager",
    "ResolvedQuota",
    "WindowedRate",
    "throttle_delay_ms",
]

log = logging.getLogger(__name__)

QuotaKind = Literal["byte_rate", "push_rate"]
_KINDS: tuple[QuotaKind, ...] = ("byte_rate", "push_rate")


class QuotaLevel(IntEnum):
    """KIP-257 precedence, most specific first (the value is the rank)."""

    USER_CLIENT = 1
    USER_DEFAULT_CLIENT = 2
    USER = 3
    DEFAULT_USER_CLIENT = 4
    DEFAULT_USER_DEFAULT_CLIENT = 5
    DEFAULT_USER = 6
    CLIENT = 7
    DEFAULT_CLIENT = 8
    RECEIVER_DEFAULT = 9


def throttle_delay_ms(total: float, quota_per_s: float, elapsed_ms: float) -> float:
    """KIP-13's delay: how long until `total` over `elapsed_ms` fits a quota of `quota_per_s` (0 if it does)."""
    bound = quota_per_s * elapsed_ms / 1000.0
    if total <= bound:
        return 0.0
    return (total - bound) / quota_per_s * 1000.0


class WindowedRate:
    """A rate over `samples` windows of `window_ms` each (Kafka's SampledStat/Rate, aligned windows).

    O(1) per push: the live total and the oldest live window are kept, and recomputed from the N slots only
    when time enters another window (at most once per window per rate)."""

    __slots__ = ("_index", "_oldest", "_samples", "_seen", "_total", "_values", "_window_ms", "last_ms")

    def __init__(self, samples: int, window_ms: int) -> None:
        self._samples = samples
        self._window_ms = window_ms
        self._index = [-(10**18)] * samples  # window number held by each slot
        self._values = [0.0] * samples
        self.last_ms = 0.0
        self._seen = -(10**18)  # the window the cached total and oldest are for
        self._total = 0.0
        self._oldest: int | None = None  # oldest live window number; None = none live

    def _advance(self, now_ms: float) -> int:
        current = int(now_ms // self._window_ms)
        if current != self._seen:
            oldest_allowed = current - self._samples + 1
            live = [i for i, w in enumerate(self._index) if oldest_allowed <= w <= current]
            self._total = sum(self._values[i] for i in live)
            self._oldest = min((self._index[i] for i in live), default=None)
            self._seen = current
        return current

    def total(self, now_ms: float) -> float:
        self._advance(now_ms)
        return self._total

    def elapsed_ms(self, now_ms: float) -> float:
        """Time the rate is measured over: since the oldest live window began, at least N-1 windows."""
        current = self._advance(now_ms)
        oldest = current if self._oldest is None else self._oldest
        elapsed = now_ms - oldest * self._window_ms
        full_windows = int(elapsed // self._window_ms)
        minimum = self._samples - 1
        if full_windows < minimum:
            elapsed += (minimum - full_windows) * self._window_ms
        return elapsed

    def record(self, value: float, now_ms: float) -> None:
        current = self._advance(now_ms)
        slot = current % self._samples
        if self._index[slot] != current:
            # the slot held a window at least N old: not live, not in the cached total
            self._index[slot] = current
            self._values[slot] = 0.0
        self._values[slot] += value
        self._total += value
        if self._oldest is None:
            self._oldest = current
        self.last_ms = now_ms

    def delay_if_recorded(self, value: float, quota_per_s: float, now_ms: float) -> float:
        """The KIP-13 delay (ms) this rate would owe if `value` were recorded now; 0 when within quota."""
        return throttle_delay_ms(self.total(now_ms) + value, quota_per_s, self.elapsed_ms(now_ms))


@dataclass(frozen=True)
class ResolvedQuota:
    limit: float | None  # per second; None = unlimited
    level: QuotaLevel | None
    tags: tuple[str, str]  # (user, client id) the measured rate is shared by; "" = any


def _entity_key(user: str | None, client_id: str | None) -> tuple[str | None, str | None]:
    return (user, client_id)


class QuotaManager:
    """Resolves and enforces byte-rate and push-rate quotas per push."""

    def __init__(self, config: QuotasConfig) -> None:
        self._config = config
        self._inline = tuple(config.overrides)
        self._file: tuple[QuotaOverride, ...] = ()
        self._table: dict[tuple[str | None, str | None], QuotaOverride] = {}
        self._resolved: dict[tuple[QuotaKind, str, str], ResolvedQuota] = {}
        self._rates: OrderedDict[tuple[QuotaKind, str, str], WindowedRate] = OrderedDict()
        self._file_stamp: tuple[int, int, int] | None = None
        self.reloads = 0
        self.reload_errors = 0
        self._rebuild()

    # -- configuration ---------------------------------------------------------------------------
    def _rebuild(self) -> None:
        table: dict[tuple[str | None, str | None], QuotaOverride] = {}
        for override in (*self._inline, *self._file):  # file entries win over inline ones
            table[_entity_key(override.user, override.client_id)] = override
        self._table = table
        self._resolved.clear()

    def set_file_overrides(self, overrides: Iterable[QuotaOverride]) -> None:
        self._file = tuple(overrides)
        self._rebuild()

    def reload_if_changed(self) -> bool:
        """Re-read `quotas.overridesFile` when it changed (mtime, inode or size); keep the old on errors."""
        path = self._config.overrides_file
        if path is None:
            return False
        try:
            st = os.stat(path)
        except OSError as exc:
            if self._file_stamp is not None:
                log.warning("quota overrides file unreadable, keeping the last good one",
                            extra={"path": path, "error": str(exc)})
                self._file_stamp = None
                self.reload_errors += 1
            return False
        stamp = (st.st_mtime_ns, st.st_ino, st.st_size)
        if stamp == self._file_stamp:
            return False
        self._file_stamp = stamp
        try:
            loaded = load_quota_overrides(path)
        except ConfigError as exc:
            self.reload_errors += 1
            log.error("quota overrides file invalid, keeping the last good one",
                      extra={"path": path, "error": str(exc)})
            return False
        self.set_file_overrides(loaded.overrides)
        self.reloads += 1
        log.info("quota overrides loaded", extra={"path": path, "overrides": len(loaded.overrides)})
        return True

    # -- resolution ------------------------------------------------------------------------------
    def resolve(self, kind: QuotaKind, user: str, client_id: str) -> ResolvedQuota:
        key = (kind, user, client_id)
        cached = self._resolved.get(key)
        if cached is not None:
            return cached
        d = DEFAULT_ENTITY
        candidates: tuple[tuple[QuotaLevel, tuple[str | None, str | None], tuple[str, str]], ...] = (
            (QuotaLevel.USER_CLIENT, (user, client_id), (user, client_id)),
            (QuotaLevel.USER_DEFAULT_CLIENT, (user, d), (user, client_id)),
            (QuotaLevel.USER, (user, None), (user, "")),
            (QuotaLevel.DEFAULT_USER_CLIENT, (d, client_id), (user, client_id)),
            (QuotaLevel.DEFAULT_USER_DEFAULT_CLIENT, (d, d), (user, client_id)),
            (QuotaLevel.DEFAULT_USER, (d, None), (user, "")),
            (QuotaLevel.CLIENT, (None, client_id), ("", client_id)),
            (QuotaLevel.DEFAULT_CLIENT, (None, d), ("", client_id)),
        )
        resolved = None
        for level, entity, tags in candidates:
            override = self._table.get(entity)
            if override is not None:
                limit = override.byte_rate if kind == "byte_rate" else override.push_rate
                if limit is not None:
                    resolved = ResolvedQuota(limit, level, tags)
                    break
        if resolved is None:
            limit = self._config.default_byte_rate if kind == "byte_rate" else self._config.default_push_rate
            resolved = ResolvedQuota(
                limit, QuotaLevel.RECEIVER_DEFAULT if limit is not None else None, ("", client_id)
            )
        if len(self._resolved) >= self._config.max_tracked_entities:
            self._resolved.clear()
        self._resolved[key] = resolved
        return resolved

    # -- enforcement -----------------------------------------------------------------------------
    def _rate(self, key: tuple[QuotaKind, str, str], now_ms: float) -> WindowedRate:
        rates = self._rates
        rate = rates.get(key)
        if rate is None:
            rate = WindowedRate(self._config.window_count, self._config.window_size_ms)
            # touched now: else the lookup of this push's other quota kind would drop it as idle before it
            # records anything, and this kind's rate would start from zero on every push (never throttle)
            rate.last_ms = now_ms
            rates[key] = rate
        else:
            rates.move_to_end(key)
        # A rate untouched for N windows measures 0: dropping it loses nothing.
        horizon = now_ms - self._config.window_count * self._config.window_size_ms
        while rates:
            oldest_key, oldest = next(iter(rates.items()))
            if oldest.last_ms >= horizon and len(rates) <= self._config.max_tracked_entities:
                break
            if oldest is rate:
                break
            del rates[oldest_key]
        return rate

    def __len__(self) -> int:
        return len(self._rates)

    def admit(self, user: str, client_id: str, nbytes: int, now_ms: float) -> None:
        """Count one push of `nbytes` or raise TooManyRequests with the KIP-13 delay as Retry-After."""
        if not self._config.enabled:
            return
        pending: list[tuple[WindowedRate, float]] = []
        worst: tuple[float, QuotaKind, ResolvedQuota] | None = None
        for kind in _KINDS:
            resolved = self.resolve(kind, user, client_id)
            if resolved.limit is None:
                continue
            value = float(nbytes) if kind == "byte_rate" else 1.0
            rate = self._rate((kind, *resolved.tags), now_ms)
            delay = rate.delay_if_recorded(value, resolved.limit, now_ms)
            if delay > 0 and (worst is None or delay > worst[0]):
                worst = (delay, kind, resolved)
            pending.append((rate, value))
        if worst is not None:
            delay, kind, resolved = worst
            assert resolved.level is not None
            raise TooManyRequests(
                f"quota_{kind}",
                f"{kind.replace('_', '-')} quota {resolved.limit:g}/s for user {user!r} client id "
                f"{client_id!r} ({resolved.level.name.lower()}) exceeded; retry in {delay / 1000:.1f} s",
                retry_after_s=max(1, math.ceil(delay / 1000.0)),
            )
        for rate, value in pending:
            rate.record(value, now_ms)
