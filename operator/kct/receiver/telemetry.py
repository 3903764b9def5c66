"""The receiver's own metrics, by layer (like an API gateway's global / proxy / backend layers).

    ingress   HTTP: http.server.request.duration, http.server.active_requests,
              http.server.request.body.size, every refusal by reason (kct.receiver.rejections), open
              connections and the connections the receiver closed, by reason (kct.receiver.connections.*)
    pipeline  per stage timings (decompress, decode, sanitize incl. re-encoding, attribute), points
              accepted/rejected, private attributes dropped, rate-limit and quota state and throttle time,
              pushes by attribution outcome (when attribution is on)
    sink      messaging.client.operation.duration, messaging.client.sent.messages, in-flight records,
              Kafka readiness

Names are OpenTelemetry semantic-convention names, exposed for Prometheus with the usual conversion
(dots -> underscores, unit suffix, `_total` on counters). A disabled layer registers nothing and costs a
no-op call: enable only the layers you look at.

The per-push recording is plain integer and float arithmetic on this module's own accumulators (a bisect
and two additions per observation, no lock: everything runs on the event loop's thread); prometheus_client
only formats them when /metrics is scraped. Its own Histogram and Counter objects take a lock and walk
the buckets on every call, which was ~4 % of a push's CPU.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Gauge, disable_created_metrics
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from kct.receiver.config import ObservabilityConfig

__all__ = ["CONTENT_TYPE_LATEST", "Telemetry"]

_DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_STAGE_BUCKETS = (0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05)
_SIZE_BUCKETS = (256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)


class _Histogram:
    """Observations per label values: per-bucket counts (not cumulative) and their sum, exposed as a
    Prometheus histogram (cumulative `le` buckets, `_count`, `_sum`) when scraped."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float]) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, tuple(labelnames)
        self.bounds = tuple(float(b) for b in buckets)
        self._les = [str(floatToGoString(b)) for b in self.bounds] + ["+Inf"]  # type: ignore[no-untyped-call]
        self.series: dict[tuple[str, ...], list[float]] = {}  # counts per bucket (+Inf last), then the sum

    def child(self, *labelvalues: str) -> Callable[[float], None]:
        """The observe function of one label set (a closure over its accumulator list)."""
        acc = self.series.get(labelvalues)
        if acc is None:
            acc = self.series[labelvalues] = [0.0] * (len(self.bounds) + 2)
        bounds, sum_index = self.bounds, len(self.bounds) + 1

        def observe(value: float) -> None:
            acc[bisect_left(bounds, value)] += 1  # `le` buckets: value <= bound
            acc[sum_index] += value

        return observe

    def collect(self) -> Metric:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labelvalues, acc in self.series.items():
            running, buckets = 0.0, []
            for le, count in zip(self._les, acc, strict=False):
                running += count
                buckets.append((le, running))
            family.add_metric(list(labelvalues), buckets, acc[-1])
        return family


class _Counter:
    """A counter per label values, exposed with the `_total` suffix when scraped."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, tuple(labelnames)
        self.values: dict[tuple[str, ...], float] = {}

    def inc(self, labelvalues: tuple[str, ...], amount: float = 1.0) -> None:
        self.values[labelvalues] = self.values.get(labelvalues, 0.0) + amount

    def collect(self) -> Metric:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labelvalues, value in self.values.items():
            family.add_metric(list(labelvalues), value)
        return family


class _Families(Collector):
    """Registers this module's accumulators with a prometheus_client registry, formatted at scrape time."""

    def __init__(self, *families: _Histogram | _Counter) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        for family in self.families:
            yield family.collect()

    def describe(self) -> Iterator[Metric]:
        for family in self.families:
            yield family.collect()


def _noop(*_args: object, **_kwargs: object) -> None:
    return None


