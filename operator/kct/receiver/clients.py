"""The clients this receiver has seen lately, for `GET /v1/clients` (and `kubectl kct`).

The push path pays for one dictionary update per stored push and nothing else: it keeps references to what
it already built (the record headers holding the broker-added labels, the attribution's attributes, the
record value), and everything is turned into a document only when someone asks. The latest value is held
so that the figures worth a `top` (rates, latencies, queue and throttle time) are decoded from it on a
read, never on a push: the fast path proves most pushes need no decoding at all and keeps it that way.

Bounded three ways: at most `max_clients` entries (the least recently pushed is evicted first, counted);
an entry with no push for `idle_ms` expires (counted); the held values share a byte budget (past it, an
entry keeps its labels but no value, so no figures, until the budget has room again).

Rates: a DELTA sum is a rate by itself (value over its own start..time window); a CUMULATIVE sum needs two
samples, so its rate is taken between the values seen by two reads (the first read shows none).
"""

from __future__ import annotations

import socket
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality, Metric

from kct.otlp import labels as L
from kct.otlp.clients_doc import ClientEntry, ClientsDocument

__all__ = ["DEFAULT_IDLE_MS", "DEFAULT_MAX_CLIENTS", "DEFAULT_MAX_HELD_BYTES", "ClientRegistry"]

DEFAULT_MAX_CLIENTS: Final = 10_000
DEFAULT_IDLE_MS: Final = 15 * 60_000  # three of the brokers' longest push interval (5 minutes)
DEFAULT_MAX_HELD_BYTES: Final = 32 * 1024 * 1024

_LABEL_NAMES: Final = frozenset(label.name for label in L.BROKER_LABELS) - {
    L.CLIENT_INSTANCE_ID.name, L.TERMINATING.name, L.PUSH_INTERVAL_MS.name, L.PAYLOAD_CONTENT_TYPE.name,
}

_P, _C = "org.apache.kafka.producer.", "org.apache.kafka.consumer."


@dataclass(frozen=True)
class _Column:
    """One figure: how to reduce the points, from the first of `names` the push carries (Java clients and
    librdkafka name the same thing differently; taking one avoids counting it twice)."""

    name: str
    kind: str  # "rate" (sums), "avg" / "max" (gauges)
    names: tuple[str, ...]


_COLUMNS: Final = (
    _Column("records_per_s", "rate", (_P + "record.send.total", _P + "topic.record.send.total",
                                      _C + "fetch.manager.records.consumed.total")),
    _Column("bytes_per_s", "rate", (_P + "outgoing.byte.total", _P + "topic.byte.total",
                                    _C + "fetch.manager.bytes.consumed.total", _C + "incoming.byte.total")),
    _Column("errors_per_s", "rate", (_P + "record.error.total", _P + "topic.record.error.total",
                                     _P + "topic.record.failures", _P + "partition.record.failures")),
    _Column("request_latency_avg_ms", "avg", (_P + "node.request.latency.avg", _P + "request.latency.avg",
                                              _C + "node.request.latency.avg", _C + "request.latency.avg")),
    _Column("request_latency_max_ms", "max", (_P + "node.request.latency.max", _P + "request.latency.max",
                                              _C + "node.request.latency.max", _C + "request.latency.max")),
    _Column("queue_time_avg_ms", "avg", (_P + "record.queue.time.avg",)),
    _Column("queue_time_max_ms", "max", (_P + "record.queue.time.max",)),
    _Column("throttle_time_avg_ms", "avg", (_P + "produce.throttle.time.avg",
                                            _C + "fetch.manager.fetch.throttle.time.avg")),
    _Column("throttle_time_max_ms", "max", (_P + "produce.throttle.time.max",
                                            _C + "fetch.manager.fetch.throttle.time.max")),
)
_WANTED: Final = frozenset(name for column in _COLUMNS for name in column.names)


class _Client:
    __slots__ = ("attributes", "body", "extracted", "first_ms", "headers", "instance_id", "last_ms", "metrics",
                 "pushes", "samples")

    def __init__(self, instance_id: str, at_ms: int) -> None:
        self.instance_id = instance_id
        self.first_ms = at_ms
        self.last_ms = at_ms
        self.pushes = 0
        self.headers: Sequence[tuple[str, bytes]] = ()
        self.attributes: Sequence[tuple[str, str]] = ()
        self.body: bytes | None = None
        self.extracted = True  # the figures reflect `body`
        self.metrics: dict[str, float] = {}
        self.samples: dict[str, tuple[int, float]] = {}  # cumulative sums: column -> (time ns, total)


