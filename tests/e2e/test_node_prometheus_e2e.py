"""The node stack's Prometheus (dev/stack/prometheus.py, started by `node-up` in the node's namespaces): reached
from the host through the forwarder, it discovers and scrapes the operator's pods on their metrics port, as the
chart installs them, and takes OTLP. The fixtures `node_stack` and `operator_release` are in conftest.py."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from typing import Any

import pytest
from helpers import eventually
from node_support import NODE_ENV, NodeStack, Release, env_file
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

pytestmark = pytest.mark.e2e


def _query(url: str, promql: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}",
                                timeout=10) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def test_the_node_prometheus_scrapes_the_operator_and_takes_otlp(node_stack: NodeStack,
                                                                 operator_release: Release) -> None:
    """Given the node stack and the chart installed (its operator serving /metrics on port `metrics`),
    When the node's Prometheus is asked from the host, Then it scrapes the operator's pod (up == 1, labelled with
    the release's namespace and the pod's name), and an OTLP sample posted to it can be queried back."""
    env = env_file(NODE_ENV)
    url = env["KCT_NODE_PROMETHEUS_URL"]
    assert env["KCT_NODE_PROMETHEUS_POD_URL"].endswith(":9090")
    pods = {p["metadata"]["name"] for p in node_stack.get("pods", "-n", operator_release.namespace)["items"]}

    def operator_up() -> list[dict[str, Any]]:
        return _query(url, f'up{{job="kct-operator", namespace="{operator_release.namespace}"}} == 1')

    # With leader election off or on, every replica serves /metrics: one pod per replica.
    samples = eventually(operator_up, timeout=120, interval=2, what="the operator's pods scraped")
    assert {s["metric"]["pod"] for s in samples} <= pods

    request = ExportMetricsServiceRequest()
    rm = request.resource_metrics.add()
    rm.resource.attributes.add(key="service.name").value.string_value = "kct-node-e2e"
    metric = rm.scope_metrics.add().metrics.add(name="kct.node.e2e.probe")
    metric.gauge.data_points.add(time_unix_nano=time.time_ns(), as_double=42.0)
    posted = urllib.request.Request(f"{url}/api/v1/otlp/v1/metrics", data=request.SerializeToString(),
                                    headers={"Content-Type": "application/x-protobuf"}, method="POST")
    with urllib.request.urlopen(posted, timeout=10) as response:
        assert response.status == 200
    (probe,) = _query(url, 'kct_node_e2e_probe{job="kct-node-e2e"}')
    assert float(probe["value"][1]) == 42.0