class Telemetry:
    def __init__(self, config: ObservabilityConfig, topic: str = "") -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # `_created` series double the scrape size and say little here
        self.registry = CollectorRegistry(auto_describe=True)
        self.config = config
        self._topic = topic
        self.request_done: Callable[[str, str, int, float, int], None] = _noop
        self.rejected: Callable[[str, int], None] = _noop
        self.active_add: Callable[[int], None] = _noop
        self.connection_closed: Callable[[str], None] = _noop
        self.stage: Callable[[str, float], None] = _noop
        self.push_accepted: Callable[[int, int, int, bool], None] = _noop
        self.throttled: Callable[[str, float], None] = _noop
        self.sent: Callable[[float, str | None], None] = _noop
        self.attributed: Callable[[str], None] = _noop
        if config.ingress:
            self._ingress()
        if config.pipeline:
            self._pipeline()
        if config.sink:
            self._sink()

    def render(self) -> bytes:
        return bytes(generate_latest(self.registry))

    # -- ingress ---------------------------------------------------------------------------------
    def _ingress(self) -> None:
        duration = _Histogram(
            "http_server_request_duration_seconds",
            "Duration of HTTP server requests (http.server.request.duration).",
            ["http_request_method", "http_route", "http_response_status_code"],
            _DURATION_BUCKETS,
        )
        body = _Histogram(
            "http_server_request_body_size_bytes",
            "Size of HTTP request bodies as received (http.server.request.body.size).",
            ["http_request_method", "http_route"],
            _SIZE_BUCKETS,
        )
        rejections = _Counter(
            "kct_receiver_rejections",
            "Pushes refused, by reason (kct.receiver.rejections).",
            ["reason", "http_response_status_code"],
        )
        closed = _Counter(
            "kct_receiver_connections_closed",
            "Connections the receiver closed to protect itself, by reason: connection_limit, buffer_limit, "
            "header_timeout, body_timeout, idle_timeout (kct.receiver.connections.closed).",
            ["reason"],
        )
        self.registry.register(_Families(duration, body, rejections, closed))
        for reason in ("connection_limit", "buffer_limit", "header_timeout", "body_timeout", "idle_timeout"):
            closed.inc((reason,), 0.0)
        active = [0]
        Gauge(
            "http_server_active_requests", "Active HTTP server requests (http.server.active_requests).",
            registry=self.registry,
        ).set_function(lambda: float(active[0]))
        dur_children: dict[tuple[str, str, int], Callable[[float], None]] = {}
        body_children: dict[tuple[str, str], Callable[[float], None]] = {}

        def request_done(method: str, route: str, status: int, seconds: float, size: int) -> None:
            key = (method, route, status)
            observe = dur_children.get(key)
            if observe is None:
                observe = dur_children[key] = duration.child(method, route, str(status))
            observe(seconds)
            if size >= 0:
                bkey = (method, route)
                bobserve = body_children.get(bkey)
                if bobserve is None:
                    bobserve = body_children[bkey] = body.child(method, route)
                bobserve(size)

        def rejected(reason: str, status: int) -> None:
            rejections.inc((reason, str(status)))

        def active_add(n: int) -> None:
            active[0] += n

        def connection_closed(reason: str) -> None:
            closed.inc((reason,))

        self.request_done = request_done
        self.rejected = rejected
        self.active_add = active_add
        self.connection_closed = connection_closed

    def track_connections(self, open_connections: Callable[[], int], buffered_bytes: Callable[[], int]) -> None:
        """Gauges read at scrape time (ingress layer)."""
        if not self.config.ingress:
            return
        Gauge(
            "kct_receiver_connections_open", "Open connections (kct.receiver.connections.open).",
            registry=self.registry,
        ).set_function(lambda: float(open_connections()))
        Gauge(
            "kct_receiver_connections_buffered_bytes",
            "Bytes of requests not yet whole, over all connections (kct.receiver.connections.buffered).",
            registry=self.registry,
        ).set_function(lambda: float(buffered_bytes()))

    def track_admission(self, queued: Callable[[], int]) -> None:
        """The pushes waiting for a place (kct.receiver.admission), read at scrape time (ingress layer)."""
        if not self.config.ingress:
            return
        Gauge(
            "kct_receiver_admission_queued",
            "Pushes waiting in arrival order for a place (kct.receiver.admission.queued).",
            registry=self.registry,
        ).set_function(lambda: float(queued()))

    # -- pipeline --------------------------------------------------------------------------------
    def _pipeline(self) -> None:
        stage = _Histogram(
            "kct_receiver_pipeline_stage_duration_seconds",
            "Time per pipeline stage (kct.receiver.pipeline.stage.duration).",
            ["stage"],
            _STAGE_BUCKETS,
        )
        points = _Counter(
            "kct_receiver_data_points", "Data points received, by outcome (kct.receiver.data_points).", ["outcome"]
        )
        pushes = _Counter(
            "kct_receiver_pushes", "Pushes stored, by whether the value was re-encoded (kct.receiver.pushes).",
            ["modified"],
        )
        dropped = _Counter(
            "kct_receiver_attributes_dropped",
            "Private attributes removed (KIP-714) (kct.receiver.attributes.dropped).",
            [],
        )
        throttle = _Histogram(
            "kct_receiver_throttle_time_seconds",
            "Retry-After given to rate-limited or quota-throttled pushes (kct.receiver.throttle.time).",
            ["reason"],
            (1, 2, 5, 10, 30, 60, 300),
        )
        self.registry.register(_Families(stage, points, pushes, dropped, throttle))
        # the series every scrape shows, even at 0 (as prometheus_client's labelled children did)
        for outcome in ("accepted", "rejected"):
            points.inc((outcome,), 0.0)
        for modified in ("true", "false"):
            pushes.inc((modified,), 0.0)
        dropped.inc((), 0.0)
        stage_children: dict[str, Callable[[float], None]] = {}
        values = points.values

        def stage_done(name: str, seconds: float) -> None:
            observe = stage_children.get(name)
            if observe is None:
                observe = stage_children[name] = stage.child(name)
            observe(seconds)

        def push_accepted(kept: int, rejected: int, attributes_dropped: int, modified: bool) -> None:
            values[("accepted",)] += kept
            if rejected:
                values[("rejected",)] += rejected
            if attributes_dropped:
                dropped.inc((), attributes_dropped)
            pushes.inc(("true",) if modified else ("false",))

        def throttled(reason: str, seconds: float) -> None:
            throttle.child(reason)(seconds)

        self.stage = stage_done
        self.push_accepted = push_accepted
        self.throttled = throttled

    def track_attribution(self) -> None:
        """kct.receiver.attribution.pushes by outcome (pipeline layer, when attribution is on): `attributed`
        (source `pod` or `rule`), `ambiguous` (a node address shared by hostNetwork pods), `unattributed`
        (outside the cluster, SNAT, unknown)."""
        if not self.config.pipeline:
            return
        pushes = _Counter(
            "kct_receiver_attribution_pushes",
            "Pushes by attribution outcome (kct.receiver.attribution.pushes).",
            ["outcome", "source"],
        )
        self.registry.register(_Families(pushes))
        keys = {
            "pod": ("attributed", "pod"), "rule": ("attributed", "rule"),
            "ambiguous": ("ambiguous", ""), "unattributed": ("unattributed", ""),
        }
        for key in keys.values():
            pushes.inc(key, 0.0)
        values = pushes.values

        def attributed(outcome: str) -> None:
            values[keys[outcome]] += 1

        self.attributed = attributed

    def track_state(self, rate_limited_clients: Callable[[], int], quota_entities: Callable[[], int]) -> None:
        """Gauges read at scrape time (pipeline layer)."""
        if not self.config.pipeline:
            return
        Gauge(
            "kct_receiver_rate_limit_tracked_clients", "Client instances with push-interval state.",
            registry=self.registry,
        ).set_function(lambda: float(rate_limited_clients()))
        Gauge(
            "kct_receiver_quota_tracked_entities", "Quota entities with a live rate.", registry=self.registry
        ).set_function(lambda: float(quota_entities()))

    # -- sink ------------------------------------------------------------------------------------
    def _sink(self) -> None:
        duration = _Histogram(
            "messaging_client_operation_duration_seconds",
            "Time from produce to Kafka's acknowledgement (messaging.client.operation.duration).",
            ["messaging_system", "messaging_operation_name", "messaging_destination_name", "error_type"],
            _DURATION_BUCKETS,
        )
        sent = _Counter(
            "messaging_client_sent_messages",
            "Records handed to Kafka, by outcome (messaging.client.sent.messages).",
            ["messaging_system", "messaging_destination_name", "error_type"],
        )
        self.registry.register(_Families(duration, sent))
        topic = self._topic
        dur_children: dict[str, Callable[[float], None]] = {}

        def sent_done(seconds: float, error_type: str | None) -> None:
            err = error_type or ""
            observe = dur_children.get(err)
            if observe is None:
                observe = dur_children[err] = duration.child("kafka", "send", topic, err)
            observe(seconds)
            sent.inc(("kafka", topic, err))

        self.sent = sent_done

    def track_sink(self, inflight: Callable[[], int], ready: Callable[[], bool]) -> None:
        if not self.config.sink:
            return
        Gauge(
            "kct_receiver_sink_inflight_records", "Records awaiting Kafka's acknowledgement.",
            registry=self.registry,
        ).set_function(lambda: float(inflight()))
        Gauge(
            "kct_receiver_sink_ready", "1 when Kafka is reachable and the topic exists.", registry=self.registry
        ).set_function(lambda: 1.0 if ready() else 0.0)
