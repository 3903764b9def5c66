"""Fair admission (kct.receiver.admission): places in arrival order, a bounded queue, a bounded wait, 503s
with Retry-After, and counters that stay true whatever happens to a waiting push."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from waiting import eventually_async

from kct.receiver.admission import Admission
from kct.receiver.errors import Unavailable


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def admission(*, places: int = 1, queued: int = 8, wait_s: float = 10.0, clock: Clock | None = None) -> Admission:
    return Admission(places, 1 << 20, 3, max_queue_wait_s=wait_s, max_queued=queued, clock=clock or Clock())


async def _until(check: Callable[[], bool], what: str) -> None:
    """Wait for the tasks under test to reach the state `check` sees (a waiter queued, a place granted)."""
    await eventually_async(check, timeout=5, interval=0.001, what=what)


async def test_places_are_taken_at_once_while_free() -> None:
    """Given 2 places, when 2 pushes enter, then both hold one and nobody waits."""
    adm = admission(places=2)
    await adm.enter()
    await adm.enter()
    assert (adm.requests, adm.queued) == (2, 0)
    adm.leave()
    adm.leave()
    assert (adm.requests, adm.queued) == (0, 0)


async def test_waiting_pushes_get_places_in_arrival_order() -> None:
    """Given 1 place taken, when 3 pushes queue, then each freed place goes to the one that came first."""
    adm = admission(places=1)
    await adm.enter()
    admitted: list[int] = []

    async def push(n: int) -> None:
        await adm.enter()
        admitted.append(n)

    tasks = []
    for n in range(3):
        tasks.append(asyncio.create_task(push(n)))
        await _until(lambda: adm.queued == n + 1, f"push {n} queued")  # noqa: B023 (awaited here)
    assert (adm.requests, adm.queued, admitted) == (1, 3, [])
    for expected in ([0], [0, 1], [0, 1, 2]):
        adm.leave()
        wanted = len(expected)
        await _until(lambda: len(admitted) == wanted, f"{wanted} pushes admitted")  # noqa: B023 (awaited here)
        assert admitted == expected
    await asyncio.gather(*tasks)
    assert (adm.requests, adm.queued) == (1, 0)


async def test_a_full_queue_refuses_at_once_with_503_and_retry_after() -> None:
    """Given 1 place taken and a queue of 2 full, when one more push enters, then it is refused at once:
    503, reason queue_full, Retry-After, and it holds no place."""
    adm = admission(places=1, queued=2)
    await adm.enter()
    waiters = [asyncio.create_task(adm.enter()) for _ in range(2)]
    await _until(lambda: adm.queued == 2, "both waiters queued")
    with pytest.raises(Unavailable) as refused:
        await adm.enter()
    assert (refused.value.status, refused.value.reason, refused.value.retry_after_s) == (503, "queue_full", 3)
    assert (adm.requests, adm.queued) == (1, 2)
    adm.leave()  # the holder's place to the first waiter, then the first waiter's to the second
    adm.leave()
    await asyncio.gather(*waiters)
    assert (adm.requests, adm.queued) == (1, 0)
    adm.leave()
    assert (adm.requests, adm.queued) == (0, 0)


async def test_a_push_older_than_the_bound_is_refused_before_any_work() -> None:
    """Given a 0.5 s bound and free places, when a push whose request was whole 0.6 s ago gets its turn
    (the loop was behind), then it is refused (queue_wait) without taking a place; one 0.4 s old is admitted."""
    clock = Clock()
    adm = admission(places=4, wait_s=0.5, clock=clock)
    with pytest.raises(Unavailable) as refused:
        await adm.enter(clock.now - 0.6)
    assert (refused.value.reason, refused.value.retry_after_s) == ("queue_wait", 3)
    assert adm.requests == 0
    await adm.enter(clock.now - 0.4)
    assert adm.requests == 1


async def test_a_waiting_push_is_refused_when_its_bound_passes_and_the_next_one_still_gets_the_place() -> None:
    """Given 1 place taken and a 50 ms bound, when two pushes wait and no place frees in time, then both are
    refused with queue_wait at their deadline, and a place freed afterwards goes back to the pool."""
    adm = Admission(1, 1 << 20, 2, max_queue_wait_s=0.05, max_queued=8)
    await adm.enter()
    results = await asyncio.gather(adm.enter(), adm.enter(), return_exceptions=True)
    assert [getattr(r, "reason", None) for r in results] == ["queue_wait", "queue_wait"]
    assert (adm.requests, adm.queued) == (1, 0)
    adm.leave()
    assert (adm.requests, adm.queued) == (0, 0)


async def test_a_cancelled_waiter_gives_up_its_turn_and_a_granted_then_cancelled_one_passes_its_place_on() -> None:
    """Given 1 place taken and three waiters, when the first is cancelled while waiting, and the second is
    cancelled right after it was given the place, then the third gets the place and the counters stay true."""
    adm = admission(places=1)
    await adm.enter()
    first, second, third = (asyncio.create_task(adm.enter()) for _ in range(3))
    await _until(lambda: adm.queued == 3, "three waiters queued")
    first.cancel()
    await _until(first.done, "the first waiter cancelled")
    assert (adm.requests, adm.queued) == (1, 2)
    adm.leave()  # the place goes to `second` ...
    second.cancel()  # ... cancelled before it resumed: it hands the place to `third`
    await _until(second.done, "the second waiter cancelled")
    assert second.cancelled() and first.cancelled()
    await third
    assert (adm.requests, adm.queued) == (1, 0)
    adm.leave()
    assert (adm.requests, adm.queued) == (0, 0)


def test_bytes_budget_refuses_above_the_limit() -> None:
    """Given a 1 MiB budget, when more is reserved than it holds, then 503 overloaded; released, it fits."""
    adm = admission()
    adm.reserve(1 << 20)
    with pytest.raises(Unavailable) as refused:
        adm.reserve(1)
    assert refused.value.reason == "overloaded"
    adm.release(1 << 20)
    adm.reserve(1)
