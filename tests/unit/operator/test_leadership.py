"""Leader election (kct.controller.leadership) against an in-memory Lease with optimistic versions."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from kct.controller.leadership import ElectionTiming, LeaderElector, LeaseConflict, LeaseRecord


class FakeLeaseStore:
    """One Lease; every write bumps the version, and a write at a stale version is a conflict (HTTP 409)."""

    def __init__(self) -> None:
        self.record: LeaseRecord | None = None
        self.version = 0
        self.failing = False
        self.writes = 0

    def get(self) -> LeaseRecord | None:
        if self.failing:
            raise ConnectionError("API server unreachable")
        return self.record

    def create(self, record: LeaseRecord) -> LeaseRecord:
        if self.record is not None:
            raise LeaseConflict("exists")
        return self._store(record)

    def update(self, record: LeaseRecord) -> LeaseRecord:
        if self.failing:
            raise ConnectionError("API server unreachable")
        if self.record is None or record.resource_version != self.record.resource_version:
            raise LeaseConflict("stale")
        return self._store(record)

    def _store(self, record: LeaseRecord) -> LeaseRecord:
        self.version += 1
        self.writes += 1
        self.record = replace(record, resource_version=str(self.version))
        return self.record


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


WALL = datetime(2026, 11, 25, 12, 0, 0, tzinfo=UTC)


def elector(store: FakeLeaseStore, identity: str, clock: Clock) -> LeaderElector:
    return LeaderElector(store, identity, ElectionTiming(), clock=clock, wall_clock=lambda: WALL)


def test_first_candidate_creates_the_lease_and_leads() -> None:
    """Given no Lease, When a replica tries, Then it creates the Lease naming itself and leads."""
    store, clock = FakeLeaseStore(), Clock()
    a = elector(store, "a", clock)
    assert a.try_acquire_or_renew() and a.is_leader
    assert store.record is not None
    assert (store.record.holder, store.record.lease_duration_seconds, store.record.transitions) == ("a", 10, 0)
    assert store.record.acquire_time == WALL


def test_standby_waits_while_the_holder_renews() -> None:
    """Given a holder renewing every retry period, When a second replica tries for a long time,
    Then it never takes the Lease (it sees a new version at each renewal)."""
    store, clock = FakeLeaseStore(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    assert a.try_acquire_or_renew()
    for _ in range(30):
        clock.now += 2
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
        assert not b.is_leader
    assert store.record is not None and store.record.holder == "a"


def test_standby_takes_over_after_one_lease_duration_of_silence() -> None:
    """Given a holder that stops renewing (killed), When the standby keeps trying every retry period,
    Then it takes the Lease once it has seen the same version for the lease duration, not before,
    and the transition is counted."""
    store, clock = FakeLeaseStore(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    assert a.try_acquire_or_renew()
    killed_at = clock.now
    took_over_at = None
    while took_over_at is None:
        clock.now += 2
        if b.try_acquire_or_renew():
            took_over_at = clock.now
    assert 10 <= took_over_at - killed_at <= 10 + 2
    assert store.record is not None and (store.record.holder, store.record.transitions) == ("b", 1)


def test_standby_measures_silence_on_its_own_clock_not_the_lease_times() -> None:
    """Given a Lease whose renewTime is far in the past (clock skew between machines), When a standby
    first sees it, Then it still waits a whole lease duration before taking it."""
    store, clock = FakeLeaseStore(), Clock()
    store.record = LeaseRecord("a", 10, renew_time=datetime(2000, 1, 1, tzinfo=UTC), resource_version="7")
    b = elector(store, "b", clock)
    assert not b.try_acquire_or_renew()
    clock.now += 9
    assert not b.try_acquire_or_renew()
    clock.now += 1
    assert b.try_acquire_or_renew()


def test_two_candidates_racing_for_an_expired_lease_cannot_both_win() -> None:
    """Given an expired Lease both standbys have observed, When both write at the same version,
    Then exactly one wins (optimistic concurrency) and the other stays standby."""
    store, clock = FakeLeaseStore(), Clock()
    store.record = LeaseRecord("dead", 10, resource_version="1")
    store.version = 1
    b, c = elector(store, "b", clock), elector(store, "c", clock)
    assert not b.try_acquire_or_renew() and not c.try_acquire_or_renew()
    clock.now += 10
    stale = store.record
    original_get = store.get
    store.get = lambda: stale  # type: ignore[method-assign]  # both read before either writes
    results = [b.try_acquire_or_renew(), c.try_acquire_or_renew()]
    store.get = original_get  # type: ignore[method-assign]
    assert sorted(results) == [False, True]
    assert store.record is not None and store.record.holder in {"b", "c"}


def test_released_lease_is_taken_at_once() -> None:
    """Given a holder that stops cleanly and releases, When the standby tries next, Then it leads at once."""
    store, clock = FakeLeaseStore(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    a.release()
    assert store.record is not None and store.record.holder == "" and not a.is_leader
    assert b.try_acquire_or_renew()


def test_release_leaves_someone_elses_lease_alone() -> None:
    """Given a replica that lost the Lease to another, When it releases, Then the Lease is unchanged."""
    store, clock = FakeLeaseStore(), Clock()
    a = elector(store, "a", clock)
    assert a.try_acquire_or_renew()
    assert store.record is not None
    store.record = replace(store.record, holder="b")
    writes = store.writes
    a.release()
    assert store.record.holder == "b" and store.writes == writes


def test_holder_gives_up_when_it_cannot_renew_within_the_deadline() -> None:
    """Given a holder whose API server became unreachable, When it keeps failing to renew,
    Then it reports the loss once the renew deadline (7 s) has passed, before the lease (10 s) expires."""
    store, clock = FakeLeaseStore(), Clock()
    timing = ElectionTiming()
    a = LeaderElector(store, "a", timing, clock=clock, wall_clock=lambda: WALL)
    assert a.try_acquire_or_renew()
    renewed_at = clock.now
    store.failing = True
    lost: list[tuple[float, str]] = []

    class TickingStop(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            clock.now += timeout or 0
            return len(lost) > 0

    a.keep_renewing(lambda reason: lost.append((clock.now, reason)), TickingStop())
    assert len(lost) == 1
    at, reason = lost[0]
    assert timing.renew_deadline <= at - renewed_at < timing.lease_duration
    assert "could not be renewed" in reason


def test_holder_reports_loss_when_another_took_the_lease() -> None:
    """Given a holder whose Lease was taken over, When it renews, Then it reports the new holder."""
    store, clock = FakeLeaseStore(), Clock()
    a = elector(store, "a", clock)
    assert a.try_acquire_or_renew()
    assert store.record is not None
    store._store(replace(store.record, holder="b"))
    lost: list[str] = []
    stop = threading.Event()
    original_wait = stop.wait
    stop.wait = lambda timeout=None: original_wait(0) or bool(lost)  # type: ignore[method-assign]
    a.keep_renewing(lost.append, stop)
    assert lost == ["the lease is now held by b"]


def test_acquire_survives_api_errors_and_stops_on_request() -> None:
    """Given an unreachable API server, When a standby waits, Then errors do not end it, and setting
    `stop` returns False without having led."""
    store, clock = FakeLeaseStore(), Clock()
    store.failing = True
    b = elector(store, "b", clock)
    attempts = 0

    class CountingStop(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            nonlocal attempts
            attempts += 1
            if attempts == 3:
                self.set()
            return self.is_set()

    assert b.acquire(CountingStop()) is False
    assert attempts == 3 and not b.is_leader


@pytest.mark.parametrize(
    ("lease", "renew", "retry"),
    [(10, 10, 2), (10, 7, 0), (10, 2, 7), (5, 7, 2)],
)
def test_timing_must_keep_renewals_inside_the_lease(lease: float, renew: float, retry: float) -> None:
    """Given durations where the renew deadline is not strictly inside the lease, Then they are refused."""
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        ElectionTiming(lease_duration=lease, renew_deadline=renew, retry_period=retry)


def test_timing_from_lease_duration() -> None:
    """Given the chart's single knob, Then the other two durations follow client-go's proportions."""
    assert ElectionTiming.from_lease_duration(10) == ElectionTiming(10, 7, 2)
