"""The live clients every receiver replica saw, merged, and what one subscription matches of them.

Each receiver replica keeps a registry of the clients whose pushes it stored (kct.receiver.clients, served
as `GET /v1/clients`); a client pushes through one broker to one replica at a time, and a reconnect lands
it on another. The census merges what every replica of every receiver answered by client instance id (the
newest push wins) and keeps what it learned: a replica that restarts answers with an empty registry until
its clients push again (within one push interval), and the count must not drop to zero meanwhile.

Live: a client is counted for `max(60 s, 3 x its push interval)` after its last push. The push interval is
estimated from what the registry reports (pushes between its first and last push), since the broker's
interval is per subscription and a client follows the shortest of those it matches. Times are taken
relative to each answer's own `now_ms`, so a receiver whose clock differs from ours does not age its
clients wrongly.

Bounded: at most `max_clients` entries; past it, the least recently pushed are left out and counted.

Pure (no client, no kopf): the operator's collector feeds it and the status of each subscription is
computed from it with the broker's own matching rule (kct.api.matching), as `kubectl kct` does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, cast

from kct.api.matching import matches
from kct.attribution.workload import workload_of
from kct.otlp.clients_doc import ClientEntry

__all__ = [
    "DEFAULT_MAX_CLIENTS",
    "MIN_RETENTION_MS",
    "ClientCensus",
    "ClientsSummary",
    "is_live",
    "retention_ms",
    "summarize",
    "workload",
]

MIN_RETENTION_MS: Final = 60_000
DEFAULT_MAX_CLIENTS: Final = 50_000  # a few hundred bytes each: tens of MB at most
RETENTION_INTERVALS: Final = 3

def workload(entry: ClientEntry) -> str:
    """`deployment/checkout` from the attribution attributes (kct.attribution.workload's precedence, as the
    aggregation's workload columns), "" when not attributed."""
    found = workload_of(entry["attributes"])
    return "" if found is None else f"{found[0]}/{found[1]}"


def _interval_ms(entry: ClientEntry) -> int | None:
    """The client's push interval as its pushes show it (None after a single push)."""
    pushes = entry.get("pushes", 0)
    if pushes < 2:
        return None
    return max(0, entry["last_push_ms"] - entry["first_push_ms"]) // (pushes - 1)


def retention_ms(entry: ClientEntry) -> int:
    """How long after its last push a client still counts: max(60 s, 3 x its push interval)."""
    interval = _interval_ms(entry)
    return max(MIN_RETENTION_MS, RETENTION_INTERVALS * interval) if interval is not None else MIN_RETENTION_MS


def is_live(entry: ClientEntry, now_ms: int) -> bool:
    """Whether `entry` (its times on the same clock as `now_ms`) pushed within its retention."""
    return now_ms - entry["last_push_ms"] <= retention_ms(entry)


class ClientCensus:
    """Clients by instance id, newest push first wins, times on the caller's clock (see module)."""

    def __init__(self, *, max_clients: int = DEFAULT_MAX_CLIENTS) -> None:
        self.max_clients = max_clients
        self.left_out = 0  # clients dropped because the census was full (least recently pushed first)
        self._clients: dict[str, ClientEntry] = {}
        self._interval: dict[str, int] = {}  # the longest push interval each client was seen with

    def __len__(self) -> int:
        return len(self._clients)

    @property
    def full_and_left_out(self) -> int:
        """`left_out` while the census is full (the counts may be low now), else 0: a census that filled up
        once and emptied since no longer taints every subscription's status."""
        return self.left_out if len(self._clients) >= self.max_clients else 0

    def absorb(self, document: Mapping[str, Any], now_ms: int) -> None:
        """One replica's `/v1/clients` answer, read at `now_ms` on our clock."""
        offset = now_ms - int(document.get("now_ms") or now_ms)  # their clock -> ours
        for raw in document.get("clients") or ():
            entry = cast(ClientEntry, {
                **raw,
                # the instance id is a match key too (clientInstanceId): held with the labels, built once here
                # rather than once per subscription per tick
                "labels": {**(raw.get("labels") or {}), "client_instance_id": raw["client_instance_id"]},
                "first_push_ms": int(raw["first_push_ms"]) + offset,
                "last_push_ms": int(raw["last_push_ms"]) + offset,
            })
            instance_id = entry["client_instance_id"]
            interval = _interval_ms(entry)
            if interval is not None:
                # A restarted replica knows only the pushes since: keep the interval learned before.
                self._interval[instance_id] = max(interval, self._interval.get(instance_id, 0))
            seen = self._clients.get(instance_id)
            if seen is None or entry["last_push_ms"] >= seen["last_push_ms"]:
                self._clients[instance_id] = entry
        self._bound()

    def live(self, now_ms: int) -> list[ClientEntry]:
        """The clients that pushed within their retention; the others are forgotten."""
        gone = [key for key, entry in self._clients.items() if now_ms - entry["last_push_ms"] > self._retention(key)]
        for key in gone:
            del self._clients[key]
            self._interval.pop(key, None)
        return list(self._clients.values())

    def _retention(self, instance_id: str) -> int:
        interval = self._interval.get(instance_id)
        return max(MIN_RETENTION_MS, RETENTION_INTERVALS * interval) if interval is not None else MIN_RETENTION_MS

    def _bound(self) -> None:
        excess = len(self._clients) - self.max_clients
        if excess <= 0:
            return
        oldest = sorted(self._clients.values(), key=lambda e: e["last_push_ms"])[:excess]
        for entry in oldest:
            del self._clients[entry["client_instance_id"]]
            self._interval.pop(entry["client_instance_id"], None)
        self.left_out += excess


@dataclass(frozen=True)
class ClientsSummary:
    """What `status.clients` of one subscription shows (kct.api.status.SubscriptionClients)."""

    matched: int
    by_software: tuple[tuple[str, str, int], ...]  # (name, version, count), most clients first
    top_workloads: tuple[tuple[str, int], ...]  # ("deployment/checkout" or "namespace/..."; count)
    last_push_ms: int | None
    software_left_out: int = 0
    workloads_left_out: int = 0


def _workload_ref(entry: ClientEntry) -> str | None:
    name = workload(entry)
    if not name:
        return None
    namespace = entry["attributes"].get("k8s.namespace.name")
    return f"{namespace}/{name}" if namespace else name


def summarize(
    clients: Iterable[ClientEntry], selectors: Mapping[str, str], *, max_software: int = 10, max_workloads: int = 10
) -> ClientsSummary:
    """The `clients` (from `ClientCensus.live`: their labels hold `client_instance_id`) that `selectors`
    (broker keys) match, by the broker's rule; lists bounded, most clients first (ties by name, so the same
    clients always give the same status and no needless write)."""
    matched = [entry for entry in clients if matches(selectors, entry["labels"])]
    software = Counter(
        (entry["labels"].get("client_software_name", ""), entry["labels"].get("client_software_version", ""))
        for entry in matched
    )
    workloads = Counter(ref for ref in map(_workload_ref, matched) if ref is not None)
    by_software = sorted(software.items(), key=lambda item: (-item[1], item[0]))
    by_workload = sorted(workloads.items(), key=lambda item: (-item[1], item[0]))
    return ClientsSummary(
        matched=len(matched),
        by_software=tuple((name, version, count) for (name, version), count in by_software[:max_software]),
        top_workloads=tuple(by_workload[:max_workloads]),
        last_push_ms=max((entry["last_push_ms"] for entry in matched), default=None),
        software_left_out=max(0, len(by_software) - max_software),
        workloads_left_out=max(0, len(by_workload) - max_workloads),
    )
