"""dev/demo/prometheus_view.py: the demo's PromQL summary line and dashboard panels drawn from query_range,
against a real Prometheus (dev/stack/prometheus.py, loopback) fed over OTLP as the aggregation's export feeds
it. The demo itself runs in tests/e2e/test_demo_e2e.py."""

from __future__ import annotations

import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from script_loader import load_script

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "dev" / "demo"))
import prometheus_view as view

REPO = Path(__file__).resolve().parents[2]
prometheus_stack = load_script(REPO / "dev" / "stack" / "prometheus.py")
S = 1_000_000_000


def test_the_panels_the_demo_draws_are_in_the_shipped_dashboards_with_variables_at_all() -> None:
    """Given the shipped dashboards, Then every panel the demo draws and the summary's panel exist, and their
    queries carry no variable left ($namespace etc. at `.*`, $__rate_interval a minute)."""
    found = view.panels()
    for key in (*view.PANELS, view.SUMMARY_PANEL):
        assert found.get(key), key
        assert all("$" not in promql for promql in found[key]), found[key]
    assert view.export_spec("http://10.250.0.2:9090/") == {
        "endpoint": "http://10.250.0.2:9090/api/v1/otlp/v1/metrics",
        "resourceAttributes": {"service.name": "kct-aggregation"}}


@pytest.fixture(scope="module")
def prometheus() -> Iterator[Any]:
    """A loopback Prometheus with its OTLP receiver on (a process: the tests using it are e2e)."""
    with prometheus_stack.started() as server:
        yield server


def _export(url: str, now_ns: int) -> None:
    """Two clients' record queue time, three samples each 10 s apart, as the aggregation's export sends them."""
    request = ExportMetricsServiceRequest()
    rm = request.resource_metrics.add()
    rm.resource.attributes.add(key="service.name").value.string_value = view.SERVICE_NAME
    metric = rm.scope_metrics.add().metrics.add(name="kafka.producer.record.queue.time.max", unit="ms")
    for client, software, version in (("orders", "apache-kafka-java", "3.9.0"), ("billing", "librdkafka", "2.6.1")):
        for k in range(3):
            point = metric.gauge.data_points.add(time_unix_nano=now_ns - (30 - 10 * k) * S, as_double=10.0 * (k + 1))
            for key, value in (("client_id", client), ("client_instance_id", f"{client}-1"),
                               ("client_software_name", software), ("client_software_version", version)):
                point.attributes.add(key=key).value.string_value = value
    posted = urllib.request.Request(url, data=request.SerializeToString(),
                                    headers={"Content-Type": "application/x-protobuf"}, method="POST")
    with urllib.request.urlopen(posted, timeout=10) as response:
        assert response.status == 200


@pytest.mark.e2e
def test_summary_and_panels_read_the_exported_clients(prometheus: Any) -> None:
    """Given two clients' exported queue times, When the summary's query and the report's record-queue-time
    panel run, Then the summary names each software and version with one client, and the panel has one series
    per client id with the exported values over time."""
    now_ns = time.time_ns()
    _export(prometheus.otlp_metrics_url, now_ns)

    lines = view.summary_lines(prometheus.url)
    assert lines[0].startswith("PromQL (Clients by software and version")
    assert lines[1:] == ["    apache-kafka-java 3.9.0: 1 client(s)", "    librdkafka 2.6.1: 1 client(s)"]

    (promql, _) = view.panels()["kct-clients", "Record queue time"]
    series = view.panel_series(prometheus.url, promql, now_ns / S - 35, now_ns / S, step=10)
    assert sorted(s.label for s in series) == ["billing", "orders"]
    for s in series:
        assert {v for _, v in s.points} == {10.0, 20.0, 30.0}
