"""Per client instance push-interval rate limiting, the way the broker does it (KIP-714).

A client instance may push once per push interval. An early push is refused (the broker answers
RateLimited; we answer 429 with Retry-After = the time left). Exception: a push flagged `terminating` is
accepted once even if early; a following push is limited as if the flag were not set. State per instance
lives MAX(60 s, 3 x interval) after its last accepted push; there is no state across restarts or replicas.

The broker already enforced this before calling the plugin, on the push's arrival at the broker: pushes a
broker forwarded (they carry the plugin's `kct-broker-id` header) are not limited again here (the pipeline
skips them), since the plugin's queue can delay one push and not the next, and a refused push the plugin
gives up on is data lost (brokers ask clients for DELTA sums). This limiter paces every other sender that names
its client instance (a header or its resource attribute), with a small tolerance for jitter. The number of
tracked instances is bounded; the least recently seen are evicted first.

A state is a plain tuple of numbers, replaced on each push, not an object updated in place: CPython's
cyclic garbage collector stops tracking an exact tuple (not a subclass such as a NamedTuple) that holds
only numbers, so the hundreds of thousands of states a busy receiver holds (every instance for at least
60 s) are not traversed again by every full collection, as instances of a class would be (a cost that
grew with the state, late in a long run at 1,024 connections).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

from kct.receiver.config import RateLimitConfig
from kct.receiver.errors import TooManyRequests

__all__ = ["PushIntervalLimiter", "Ticket"]


# (last accepted push ms, interval ms, expires ms, early terminating push used): a plain tuple, see above
_State = tuple[float, int, float, bool]
_EXPIRES = 2


@dataclass(frozen=True)
class Ticket:
    """An accepted push; `PushIntervalLimiter.release` undoes it when the push fails later."""

    instance_id: str
    previous: _State | None


class PushIntervalLimiter:
    def __init__(self, config: RateLimitConfig) -> None:
        self._config = config
        self._states: OrderedDict[str, _State] = OrderedDict()
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._states)

    def ttl_ms(self, interval_ms: int) -> int:
        return max(self._config.min_state_ttl_ms, 3 * interval_ms)

    def _expire(self, now_ms: float) -> None:
        states = self._states
        # Entries are in last-touch order, and TTLs differ per interval, so this is approximate at the
        # head: it stops at the first live entry. Expired entries behind it are evicted on the next pass
        # or by the size bound; they never refuse a push (an expired state behaves as no state).
        while states:
            key, state = next(iter(states.items()))
            if state[_EXPIRES] > now_ms:
                return
            del states[key]

    def acquire(
        self, instance_id: str, interval_ms: int | None, terminating: bool, now_ms: float
    ) -> Ticket | None:
        """Admit one push or raise TooManyRequests; None when this push is not rate limited at all."""
        cfg = self._config
        if not cfg.enabled:
            return None
        interval = interval_ms or cfg.default_interval_ms
        if not interval:
            return None
        self._expire(now_ms)
        states = self._states
        state = states.get(instance_id)
        if state is not None and state[_EXPIRES] <= now_ms:
            state = None
        if state is None:
            states[instance_id] = (now_ms, interval, now_ms + self.ttl_ms(interval), False)
            states.move_to_end(instance_id)
            while len(states) > cfg.max_tracked_clients:
                states.popitem(last=False)
                self.evicted += 1
            return Ticket(instance_id, None)
        last_accept_ms, _, _, early_used = state
        min_gap = interval * (1.0 - cfg.tolerance)
        elapsed = now_ms - last_accept_ms
        if elapsed >= min_gap:
            early_terminating_used = False
        elif terminating and not early_used:
            early_terminating_used = True
        else:
            retry_after = max(1, math.ceil((min_gap - elapsed) / 1000.0))
            raise TooManyRequests(
                "rate_limited",
                f"client instance {instance_id!r} pushed {elapsed:.0f} ms after its previous push; "
                f"the push interval is {interval} ms",
                retry_after_s=retry_after,
            )
        states[instance_id] = (now_ms, interval, now_ms + self.ttl_ms(interval), early_terminating_used)
        states.move_to_end(instance_id)
        return Ticket(instance_id, state)

    def release(self, ticket: Ticket | None) -> None:
        """The push admitted by `ticket` failed downstream: let the sender retry without waiting."""
        if ticket is None:
            return
        if ticket.previous is None:
            self._states.pop(ticket.instance_id, None)
        elif ticket.instance_id in self._states:
            self._states[ticket.instance_id] = ticket.previous