class ClientRegistry:
    """Per client instance id: labels, attribution, push times and count, the latest value (see module)."""

    def __init__(
        self,
        *,
        max_clients: int = DEFAULT_MAX_CLIENTS,
        idle_ms: int = DEFAULT_IDLE_MS,
        max_held_bytes: int = DEFAULT_MAX_HELD_BYTES,
    ) -> None:
        self.max_clients = max_clients
        self.idle_ms = idle_ms
        self.max_held_bytes = max_held_bytes
        self.held_bytes = 0
        self.evicted = 0
        self.expired = 0
        self._clients: OrderedDict[str, _Client] = OrderedDict()  # least recently pushed first

    def __len__(self) -> int:
        return len(self._clients)

    def observe(
        self,
        instance_id: str,
        headers: Sequence[tuple[str, bytes]],
        attributes: Sequence[tuple[str, str]],
        value: bytes,
        at_ms: int,
    ) -> None:
        """A stored push (on the push path: no copies, no decoding)."""
        clients = self._clients
        client = clients.get(instance_id)
        if client is None:
            self._expire(at_ms)
            client = clients[instance_id] = _Client(instance_id, at_ms)
            if len(clients) > self.max_clients:
                self._drop(clients.popitem(last=False)[1])
                self.evicted += 1
        else:
            clients.move_to_end(instance_id)
        client.last_ms = at_ms
        client.pushes += 1
        client.headers = headers
        client.attributes = attributes
        held = self.held_bytes - (len(client.body) if client.body is not None else 0)
        if held + len(value) <= self.max_held_bytes:
            client.body, self.held_bytes = value, held + len(value)
        else:
            client.body, self.held_bytes = None, held
        client.extracted = False

    def document(self, now_ms: int) -> ClientsDocument:
        """Every live client, the figures of each taken from its latest value (decoded here, once per push)."""
        self._expire(now_ms)
        return {
            "receiver": socket.gethostname(),
            "now_ms": now_ms,
            "clients": [self._entry(client) for client in reversed(self._clients.values())],
            "tracked": len(self._clients),
            "evicted": self.evicted,
            "expired": self.expired,
        }

    def _expire(self, now_ms: int) -> None:
        clients = self._clients
        horizon = now_ms - self.idle_ms
        while clients:
            oldest = next(iter(clients.values()))
            if oldest.last_ms >= horizon:
                return
            self._drop(clients.popitem(last=False)[1])
            self.expired += 1

    def _drop(self, client: _Client) -> None:
        if client.body is not None:
            self.held_bytes -= len(client.body)

    def _entry(self, client: _Client) -> ClientEntry:
        if not client.extracted:
            client.metrics = _figures(client.body, client.samples) if client.body is not None else {}
            client.extracted = True
        return {
            "client_instance_id": client.instance_id,
            "labels": {name: raw.decode("utf-8", "replace") for name, raw in client.headers if name in _LABEL_NAMES},
            "attributes": dict(client.attributes),
            "first_push_ms": client.first_ms,
            "last_push_ms": client.last_ms,
            "pushes": client.pushes,
            "metrics": dict(client.metrics),
        }


def _figures(body: bytes, samples: dict[str, tuple[int, float]]) -> dict[str, float]:
    """The METRIC_COLUMNS one OTLP value allows (see the module docstring for rates)."""
    request = ExportMetricsServiceRequest()
    try:
        request.ParseFromString(body)
    except DecodeError:
        return {}
    found: dict[str, Metric] = {}
    for resource_metrics in request.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                if metric.name in _WANTED:
                    found.setdefault(metric.name, metric)
    figures: dict[str, float] = {}
    for column in _COLUMNS:
        metric = next((found[name] for name in column.names if name in found), None)
        if metric is None:
            continue
        figure = _rate(column.name, metric, samples) if column.kind == "rate" else _gauge(column.kind, metric)
        if figure is not None:
            figures[column.name] = figure
    return figures


def _values(metric: Metric) -> Iterable[tuple[float, int, int]]:
    """(value, start ns, time ns) of each number point of a gauge or sum."""
    points = metric.sum.data_points if metric.HasField("sum") else metric.gauge.data_points
    for point in points:
        value = point.as_double if point.HasField("as_double") else float(point.as_int)
        yield value, point.start_time_unix_nano, point.time_unix_nano


def _gauge(kind: str, metric: Metric) -> float | None:
    values = [value for value, _, _ in _values(metric)]
    if not values:
        return None
    return max(values) if kind == "max" else sum(values) / len(values)


def _rate(column: str, metric: Metric, samples: dict[str, tuple[int, float]]) -> float | None:
    if not metric.HasField("sum"):
        return None
    points = list(_values(metric))
    if not points:
        return None
    total = sum(value for value, _, _ in points)
    at = max(time for _, _, time in points)
    if metric.sum.aggregation_temporality == AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA:
        window = max(time - start for _, start, time in points)
        return total / (window / 1e9) if window > 0 else None
    previous = samples.get(column)
    samples[column] = (at, total)
    if previous is None or at <= previous[0] or total < previous[1]:
        return None  # the first sample, the same push again, or the client restarted its counters
    return (total - previous[1]) / ((at - previous[0]) / 1e9)
