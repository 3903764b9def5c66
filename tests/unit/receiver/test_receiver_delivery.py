"""Delivery reports handed from the producer's polling thread (or the loop itself) to the awaiting pushes."""

from __future__ import annotations

import asyncio
import threading

import pytest

from kct.receiver.delivery import DeliveryFailed, DeliveryReports


async def test_reports_from_a_thread_share_one_wakeup_per_batch() -> None:
    """Given 3 pushes awaiting reports, when a thread reports all three with a wake() after each (as the
    poller does after each poll) before the loop runs, then one drain resolves them all: 1 wake-up, not 3."""
    loop = asyncio.get_running_loop()
    reports = DeliveryReports(loop)
    futures = [loop.create_future() for _ in range(3)]

    def poller() -> None:
        for future in futures:
            reports.add(future, None)
            reports.wake()

    thread = threading.Thread(target=poller)
    thread.start()
    thread.join()
    assert reports.wakeups == 1
    await asyncio.wait_for(asyncio.gather(*futures), timeout=5)
    assert len(reports) == 0


async def test_failed_delivery_raises_with_the_error() -> None:
    """Given a report with an error, when drained, then the push's future raises DeliveryFailed carrying
    that error (the sink turns it into 503/413)."""
    loop = asyncio.get_running_loop()
    reports = DeliveryReports(loop)
    ok, failed = loop.create_future(), loop.create_future()
    reports.add(ok, None)
    reports.add(failed, "broker down")
    assert reports.drain() == 2
    assert ok.result() is None
    with pytest.raises(DeliveryFailed) as raised:
        failed.result()
    assert raised.value.err == "broker down"


async def test_drain_on_the_loop_needs_no_wakeup_and_skips_done_futures() -> None:
    """Given one push already failed by the lost-report sweep and one waiting, when the loop drains
    directly (after its own poll), then the waiting one is resolved, the done one left alone, and no
    cross-thread wake-up was requested."""
    loop = asyncio.get_running_loop()
    reports = DeliveryReports(loop)
    swept, waiting = loop.create_future(), loop.create_future()
    swept.set_exception(TimeoutError())
    reports.add(swept, None)
    reports.add(waiting, None)
    assert reports.drain() == 2
    assert waiting.result() is None
    assert isinstance(swept.exception(), TimeoutError)
    assert reports.wakeups == 0


async def test_report_added_after_a_drain_started_gets_its_own_wakeup() -> None:
    """Given a drain already requested and run, when another report arrives, then wake() requests a new
    drain (the pending flag was cleared before the deque was emptied), so no report is left behind."""
    loop = asyncio.get_running_loop()
    reports = DeliveryReports(loop)
    first, second = loop.create_future(), loop.create_future()
    reports.add(first, None)
    reports.wake()
    await asyncio.wait_for(first, timeout=5)
    reports.add(second, None)
    reports.wake()
    await asyncio.wait_for(second, timeout=5)
    assert reports.wakeups == 2


async def test_wake_without_reports_or_on_a_closed_loop_does_nothing() -> None:
    """Given no reports, wake() schedules nothing; given a closed loop (shutdown), wake() does not raise."""
    reports = DeliveryReports(asyncio.get_running_loop())
    reports.wake()
    assert reports.wakeups == 0
    closed = asyncio.new_event_loop()
    closed.close()
    late = DeliveryReports(closed)
    late.add(asyncio.get_running_loop().create_future(), None)
    late.wake()
    assert late.wakeups == 0


async def test_many_reports_racing_drains_all_resolve() -> None:
    """Given a thread reporting 5,000 pushes with a wake() after each while the loop drains concurrently,
    then every future is resolved (no report lost to the pending flag's race)."""
    loop = asyncio.get_running_loop()
    reports = DeliveryReports(loop)
    futures = [loop.create_future() for _ in range(5000)]

    def poller() -> None:
        for future in futures:
            reports.add(future, None)
            reports.wake()

    thread = threading.Thread(target=poller)
    thread.start()
    while thread.is_alive():
        await asyncio.sleep(0)  # duration: none; the loop runs its wake-ups while the thread still adds
    thread.join()
    await asyncio.wait_for(asyncio.gather(*futures), timeout=10)
    assert reports.wakeups >= 1
    assert len(reports) == 0
