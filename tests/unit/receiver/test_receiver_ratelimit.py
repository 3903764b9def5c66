"""Per client instance push-interval rate limiting (KIP-714), with the broker's state lifetime."""

from __future__ import annotations

import gc

import pytest

from kct.receiver.config import RateLimitConfig
from kct.receiver.errors import TooManyRequests
from kct.receiver.ratelimit import PushIntervalLimiter


def _limiter(**kwargs: object) -> PushIntervalLimiter:
    return PushIntervalLimiter(RateLimitConfig.model_validate({"tolerance": 0.0, **kwargs}))


def test_push_before_interval_is_refused_with_time_left() -> None:
    """Given a 10 s interval, when the instance pushes at 0 s and 4 s, then the second is refused with
    Retry-After 6 s; at 10 s it is accepted."""
    limiter = _limiter()
    limiter.acquire("c1", 10_000, False, 0.0)
    with pytest.raises(TooManyRequests) as refused:
        limiter.acquire("c1", 10_000, False, 4_000.0)
    assert refused.value.retry_after_s == 6
    assert limiter.acquire("c1", 10_000, False, 10_000.0) is not None


def test_terminating_push_is_accepted_once() -> None:
    """Given a client that just pushed, when it pushes early with terminating=true, then that push is accepted
    but a consecutive early terminating push is refused (KIP-714)."""
    limiter = _limiter()
    limiter.acquire("c1", 10_000, False, 0.0)
    limiter.acquire("c1", 10_000, True, 1_000.0)
    with pytest.raises(TooManyRequests):
        limiter.acquire("c1", 10_000, True, 2_000.0)


def test_state_lives_max_60s_or_3x_interval() -> None:
    """Given intervals of 1 s and 30 s, then state lives 60 s and 90 s: MAX(60 s, 3 x interval)."""
    limiter = _limiter()
    assert limiter.ttl_ms(1_000) == 60_000
    assert limiter.ttl_ms(30_000) == 90_000
    limiter.acquire("short", 1_000, False, 0.0)
    limiter.acquire("long", 30_000, False, 0.0)
    limiter.acquire("other", 1_000, False, 61_000.0)  # expires "short"; "long" lives on
    assert len(limiter) == 2
    limiter.acquire("other2", 1_000, False, 91_000.0)
    assert len(limiter) == 2  # "long" expired at 90 s; "other" (until 121 s) and "other2" remain
    assert "long" not in limiter._states


def test_tolerance_absorbs_plugin_jitter() -> None:
    """Given tolerance 0.2 and a 10 s interval, then a push 8.5 s after the last is accepted, 7 s is not."""
    limiter = _limiter(tolerance=0.2)
    limiter.acquire("c1", 10_000, False, 0.0)
    limiter.acquire("c1", 10_000, False, 8_500.0)
    with pytest.raises(TooManyRequests):
        limiter.acquire("c1", 10_000, False, 15_500.0)


def test_release_rolls_back_a_failed_push() -> None:
    """Given an accepted push whose record then failed, when released, then the client may retry at once."""
    limiter = _limiter()
    limiter.acquire("c1", 10_000, False, 0.0)
    ticket = limiter.acquire("c1", 10_000, False, 10_000.0)
    limiter.release(ticket)
    assert limiter.acquire("c1", 10_000, False, 10_100.0) is not None


def test_tracked_instances_are_bounded() -> None:
    """Given a bound of 3 instances, when 5 push, then 3 are tracked and the 2 oldest were evicted."""
    limiter = _limiter(maxTrackedClients=3)
    for i in range(5):
        limiter.acquire(f"c{i}", 10_000, False, float(i))
    assert len(limiter) == 3 and limiter.evicted == 2


def test_pushes_without_interval_are_not_limited_unless_a_default_is_set() -> None:
    """Given no interval header, then no limit; with rateLimit.defaultIntervalMs, the default applies."""
    assert _limiter().acquire("c1", None, False, 0.0) is None
    limiter = _limiter(defaultIntervalMs=5_000)
    limiter.acquire("c1", None, False, 0.0)
    with pytest.raises(TooManyRequests):
        limiter.acquire("c1", None, False, 1_000.0)


def test_tracked_states_are_not_left_to_the_garbage_collector() -> None:
    """Given 10,000 client instances tracked by the limiter, after one collection their states are not
    among the objects the cyclic GC traverses (plain tuples of numbers are untracked), so a full state
    costs every later full collection nothing; and the limiter still refuses an early push from them."""
    limiter = _limiter()
    gc.collect()
    tracked_before = len(gc.get_objects())
    for n in range(10_000):
        limiter.acquire(f"instance-{n}", 10_000, False, 0.0)
    gc.collect()
    assert len(limiter) == 10_000
    assert len(gc.get_objects()) - tracked_before < 100
    with pytest.raises(TooManyRequests):
        limiter.acquire("instance-42", 10_000, False, 1_000.0)
