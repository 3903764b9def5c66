"""Waiting for an event in tests: poll what the test checks, with a deadline, and name it when it never comes.

A test that waits for something (a condition on the API server, a push at an endpoint, a log line, a counter)
polls for that thing here instead of sleeping for a guessed time: on a busy machine a guessed sleep either
flakes or passes without having seen what it checks. `tests/unit/test_no_sleep_waits.py` keeps it so: a
`sleep` anywhere else in tests/ must say, in a `# duration: <why>` comment, why it is a duration (traffic
for a while, a clock that must pass, a poll interval) and not a wait.

- `eventually(check, timeout=..., what=...)`: call `check()` until it returns something truthy.
- `eventually_async(check, timeout=..., what=...)`: the same inside a running event loop, so the loop keeps
  serving whatever the test runs in it (a load generator, a server under test) between checks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest


def eventually(check: Callable[[], Any], *, timeout: float = 60.0, what: str, interval: float = 0.5) -> Any:
    """Poll until `check` returns something truthy and return it; fail after `timeout` seconds naming `what`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)  # duration: the poll interval between two checks
    pytest.fail(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


async def eventually_async(check: Callable[[], Any | Awaitable[Any]], *, timeout: float = 60.0, what: str,
                           interval: float = 0.5) -> Any:
    """`eventually` for coroutines: `check` may be a plain function or return an awaitable."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if isinstance(last, Awaitable):
            last = await last
        if last:
            return last
        await asyncio.sleep(interval)  # duration: the poll interval between two checks
    pytest.fail(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
