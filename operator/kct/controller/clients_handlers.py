"""kopf handlers that count, on every ClientMetricsSubscription, the live clients it matches.

Two timers, one census (kct.api.client_census) shared by this process:
- on every TelemetryReceiver the operator watches (all namespaces it watches), every
  `clients_interval_seconds`: read the client registry of each of its ready pods
  (kct.controller.receiver_clients, in a thread) and absorb the answers into the census;
- on every ClientMetricsSubscription, as often: match the census's live clients with the broker's rule and
  write `status.clients` and the `ClientsMatched` condition when they changed
  (kct.controller.subscription_clients), posting a Warning when nothing matched for too long.

kopf's timers give "every receiver the operator watches" for free (its watch decides the scope, no extra
list), stop with their resource, and an empty patch writes nothing. With no receiver answering for three
intervals the counts are unknown, and the condition says so rather than report zero; with no
TelemetryReceiver watched at all (subscriptions only, the receivers run elsewhere) nothing is written.

Cost: each subscription's tick matches every live client, S x N per interval. RE2's verdicts are cached
by (regex, value) (kct.api.matching.matches), so after the first tick a subscription over 10,000 clients
takes some 60 ms of one (busy) core; 100 such subscriptions, some 6 s every 30 s. Raise
`clients_interval_seconds` for more.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

import kopf

from kct.api.client_census import ClientCensus
from kct.api.crds import GROUP, VERSION
from kct.controller.kernel import OperatorConfig
from kct.controller.kopf_outcome import write_outcome
from kct.controller.receiver_clients import ReceiverClientsSource, ReceiverRef, read_receiver
from kct.controller.resource import ResourceView
from kct.controller.subscription_clients import ClientsPolicy, clients_outcome

__all__ = ["ClientsHandlers", "register_clients_handlers"]

RECEIVERS = "telemetryreceivers"
SUBSCRIPTIONS = "clientmetricssubscriptions"
FRESH_INTERVALS = 3  # receivers silent for this many intervals: the counts are unknown
log = logging.getLogger(__name__)


def _real_source() -> ReceiverClientsSource:
    from kct.controller.kube_config import kube_api_client
    from kct.controller.receiver_clients import ApiServerProxySource

    return ApiServerProxySource(kube_api_client())


class ClientsHandlers:
    """The two timers over one census; `source` and `clock` are injectable for unit tests."""

    def __init__(
        self,
        config: OperatorConfig,
        source: Callable[[], ReceiverClientsSource] = _real_source,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        census: ClientCensus | None = None,
    ) -> None:
        self.config = config
        self.census = census if census is not None else ClientCensus()
        self.policy = ClientsPolicy(warn_after_s=config.no_clients_warning_seconds,
                                    push_time_step_s=max(60.0, config.clients_interval_seconds))
        self._make_source = source
        self._source: ReceiverClientsSource | None = None
        self._clock = clock
        self._answered_ms: dict[str, int] = {}  # receiver key -> when one of its replicas last answered
        self._receivers: set[str] = set()  # every receiver whose timer ran: none, and there is nothing to count
        self._problems: dict[str, list[str]] = {}

    def register(self, registry: kopf.OperatorRegistry) -> None:
        interval = self.config.clients_interval_seconds
        kopf.timer(GROUP, VERSION, RECEIVERS, id="read-clients", interval=interval, registry=registry)(
            self.read_clients
        )
        kopf.timer(GROUP, VERSION, SUBSCRIPTIONS, id="matched-clients", interval=interval, initial_delay=interval,
                   registry=registry)(self.matched_clients)

    def _now_ms(self) -> int:
        return int(self._clock().timestamp() * 1000)

    async def read_clients(self, body: kopf.Body, **_: Any) -> None:
        """TelemetryReceiver timer: every ready replica's registry into the census."""
        if self._source is None:
            self._source = self._make_source()
        receiver = ReceiverRef.from_body(body)
        self._receivers.add(receiver.key)
        read = await asyncio.to_thread(read_receiver, self._source, receiver)
        now_ms = self._now_ms()
        left_out = self.census.left_out
        for document in read.documents:
            self.census.absorb(document, now_ms)
        if self.census.left_out > left_out:
            log.warning("the clients census is full (%d clients): %d left out so far; status.clients counts may be low",
                        self.census.max_clients, self.census.left_out)
        if read.documents:
            self._answered_ms[receiver.key] = now_ms
        if read.problems != self._problems.get(receiver.key, []):  # logged when they change, not every tick
            for problem in read.problems:
                log.warning("reading the clients of TelemetryReceiver %s: %s", receiver.key, problem)
            self._problems[receiver.key] = read.problems

    def _fresh(self, now_ms: int) -> bool:
        horizon = FRESH_INTERVALS * self.config.clients_interval_seconds * 1000
        return any(now_ms - at <= horizon for at in self._answered_ms.values())

    async def matched_clients(self, body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        """ClientMetricsSubscription timer: `status.clients` and ClientsMatched, written only when changed."""
        if body.metadata.get("deletionTimestamp") or not self._receivers:
            return  # no TelemetryReceiver watched (e.g. receivers run elsewhere): no claim about clients at all
        now = self._clock()
        now_ms = int(now.timestamp() * 1000)
        clients = self.census.live(now_ms) if self._fresh(now_ms) else None
        # Matching is every live client against this subscription's regexes: off the event loop, on a
        # snapshot (the census replaces entries, never changes one, so the list stays as it was taken).
        outcome = await asyncio.to_thread(clients_outcome, ResourceView.from_body(body), clients,
                                          self.census.full_and_left_out, self.policy, now)
        write_outcome(outcome, body, patch, retry=False)


def register_clients_handlers(registry: kopf.OperatorRegistry, config: OperatorConfig) -> ClientsHandlers:
    handlers = ClientsHandlers(config)
    handlers.register(registry)
    return handlers
