"""Quotas: KIP-13 window arithmetic and delay, KIP-257 entity precedence, overrides reloaded live."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kct.receiver.config import QuotaOverride, QuotasConfig
from kct.receiver.errors import TooManyRequests
from kct.receiver.quota import QuotaLevel, QuotaManager, WindowedRate, throttle_delay_ms

MB = 1_000_000


def test_kip13_delay_formula_example() -> None:
    """Given KIP-13's example (5 MB/s quota, 10 one-second windows, 5 MB/s for 9 s then a 15 MB batch:
    60 MB in the window), then the delay is (60 - 50) / 5 = 2 s."""
    assert throttle_delay_ms(60 * MB, 5 * MB, 10_000) == pytest.approx(2000.0)


def test_kip13_example_through_the_windowed_rate() -> None:
    """Given a 10 x 1 s windowed rate fed 5 MB in each of seconds 0..8, when 15 MB more would arrive at the
    very end of second 9, then the delay owed is 2 s, as in KIP-13."""
    rate = WindowedRate(samples=10, window_ms=1000)
    for second in range(9):
        rate.record(5 * MB, second * 1000 + 500)
    now = 9_999.0
    assert rate.total(now) == 45 * MB
    assert rate.delay_if_recorded(15 * MB, 5 * MB, now) == pytest.approx(2000.0, abs=2.0)


def test_rate_within_quota_owes_nothing_and_old_windows_expire() -> None:
    """Given 4.9 MB/s for 10 s under a 5 MB/s quota, then no delay; 10 windows later the samples are gone."""
    rate = WindowedRate(samples=10, window_ms=1000)
    for second in range(10):
        rate.record(4.9 * MB, second * 1000)
    assert rate.delay_if_recorded(0, 5 * MB, 9_999) == 0.0
    assert rate.total(25_000) == 0.0


def test_fresh_rate_counts_at_least_n_minus_1_windows() -> None:
    """Given a new client, when a single burst arrives, then the rate is measured over >= 9 windows (as Kafka's
    Rate does), so a 40 MB first burst at 5 MB/s is allowed and a 50 MB one owes (50 - 45) / 5 = 1 s."""
    rate = WindowedRate(samples=10, window_ms=1000)
    assert rate.elapsed_ms(0) == 9000
    assert rate.delay_if_recorded(40 * MB, 5 * MB, 0) == 0.0
    assert rate.delay_if_recorded(50 * MB, 5 * MB, 0) == pytest.approx(1000.0)


# -- KIP-257 precedence ----------------------------------------------------------------------------------

D = "<default>"
ENTITIES: list[tuple[QuotaLevel, str | None, str | None]] = [
    (QuotaLevel.USER_CLIENT, "alice", "app"),
    (QuotaLevel.USER_DEFAULT_CLIENT, "alice", D),
    (QuotaLevel.USER, "alice", None),
    (QuotaLevel.DEFAULT_USER_CLIENT, D, "app"),
    (QuotaLevel.DEFAULT_USER_DEFAULT_CLIENT, D, D),
    (QuotaLevel.DEFAULT_USER, D, None),
    (QuotaLevel.CLIENT, None, "app"),
    (QuotaLevel.DEFAULT_CLIENT, None, D),
]


def _manager(levels: list[tuple[QuotaLevel, str | None, str | None]], default: float | None = None) -> QuotaManager:
    overrides = [QuotaOverride(user=u, client_id=c, byte_rate=float(level.value)) for level, u, c in levels]
    return QuotaManager(QuotasConfig(overrides=tuple(overrides), default_byte_rate=default))


@pytest.mark.parametrize("present_from", range(len(ENTITIES)))
def test_kip257_most_specific_entity_wins(present_from: int) -> None:
    """Given quotas configured for the entities from precedence rank `present_from + 1` down to 8, when user
    alice with client id app pushes, then the most specific configured one applies (its rank is its value)."""
    manager = _manager(ENTITIES[present_from:])
    resolved = manager.resolve("byte_rate", "alice", "app")
    assert resolved.level == ENTITIES[present_from][0]
    assert resolved.limit == float(ENTITIES[present_from][0].value)


def test_kip257_full_order_of_the_eight_combinations() -> None:
    """Given all 8 entity combinations configured, when removing the winner one at a time, then the winners
    come in Kafka's documented order, ending with the receiver's default, then unlimited."""
    remaining = list(ENTITIES)
    seen = []
    while remaining:
        resolved = _manager(remaining, default=99.0).resolve("byte_rate", "alice", "app")
        assert resolved.level is not None
        seen.append(resolved.level)
        remaining = [e for e in remaining if e[0] != resolved.level]
    assert seen == [level for level, _, _ in ENTITIES]
    assert _manager([], default=99.0).resolve("byte_rate", "alice", "app").level == QuotaLevel.RECEIVER_DEFAULT
    assert _manager([]).resolve("byte_rate", "alice", "app").limit is None


def test_other_users_and_clients_fall_to_defaults() -> None:
    """Given <alice, app>, <default user> and <default client> quotas, then bob/app gets <default user>,
    and alice/other gets <default user> too (user levels rank above client levels)."""
    manager = _manager([ENTITIES[0], ENTITIES[5], ENTITIES[7]])
    assert manager.resolve("byte_rate", "bob", "app").level == QuotaLevel.DEFAULT_USER
    assert manager.resolve("byte_rate", "alice", "other").level == QuotaLevel.DEFAULT_USER


def test_who_shares_a_measured_rate_follows_the_level() -> None:
    """Given a <user> quota, then all of that user's client ids share one measured rate; given a
    <default client> quota, then each client id has its own rate, shared across users."""
    user_level = QuotaManager(QuotasConfig(overrides=(QuotaOverride(user="alice", push_rate=1.0),)))
    assert user_level.resolve("push_rate", "alice", "a").tags == user_level.resolve("push_rate", "alice", "b").tags
    client_level = QuotaManager(QuotasConfig(overrides=(QuotaOverride(client_id=D, push_rate=1.0),)))
    assert client_level.resolve("push_rate", "u1", "a").tags == client_level.resolve("push_rate", "u2", "a").tags
    assert client_level.resolve("push_rate", "u1", "a").tags != client_level.resolve("push_rate", "u1", "b").tags


def test_byte_and_push_rates_resolve_independently() -> None:
    """Given <alice, app> with only a push rate and <default client> with only a byte rate, then each quota
    type takes its own most specific level."""
    manager = QuotaManager(QuotasConfig(overrides=(
        QuotaOverride(user="alice", client_id="app", push_rate=3.0),
        QuotaOverride(client_id=D, byte_rate=1000.0),
    )))
    assert manager.resolve("push_rate", "alice", "app").level == QuotaLevel.USER_CLIENT
    assert manager.resolve("byte_rate", "alice", "app").level == QuotaLevel.DEFAULT_CLIENT


def test_admit_refuses_with_kip13_retry_after_and_does_not_count_refused_pushes() -> None:
    """Given a 1000 B/s byte-rate quota (10 x 1 s windows), when 9000 B arrive at t=0 then 2000 B more, then
    the second is refused with Retry-After = ceil((11000 - 9000) / 1000) = 2 s and not counted."""
    manager = QuotaManager(QuotasConfig(default_byte_rate=1000.0))
    manager.admit("", "app", 9000, 0.0)
    with pytest.raises(TooManyRequests) as refused:
        manager.admit("", "app", 2000, 0.0)
    assert refused.value.retry_after_s == 2
    assert refused.value.reason == "quota_byte_rate"
    manager.admit("", "app", 0, 0.0)  # still within: the refused 2000 B were not recorded


def test_overrides_file_is_reloaded_without_restart(tmp_path: Path) -> None:
    """Given an overrides file, when it is rewritten (ConfigMap-style) then `reload_if_changed` picks up the
    new quota; an invalid rewrite keeps the last good overrides."""
    path = tmp_path / "quotas.yaml"
    path.write_text("overrides:\n  - clientId: app\n    pushRate: 5\n")
    manager = QuotaManager(QuotasConfig(overrides_file=str(path)))
    assert manager.reload_if_changed()
    assert manager.resolve("push_rate", "", "app").limit == 5.0
    assert not manager.reload_if_changed()  # unchanged
    tmp = tmp_path / "quotas.new"
    tmp.write_text("overrides:\n  - clientId: app\n    pushRate: 7\n  - user: '<default>'\n    byteRate: 1000000\n")
    os.replace(tmp, path)
    assert manager.reload_if_changed()
    assert manager.resolve("push_rate", "", "app").limit == 7.0
    assert manager.resolve("byte_rate", "bob", "app").level == QuotaLevel.DEFAULT_USER
    time.sleep(0.01)  # duration: the rewrite must get a later modification time than the last one
    path.write_text("overrides:\n  - clientId: app\n    pushRate: 'fast'\n")
    assert not manager.reload_if_changed()
    assert manager.resolve("push_rate", "", "app").limit == 7.0
    assert manager.reload_errors == 1


def _naive_total_and_elapsed(
    events: list[tuple[float, float]], now: float, samples: int, window: int
) -> tuple[float, float]:
    """KIP-13 from first principles: the sum over the last `samples` aligned windows, and the time since the
    oldest of those windows that holds a sample began, counted as at least samples - 1 windows."""
    current = int(now // window)
    live = [(int(t // window), v) for t, v in events if current - samples + 1 <= int(t // window) <= current]
    total = sum(v for _, v in live)
    oldest = min((w for w, _ in live), default=current)
    elapsed = now - oldest * window
    full = int(elapsed // window)
    if full < samples - 1:
        elapsed += (samples - 1 - full) * window
    return total, elapsed


def test_windowed_rate_incremental_total_matches_first_principles() -> None:
    """Given pseudo-random pushes over 60 s (gaps up to 3 s, so windows expire and are reused), then after every
    one the O(1) rate's total and elapsed time equal a from-scratch computation over all recorded pushes."""
    import random

    rnd = random.Random(714)
    rate = WindowedRate(samples=5, window_ms=1000)
    events: list[tuple[float, float]] = []
    now = 0.0
    while now < 60_000:
        now += rnd.choice((1.0, 10.0, 250.0, 999.0, 1000.0, 3000.0))
        value = float(rnd.randint(1, 1000))
        rate.record(value, now)
        events.append((now, value))
        probe = now + rnd.choice((0.0, 500.0, 4000.0))
        total, elapsed = _naive_total_and_elapsed(events, probe, 5, 1000)
        assert rate.total(probe) == pytest.approx(total)
        assert rate.elapsed_ms(probe) == pytest.approx(elapsed)
        now = probe


def test_byte_quota_accumulates_when_a_push_quota_is_set_too() -> None:
    """Given a byte-rate and a push-rate quota for the same client, when it pushes 1 MB at a time within the
    same second (50 s after the receiver started), then the byte rate accumulates across pushes and throttles
    after 9 MB (a fresh rate is measured over N-1 = 9 windows): a rate created by this very push must not be
    dropped as idle by the lookup of the push rate."""
    manager = QuotaManager(QuotasConfig(default_byte_rate=1 * MB, default_push_rate=1000.0))
    admitted = 0
    with pytest.raises(TooManyRequests) as refused:
        for _ in range(100):
            manager.admit("alice", "app", 1 * MB, 50_000.0)
            admitted += 1
    assert refused.value.reason == "quota_byte_rate"
    assert admitted == 9
