"""The receiver's own metrics, by layer (like an API gateway's global / proxy / backend layers).

    ingress   HTTP: http.server.request.duration, http.server.active_requests,
              http.server.request.body.size, and every refusal by reason (kct.receiver.rejections)
    pipeline  per stage timings (decompress, decode, sanitize incl. re-encoding), points accepted/rejected,
              private attributes dropped, rate-limit and quota state and throttle time
    sink      messaging.client.operation.duration, messaging.client.sent.messages, in-flight records,
              Kafka readiness

Names are OpenTelemetry semantic-convention names, exposed for Prometheus with the usual conversion
(dots -> underscores, unit suffix, `_total` on counters). A disabled layer registers nothing and costs a
no-op call: enable only the layers you look at.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from kct.receiver.config import ObservabilityConfig

__all__ = ["CONTENT_TYPE_LATEST", "Telemetry"]

_DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_STAGE_BUCKETS = (0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05)
_SIZE_BUCKETS = (256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)


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
        self.stage: Callable[[str, float], None] = _noop
        self.push_accepted: Callable[[int, int, int, bool], None] = _noop
        self.throttled: Callable[[str, float], None] = _noop
        self.sent: Callable[[float, str | None], None] = _noop
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
        reg = self.registry
        duration = Histogram(
            "http_server_request_duration_seconds",
            "Duration of HTTP server requests (http.server.request.duration).",
            ["http_request_method", "http_route", "http_response_status_code"],
            buckets=_DURATION_BUCKETS,
            registry=reg,
        )
        body = Histogram(
            "http_server_request_body_size_bytes",
            "Size of HTTP request bodies as received (http.server.request.body.size).",
            ["http_request_method", "http_route"],
            buckets=_SIZE_BUCKETS,
            registry=reg,
        )
        active = Gauge(
            "http_server_active_requests", "Active HTTP server requests (http.server.active_requests).",
            registry=reg,
        )
        rejections = Counter(
            "kct_receiver_rejections",
            "Pushes refused, by reason (kct.receiver.rejections).",
            ["reason", "http_response_status_code"],
            registry=reg,
        )
        dur_children: dict[tuple[str, str, int], Histogram] = {}
        body_children: dict[tuple[str, str], Histogram] = {}
        rej_children: dict[tuple[str, int], Counter] = {}

        def request_done(method: str, route: str, status: int, seconds: float, size: int) -> None:
            key = (method, route, status)
            child = dur_children.get(key)
            if child is None:
                child = dur_children[key] = duration.labels(method, route, str(status))
            child.observe(seconds)
            if size >= 0:
                bkey = (method, route)
                bchild = body_children.get(bkey)
                if bchild is None:
                    bchild = body_children[bkey] = body.labels(method, route)
                bchild.observe(size)

        def rejected(reason: str, status: int) -> None:
            key = (reason, status)
            child = rej_children.get(key)
            if child is None:
                child = rej_children[key] = rejections.labels(reason, str(status))
            child.inc()

        self.request_done = request_done
        self.rejected = rejected
        self.active_add = active.inc

    # -- pipeline --------------------------------------------------------------------------------
    def _pipeline(self) -> None:
        reg = self.registry
        stage = Histogram(
            "kct_receiver_pipeline_stage_duration_seconds",
            "Time per pipeline stage (kct.receiver.pipeline.stage.duration).",
            ["stage"],
            buckets=_STAGE_BUCKETS,
            registry=reg,
        )
        points = Counter(
            "kct_receiver_data_points", "Data points received, by outcome (kct.receiver.data_points).",
            ["outcome"], registry=reg,
        )
        pushes = Counter(
            "kct_receiver_pushes", "Pushes stored, by whether the value was re-encoded (kct.receiver.pushes).",
            ["modified"], registry=reg,
        )
        dropped = Counter(
            "kct_receiver_attributes_dropped",
            "Private attributes removed (KIP-714) (kct.receiver.attributes.dropped).",
            registry=reg,
        )
        throttle = Histogram(
            "kct_receiver_throttle_time_seconds",
            "Retry-After given to rate-limited or quota-throttled pushes (kct.receiver.throttle.time).",
            ["reason"],
            buckets=(1, 2, 5, 10, 30, 60, 300),
            registry=reg,
        )
        stage_children: dict[str, Histogram] = {}
        accepted_points, rejected_points = points.labels("accepted"), points.labels("rejected")
        pushes_modified, pushes_untouched = pushes.labels("true"), pushes.labels("false")

        def stage_done(name: str, seconds: float) -> None:
            child = stage_children.get(name)
            if child is None:
                child = stage_children[name] = stage.labels(name)
            child.observe(seconds)

        def push_accepted(kept: int, rejected: int, attributes_dropped: int, modified: bool) -> None:
            accepted_points.inc(kept)
            if rejected:
                rejected_points.inc(rejected)
            if attributes_dropped:
                dropped.inc(attributes_dropped)
            (pushes_modified if modified else pushes_untouched).inc()

        def throttled(reason: str, seconds: float) -> None:
            throttle.labels(reason).observe(seconds)

        self.stage = stage_done
        self.push_accepted = push_accepted
        self.throttled = throttled

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
        reg = self.registry
        labels = ["messaging_system", "messaging_operation_name", "messaging_destination_name", "error_type"]
        duration = Histogram(
            "messaging_client_operation_duration_seconds",
            "Time from produce to Kafka's acknowledgement (messaging.client.operation.duration).",
            labels,
            buckets=_DURATION_BUCKETS,
            registry=reg,
        )
        sent = Counter(
            "messaging_client_sent_messages",
            "Records handed to Kafka, by outcome (messaging.client.sent.messages).",
            ["messaging_system", "messaging_destination_name", "error_type"],
            registry=reg,
        )
        topic = self._topic
        dur_children: dict[str, Histogram] = {}
        sent_children: dict[str, Counter] = {}

        def sent_done(seconds: float, error_type: str | None) -> None:
            err = error_type or ""
            d = dur_children.get(err)
            if d is None:
                d = dur_children[err] = duration.labels("kafka", "send", topic, err)
            d.observe(seconds)
            s = sent_children.get(err)
            if s is None:
                s = sent_children[err] = sent.labels("kafka", topic, err)
            s.inc()

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
