"""The OTLP export of finished windows: request building (names, units, labels, merging, the series cap,
idempotence) and the sender's bounded retries, with an in-memory sender instead of an HTTP endpoint."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.metrics.v1 import metrics_pb2 as pb

from kct.aggregation.config import DEFAULT_EXPORT_LABELS, OtlpExportConfig, parse_job_config
from kct.aggregation.otlp_export import ExportError, WindowExporter
from kct.aggregation.otlp_metrics import WORKLOAD_INSTANCES, export_name, export_unit, requests_for, window_points
from kct.aggregation.workloads import WORKLOAD_KEY_COLUMNS

W0 = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)
MINUTE = dt.timedelta(minutes=1)
PRODUCER = "org.apache.kafka.producer."


def row(metric: str, *, client: str = "inst-1", k: int = 0, **fields: Any) -> dict[str, Any]:
    """A client_metrics row of window k (the export's columns), a gauge unless said otherwise."""
    base: dict[str, Any] = {
        "window_start": W0 + k * MINUTE, "window_end": W0 + (k + 1) * MINUTE, "client_instance_id": client,
        "client_id": f"id-{client}", "client_software_name": "apache-kafka-java", "client_software_version": "4.1.0",
        "client_source_address": "10.0.0.7", "client_source_port": "40000", "principal": "User:alice",
        "broker_id": "1", "metric": metric, "unit": "", "type": "gauge", "temporality": None, "monotonic": None,
        "attributes": {}, "value_last": 1.0, "delta": None, "p50": None, "p95": None, "p99": None,
    }
    base.update(fields)
    return base


# The default allow-list without the workload labels: the per-client series alone, which most tests here are
# about (the per-workload series have tests of their own, below and in test_workload_rollups.py).
CLIENT_LABELS = tuple(name for name in DEFAULT_EXPORT_LABELS if name not in WORKLOAD_KEY_COLUMNS)


def config(**overrides: Any) -> OtlpExportConfig:
    return OtlpExportConfig(**{"endpoint": "http://127.0.0.1:1/v1/metrics", "backoff_seconds": 0.5,
                               "labels": CLIENT_LABELS, **overrides})


def metrics_of(request: ExportMetricsServiceRequest) -> dict[str, pb.Metric]:
    (resource_metrics,) = request.resource_metrics
    (scope_metrics,) = resource_metrics.scope_metrics
    return {metric.name: metric for metric in scope_metrics.metrics}


def labels_of(point: pb.NumberDataPoint) -> dict[str, str]:
    return {kv.key: kv.value.string_value for kv in point.attributes}


def test_kip714_names_lose_their_org_apache_prefix_and_latencies_get_milliseconds() -> None:
    """Given KIP-714 metric names, When exported, Then they are kafka.<client>.* and latencies are in ms."""
    assert export_name(PRODUCER + "record.queue.time.max") == "kafka.producer.record.queue.time.max"
    assert export_name("org.apache.kafka.consumer.poll.idle.ratio.avg") == "kafka.consumer.poll.idle.ratio.avg"
    assert export_name("librdkafka.custom") == "librdkafka.custom"
    assert export_unit(PRODUCER + "record.queue.time.max", "") == "ms"
    assert export_unit(PRODUCER + "node.request.latency.avg", None) == "ms"
    assert export_unit(PRODUCER + "record.send.total", "") == ""
    assert export_unit(PRODUCER + "record.queue.time.max", "s") == "s"


def test_each_kind_is_exported_as_what_a_backend_can_take_stamped_with_the_window_end() -> None:
    """Given a gauge, a counter, a delta sum and a histogram in one window,
    When the window's request is built,
    Then the gauge is its newest value, the counter the client's cumulative value (a cumulative monotonic sum),
    the delta sum the window's delta from the window's start, the histogram its quantiles; all at the window end."""
    rows = [
        row(PRODUCER + "record.queue.time.max", value_last=7.5),
        row(PRODUCER + "record.send.total", type="sum", temporality="cumulative", monotonic=True,
            value_last=1200.0, delta=100.0),
        row(PRODUCER + "record.error.total", type="sum", temporality="delta", monotonic=True, delta=3.0,
            value_last=1.0),
        row(PRODUCER + "request.latency", type="histogram", unit="ms", value_last=None, p50=2.0, p95=9.0, p99=12.0),
    ]
    (window,) = window_points(rows, config())
    (request,) = requests_for(window, {"service.name": "kct-aggregation"})
    metrics = metrics_of(request)
    end_ns = int((W0 + MINUTE).timestamp()) * 10**9
    gauge = metrics["kafka.producer.record.queue.time.max"]
    assert (gauge.unit, gauge.gauge.data_points[0].as_double, gauge.gauge.data_points[0].time_unix_nano) == (
        "ms", 7.5, end_ns)
    counter = metrics["kafka.producer.record.send.total"].sum
    assert (counter.is_monotonic, counter.aggregation_temporality) == (True, pb.AGGREGATION_TEMPORALITY_CUMULATIVE)
    assert (counter.data_points[0].as_double, counter.data_points[0].time_unix_nano) == (1200.0, end_ns)
    delta = metrics["kafka.producer.record.error.total"].sum
    assert delta.aggregation_temporality == pb.AGGREGATION_TEMPORALITY_DELTA
    assert (delta.data_points[0].as_double, delta.data_points[0].start_time_unix_nano) == (
        3.0, int(W0.timestamp()) * 10**9)
    quantiles = {labels_of(p)["quantile"]: p.as_double
                 for p in metrics["kafka.producer.request.latency"].gauge.data_points}
    assert quantiles == {"0.5": 2.0, "0.95": 9.0, "0.99": 12.0}
    (resource_metrics,) = request.resource_metrics
    assert [(kv.key, kv.value.string_value) for kv in resource_metrics.resource.attributes] == [
        ("service.name", "kct-aggregation")]


def test_only_allowed_labels_are_kept_and_rows_that_then_coincide_are_merged() -> None:
    """Given per-partition rows of one client (topic and partition attributes),
    When exported with the default labels (no partition, no topic, no source address),
    Then one series per metric remains: counters summed, a `.max` gauge the max, an `.avg` gauge the mean."""
    rows = [
        *(row(PRODUCER + "record.send.total", type="sum", temporality="cumulative", monotonic=True,
              value_last=float(10 * p), attributes={"topic": "t", "partition": str(p)}) for p in range(3)),
        *(row(PRODUCER + "record.queue.time.max", value_last=float(p), attributes={"partition": str(p)})
          for p in range(3)),
        *(row(PRODUCER + "record.queue.time.avg", value_last=float(p), attributes={"partition": str(p)})
          for p in range(3)),
        row(PRODUCER + "node.request.latency.max", value_last=4.0, attributes={"node_id": "2"}),
    ]
    (window,) = window_points(rows, config())
    by_name = {point.name: point for point in window.points}
    assert len(window.points) == 4
    assert by_name["kafka.producer.record.send.total"].value == 30.0
    assert by_name["kafka.producer.record.queue.time.max"].value == 2.0
    assert by_name["kafka.producer.record.queue.time.avg"].value == 1.0
    assert dict(by_name["kafka.producer.record.send.total"].labels) == {
        "client_instance_id": "inst-1", "client_id": "id-inst-1", "client_software_name": "apache-kafka-java",
        "client_software_version": "4.1.0"}
    assert dict(by_name["kafka.producer.node.request.latency.max"].labels)["node_id"] == "2"
    assert set(DEFAULT_EXPORT_LABELS) >= {"client_instance_id", "client_software_name"}


def test_client_instance_id_is_always_kept() -> None:
    """Given an allow-list without client_instance_id, When two clients' rows are exported,
    Then their series stay apart (the instance id is added), not merged into one."""
    rows = [row(PRODUCER + "record.queue.time.max", client=c, value_last=v) for c, v in (("a", 1.0), ("b", 5.0))]
    (window,) = window_points(rows, config(labels=("client_software_name",)))
    assert sorted((dict(p.labels)["client_instance_id"], p.value) for p in window.points) == [("a", 1.0), ("b", 5.0)]


def test_the_series_cap_keeps_whole_clients_in_order_and_counts_the_rest() -> None:
    """Given 5 clients with 3 series each in a window and a cap of 7 series,
    When exported, Then the first 2 clients (6 series) are sent, the other 3 clients' 9 series are dropped
    and counted, and the exporter's overflow counter says 9."""
    rows = [row(PRODUCER + m, client=f"c{i}") for i in range(5) for m in ("a.avg", "b.avg", "c.avg")]
    (window,) = window_points(rows, config(max_series_per_window=7))
    assert {dict(p.labels)["client_instance_id"] for p in window.points} == {"c0", "c1"}
    assert (len(window.points), window.dropped_series, window.dropped_clients) == (6, 9, 3)

    sent: list[bytes] = []
    exporter = WindowExporter(config(max_series_per_window=7), FakeSender(sent), sleep=lambda _s: None)
    status = exporter.export_rows(rows)
    assert (status.series_sent, status.series_dropped, status.windows_sent) == (6, 9, 1)
    own = metrics_of(ExportMetricsServiceRequest.FromString(sent[0]))
    assert own["kct.aggregation.export.series.dropped"].sum.data_points[0].as_int == 9
    assert own["kct.aggregation.export.series"].gauge.data_points[0].as_int == 6


def test_a_window_is_exported_the_same_way_every_time() -> None:
    """Given the same finished windows sent twice (a replayed micro-batch),
    When their requests are built, Then the data points are byte for byte the same (same series, timestamps
    and cumulative values), so the backend sees duplicates, not a doubled counter; windows go oldest first."""
    rows = [row(PRODUCER + "record.send.total", type="sum", temporality="cumulative", monotonic=True,
                value_last=100.0 * (k + 1), k=k, client=c) for k in (1, 0) for c in ("b", "a")]

    def built() -> list[bytes]:
        return [r.SerializeToString() for w in window_points(list(reversed(rows)), config())
                for r in requests_for(w, {"service.name": "x"})]

    first, again = built(), built()
    assert first == again
    ends = [w.window_end_ns for w in window_points(rows, config())]
    assert ends == sorted(ends) and len(ends) == 2


def test_a_clients_without_a_row_in_a_window_gets_no_series_there() -> None:
    """Given client b pushing in window 0 only, When windows 0 and 1 are exported, Then window 1 has no
    series of b (it goes stale in the backend), and no empty series is invented for it."""
    rows = [row(PRODUCER + "x.avg", client="a", k=0), row(PRODUCER + "x.avg", client="b", k=0),
            row(PRODUCER + "x.avg", client="a", k=1)]
    first, second = window_points(rows, config())
    assert {dict(p.labels)["client_instance_id"] for p in first.points} == {"a", "b"}
    assert {dict(p.labels)["client_instance_id"] for p in second.points} == {"a"}


def test_large_windows_are_split_into_requests_without_losing_a_point() -> None:
    """Given a window of 25 series and 10 points per request, When built, Then 3 requests carry all 25."""
    rows = [row(PRODUCER + f"m{i}.avg") for i in range(25)]
    (window,) = window_points(rows, config())
    requests = requests_for(window, {}, points_per_request=10)
    counts = [sum(len(m.gauge.data_points) for m in metrics_of(r).values()) for r in requests]
    assert counts == [10, 10, 5]


class FakeSender:
    """Records bodies; fails the first `failures` calls (retryable unless said otherwise)."""

    def __init__(self, sent: list[bytes], failures: int = 0, retryable: bool = True) -> None:
        self.sent = sent
        self.failures = failures
        self.retryable = retryable
        self.calls = 0

    def send(self, body: bytes) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise ExportError("connection refused", retryable=self.retryable)
        self.sent.append(body)


def test_an_endpoint_that_recovers_within_the_attempts_gets_the_window() -> None:
    """Given an endpoint failing twice, When a window is exported with 4 attempts,
    Then it is sent on the third, after waits of 0.5 s and 1 s (doubling), and no window counts as failed."""
    sent: list[bytes] = []
    waits: list[float] = []
    sender = FakeSender(sent, failures=2)
    status = WindowExporter(config(), sender, sleep=waits.append).export_rows([row(PRODUCER + "a.avg")])
    assert (sender.calls, len(sent), waits) == (3, 1, [0.5, 1.0])
    assert (status.windows_sent, status.windows_failed, status.requests_failed) == (1, 0, 2)


def test_an_endpoint_that_is_down_is_retried_boundedly_counted_and_never_raises() -> None:
    """Given an endpoint that is down, When two windows are exported with 3 attempts each,
    Then each window is tried 3 times and given up without an exception, both are counted as failed with the
    last error, and once the endpoint is back the next request carries the failure counter (2)."""
    sent: list[bytes] = []
    waits: list[float] = []
    sender = FakeSender(sent, failures=6)
    exporter = WindowExporter(config(max_attempts=3), sender, sleep=waits.append)
    status = exporter.export_rows([row(PRODUCER + "a.avg", k=0), row(PRODUCER + "a.avg", k=1)])
    assert (sender.calls, sent, waits) == (6, [], [0.5, 1.0, 0.5, 1.0])
    assert (status.windows_failed, status.requests_failed, status.windows_sent) == (2, 6, 0)
    assert "connection refused" in status.last_error and "attempt 3 of 3" in status.last_error

    exporter.export_rows([row(PRODUCER + "a.avg", k=2)])
    own = metrics_of(ExportMetricsServiceRequest.FromString(sent[0]))
    assert own["kct.aggregation.export.failures"].sum.data_points[0].as_int == 2
    assert own["kct.aggregation.export.requests.failed"].sum.data_points[0].as_int == 6


def test_a_refused_request_is_not_retried() -> None:
    """Given an endpoint answering 400 (not retryable), When a window is exported, Then one attempt, failed."""
    sender = FakeSender([], failures=1, retryable=False)
    status = WindowExporter(config(), sender, sleep=lambda _s: None).export_rows([row(PRODUCER + "a.avg")])
    assert (sender.calls, status.windows_failed) == (1, 1)


def test_the_job_config_takes_an_export_section_and_refuses_typos() -> None:
    """Given a job config with an export section, When parsed, Then headers are expanded from the environment
    and a misspelt key is an error naming it."""
    base = {"source": {"bootstrapServers": "b"}, "parquet": {"path": "/x"}}
    cfg = parse_job_config({**base, "export": {"endpoint": "https://otlp:4318/v1/metrics",
                                               "headers": {"Authorization": "Bearer ${KCT_TEST_UNSET:-t0k}"},
                                               "maxSeriesPerWindow": 10}})
    assert cfg.export is not None
    assert (cfg.export.headers["Authorization"], cfg.export.max_series_per_window) == ("Bearer t0k", 10)
    assert cfg.export.labels == DEFAULT_EXPORT_LABELS
    with pytest.raises(ValueError, match=r"export\.maxSeries"):
        parse_job_config({**base, "export": {"endpoint": "http://x", "maxSeries": 1}})


class _Endpoint:
    """A loopback HTTP endpoint answering the given status codes in turn (then 200), recording requests."""

    def __init__(self, answers: list[int]) -> None:
        import http.server
        import threading

        self.answers = list(answers)
        self.requests: list[tuple[dict[str, str], bytes]] = []
        endpoint = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                endpoint.requests.append((dict(self.headers.items()), body))
                code = endpoint.answers.pop(0) if endpoint.answers else 200
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                return

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/metrics"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_the_http_sender_posts_protobuf_with_the_headers_and_retries_a_503() -> None:
    """Given an endpoint answering 503 once, When a window is exported over HTTP with an Authorization header,
    Then the request is posted twice as application/x-protobuf with the header, and the second is accepted."""
    endpoint = _Endpoint([503])
    try:
        cfg = OtlpExportConfig(endpoint=endpoint.url, headers={"Authorization": "Bearer t0k"}, backoff_seconds=0.0)
        status = WindowExporter(cfg).export_rows([row(PRODUCER + "record.queue.time.max", value_last=3.0)])
    finally:
        endpoint.close()
    assert (status.windows_sent, status.requests_failed) == (1, 1)
    assert len(endpoint.requests) == 2
    headers, body = endpoint.requests[1]
    assert (headers["Content-Type"], headers["Authorization"]) == ("application/x-protobuf", "Bearer t0k")
    assert "kafka.producer.record.queue.time.max" in metrics_of(ExportMetricsServiceRequest.FromString(body))


def test_rows_collected_through_arrow_give_the_same_points() -> None:
    """Given a row as Arrow's to_pylist gives it (attributes as (key, value) pairs, an aware window end),
    When exported, Then its point equals the one of the same row as a Spark Row gives it (a dict)."""
    as_row = row(PRODUCER + "node.request.latency.avg", value_last=2.0, attributes={"node_id": "3", "x": "y"})
    as_arrow = {**as_row, "attributes": [("node_id", "3"), ("x", "y")]}
    assert window_points([as_arrow], config()) == window_points([as_row], config())


def test_per_workload_series_merge_a_workloads_clients_and_take_their_place_under_the_cap() -> None:
    """Given a window with two clients of one Deployment (gauges 3 and 8, counters 10 and 20), one client
    without a workload, and the default allow-list (workload labels on it),
    When exported, Then the Deployment has one series per metric without an instance id (`.max`: the max,
    counters: added) and its instance count 2, the unattributed client one series without workload labels
    (count 1), each client keeps its own series labelled with its workload; a cap that leaves room for the
    workloads and one client keeps the workloads whole and drops the clients after the first.
    Without workload labels in the allow-list no per-workload series is sent."""
    orders = {"k8s_namespace_name": "shop", "k8s_workload_kind": "deployment", "k8s_workload_name": "orders",
              "k8s_pod_name": "orders-1"}
    rows = [
        *(row(PRODUCER + "record.queue.time.max", client=c, value_last=v, **orders)
          for c, v in (("a", 3.0), ("b", 8.0))),
        *(row(PRODUCER + "record.send.total", client=c, type="sum", temporality="cumulative", monotonic=True,
              value_last=v, **orders) for c, v in (("a", 10.0), ("b", 20.0))),
        row(PRODUCER + "record.queue.time.max", client="z", value_last=1.0),
    ]
    (window,) = window_points(rows, config(labels=DEFAULT_EXPORT_LABELS))
    workload = tuple(sorted((k, v) for k, v in orders.items() if k in WORKLOAD_KEY_COLUMNS))
    per_workload = {(p.name, p.labels): p.value for p in window.points
                    if "client_instance_id" not in dict(p.labels)}
    assert per_workload == {
        ("kafka.producer.record.queue.time.max", workload): 8.0, ("kafka.producer.record.send.total", workload): 30.0,
        (WORKLOAD_INSTANCES, workload): 2.0,
        ("kafka.producer.record.queue.time.max", ()): 1.0, (WORKLOAD_INSTANCES, ()): 1.0,
    }
    a_labels = next(dict(p.labels) for p in window.points if dict(p.labels).get("client_instance_id") == "a")
    assert {k: a_labels[k] for k in WORKLOAD_KEY_COLUMNS} == dict(workload) and "k8s_pod_name" not in a_labels
    assert len(window.points) == len(per_workload) + 2 + 2 + 1

    (capped,) = window_points(rows, config(labels=DEFAULT_EXPORT_LABELS, max_series_per_window=len(per_workload) + 2))
    assert {p.labels for p in capped.points if "client_instance_id" not in dict(p.labels)} == {
        labels for _, labels in per_workload}
    assert {dict(p.labels).get("client_instance_id") for p in capped.points} == {None, "a"}
    assert (capped.dropped_series, capped.dropped_clients) == (3, 2)

    (clients_only,) = window_points(rows, config())
    assert all("client_instance_id" in dict(p.labels) for p in clients_only.points)
