"""Every panel of the shipped dashboards and every expression of the shipped alert rules, run against a live
Prometheus that holds what the pipeline produces: a real receiver's /metrics (scraped) and the aggregates of a
real Spark batch run (over OTLP).

Loopback processes only: a Kafka broker on free ports (as bench/receiver_slow_senders.py starts it), a
`kct receiver` writing to it, the Prometheus of dev/stack/prometheus.py with its OTLP receiver on and a scrape
job `kct-receiver` for the receiver (labelled with the `namespace` and `pod` Kubernetes discovery would give
it), and the tests' local Spark aggregating pushes of a producer and a consumer that send the metrics the
dashboards draw. Each panel's variables are replaced by a value Prometheus has for them (as Grafana would
offer), `$__rate_interval` by a range that holds several scrapes.

A panel that this setup cannot feed is listed in NO_DATA_HERE with the reason; every other panel must return
series, so a new panel is either fed here or classified.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from script_loader import load_script
from waiting import eventually

from kct.aggregation.batch import run_batch
from kct.aggregation.config import parse_job_config
from kct.aggregation.synthetic import PREFIX, SyntheticClient, TelemetryRecord, build_request

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[3]
DASHBOARDS = REPO / "helm" / "kct" / "dashboards"
RULES = REPO / "helm" / "kct" / "rules" / "kct.rules.yaml"
prometheus_stack = load_script(REPO / "dev" / "stack" / "prometheus.py")
SLOW = load_script(REPO / "bench" / "receiver_slow_senders.py")  # its broker, topic and receiver helpers

S = 1_000_000_000
PUSHES = 12  # every 10 s: two one-minute windows, ended before the test runs
# $__rate_interval: long enough to span the pushes (made before the Spark run) and many 1 s scrapes, so a rate
# or a histogram quantile over it is a number, not 0 / 0.
RATE_INTERVAL = "5m"
RECEIVER_LABELS = {"namespace": "kct-e2e", "pod": "kct-e2e-receiver-0"}
FIRST_SCRAPED = ("http_server_request_duration_seconds_count", "messaging_client_operation_duration_seconds_count")

# (dashboard uid, panel title, refId) -> why this setup cannot give it data.
NO_DATA_HERE: dict[tuple[str, str, str], str] = {
    ("kct-fleet", "Pushes by attribution", "A"):
        "pod attribution needs a Kubernetes API server to watch pods; the standalone receiver has it off",
    ("kct-fleet", "Unattributed share", "A"): "pod attribution is off (no Kubernetes API server)",
    ("kct-pipeline", "Rate-limited and throttled", "A"):
        "the pushes here stay under every rate limit and quota, so no push is throttled",
    ("kct-pipeline", "Connections closed", "A"):
        "closes are counted for timeouts and the connection cap, which well-behaved pushes never reach",
    ("kct-pipeline", "Kafka errors", "A"): "selects error_type!=\"\": a healthy broker acknowledges every record",
    **{("kct-pipeline", title, "A"): "the operator runs only against a Kubernetes API server (its /metrics: "
       "tests/unit/operator/test_operator_metrics.py, and the node stack's tests/e2e/test_node_prometheus_e2e.py)"
       for title in ("Reconciles", "Kafka admin errors", "Export windows failed, last run")},
}


@dataclass(frozen=True)
class Panel:
    dashboard: str
    title: str
    ref: str
    expr: str

    @property
    def key(self) -> tuple[str, str, str]:
        return self.dashboard, self.title, self.ref


def _panels() -> tuple[list[Panel], dict[str, list[dict[str, Any]]]]:
    """Every target of every dashboard, and each dashboard's variables."""
    panels: list[Panel] = []
    variables: dict[str, list[dict[str, Any]]] = {}

    def walk(uid: str, items: list[dict[str, Any]]) -> None:
        for panel in items:
            walk(uid, panel.get("panels") or [])
            for target in panel.get("targets") or []:
                panels.append(Panel(uid, panel["title"], target["refId"], target["expr"]))

    for path in sorted(DASHBOARDS.glob("*.json")):
        dashboard = json.loads(path.read_text())
        walk(dashboard["uid"], dashboard["panels"])
        variables[dashboard["uid"]] = [v for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return panels, variables


def _rule_exprs() -> list[tuple[str, str]]:
    return [(rule.get("alert") or rule["record"], rule["expr"])
            for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


# --------------------------------------------------------------------------------------------- the data


def _gauge(name: str, now_ns: int, value: float, unit: str = "", **attributes: str) -> dict[str, Any]:
    return {"name": PREFIX + name, "type": "gauge", "unit": unit,
            "points": [{"time": now_ns, "value": float(value), "attributes": attributes}]}


def _producer_metrics(now_ns: int, k: int) -> list[dict[str, Any]]:
    return [
        _gauge("producer.record.send.rate", now_ns, 120.0 + k),
        _gauge("producer.record.error.rate", now_ns, 0.5),
        _gauge("producer.record.retry.rate", now_ns, 1.5),
        _gauge("producer.record.queue.time.max", now_ns, 40.0 + k, "ms"),
        _gauge("producer.record.queue.time.avg", now_ns, 12.0, "ms"),
        _gauge("producer.node.request.latency.max", now_ns, 90.0 + k, "ms", **{"node.id": "1"}),
        _gauge("producer.node.request.latency.avg", now_ns, 30.0, "ms", **{"node.id": "1"}),
        _gauge("producer.produce.throttle.time.max", now_ns, 5.0, "ms"),
    ]


def _consumer_metrics(now_ns: int, k: int) -> list[dict[str, Any]]:
    return [
        _gauge("consumer.fetch.manager.records.consumed.rate", now_ns, 80.0 + k),
        _gauge("consumer.fetch.manager.fetch.latency.max", now_ns, 500.0, "ms"),
        _gauge("consumer.fetch.manager.fetch.throttle.time.max", now_ns, 2.0, "ms"),
        _gauge("consumer.node.request.latency.max", now_ns, 70.0 + k, "ms", **{"node.id": "1"}),
        _gauge("consumer.node.request.latency.avg", now_ns, 20.0, "ms", **{"node.id": "1"}),
    ]


def _pushes() -> list[tuple[dt.datetime, TelemetryRecord]]:
    """A Java producer and a librdkafka consumer (on a version with the KIP-714 bug) pushing every 10 s for two
    minutes that ended at the last minute boundary but one; the broker's headers as the plugin adds them."""
    end = (time.time_ns() // (60 * S) - 1) * 60 * S
    begin = end - PUSHES * 10 * S
    producer = SyntheticClient("checkout-producer", started_ns=begin, software_name="apache-kafka-java",
                               software_version="3.9.0", seed=1)
    consumer = SyntheticClient("billing-consumer", started_ns=begin, software_name="librdkafka",
                               software_version="2.5.0", seed=2)
    pushes = []
    for k in range(PUSHES):
        now_ns = begin + k * 10 * S + S
        for client, metrics in ((producer, _producer_metrics(now_ns, k)), (consumer, _consumer_metrics(now_ns, k))):
            headers = client.push(now_ns).headers
            record = TelemetryRecord(client.instance_id.encode(), build_request({}, metrics), headers)
            pushes.append((dt.datetime.fromtimestamp(now_ns / S, tz=dt.UTC), record))
    return pushes


def _post(port: int, body: bytes, instance: str, token: str | None) -> int:
    headers = {"Content-Type": "application/x-protobuf", "kct-client-instance-id": instance}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/metrics", data=body, headers=headers,
                                     method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


@dataclass(frozen=True)
class Pipeline:
    prometheus: Any
    job: str  # the aggregation's service.name, Prometheus's `job` of the exported series


@pytest.fixture(scope="module")
def pipeline(jvm_decoder: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    """The receiver pushed to (and refusing one push without the token), scraped; the aggregates exported."""
    from kct.aggregation.decode import RAW_SCHEMA_DDL

    workdir = tmp_path_factory.mktemp("dashboards")
    pushes = _pushes()
    port = SLOW.free_port()
    with SLOW.kafka_broker_on_free_ports(workdir) as bootstrap, \
            prometheus_stack.started(scrape={"kct-receiver": [f"127.0.0.1:{port}"]},
                                     target_labels={"kct-receiver": RECEIVER_LABELS}) as prometheus:
        topic = "kct-dashboards"
        SLOW.create_topic(bootstrap, topic)
        with SLOW.receiver_process(workdir, bootstrap, topic, port):
            # The receiver's histograms have a series from their first observation on: a first push, and the
            # rest once Prometheus has scraped those series, so their rates (and quantiles) see them grow.
            first, *rest = [record for _, record in pushes]
            assert _post(port, first.value, first.key.decode(), SLOW.TOKEN) == 200
            eventually(lambda: all(prometheus.query(f'{name}{{job="kct-receiver"}}') for name in FIRST_SCRAPED),
                       timeout=30, what="the receiver's histograms scraped after the first push")
            for record in rest:
                assert _post(port, record.value, record.key.decode(), SLOW.TOKEN) == 200
            assert _post(port, pushes[0][1].value, "no-token", None) == 401

            job = "kct-aggregation-e2e"
            cfg = parse_job_config({
                "source": {"bootstrapServers": bootstrap}, "parquet": {"path": str(workdir / "aggregates")},
                "run": {"mode": "batch"},
                "export": {"endpoint": prometheus.otlp_metrics_url, "resourceAttributes": {"service.name": job}},
            })
            rows = [(r.key, r.value, topic, 0, i, stamp, r.headers) for i, (stamp, r) in enumerate(pushes)]
            counts = run_batch(jvm_decoder, cfg, jvm_decoder.createDataFrame(rows, RAW_SCHEMA_DDL))
            assert counts["client_metrics"] > 0
            yield Pipeline(prometheus, job)


# --------------------------------------------------------------------------------------------- queries


def _label_values(prometheus: Any, query: str) -> list[str]:
    """What Grafana offers for a `label_values(selector, label)` variable."""
    match = re.fullmatch(r"label_values\((?P<selector>.+),\s*(?P<label>\w+)\)", query)
    assert match, query
    values: list[str] = prometheus.api(f"label/{match['label']}/values", **{"match[]": match["selector"]})
    return values


def _substituted(prometheus: Any, expr: str, variables: list[dict[str, Any]]) -> str:
    """`expr` with each variable replaced by every value Prometheus offers for it, selected one by one (the
    variables are multi-valued: Grafana writes `(a|b)`), or by its `allValue`, `.*`, when it offers none (the
    labels attribution adds are not in these aggregates); and `$__rate_interval`."""
    for variable in variables:
        assert variable["multi"], variable["name"]
        values = _label_values(prometheus, variable["query"])
        value = "(" + "|".join(re.escape(v) for v in values) + ")" if values else variable.get("allValue") or ".*"
        expr = expr.replace(f"${variable['name']}", value.replace("\\", "\\\\"))
    expr = expr.replace("$__rate_interval", RATE_INTERVAL)
    assert "$" not in expr, expr
    return expr


def test_every_panel_query_runs_and_each_one_this_setup_feeds_returns_series(pipeline: Pipeline) -> None:
    """Given the receiver scraped and the aggregates exported,
    When every panel's query (variables set to a value Prometheus offers) is run as an instant query,
    Then none errors, and every panel not listed in NO_DATA_HERE returns series with finite values;
    the variables of the client dashboards resolve to the clients pushed (client ids, software)."""
    prometheus = pipeline.prometheus
    panels, variables = _panels()
    assert {key for key in NO_DATA_HERE} <= {panel.key for panel in panels}, "a NO_DATA_HERE panel is gone"
    assert len({panel.key for panel in panels}) == len(panels), "two targets share (dashboard, title, refId)"
    assert set(_label_values(prometheus, 'label_values({__name__=~"kafka_(producer|consumer)_.+"}, client_id)')) \
        == {"checkout-producer", "billing-consumer"}
    queries = {panel.key: _substituted(prometheus, panel.expr, variables[panel.dashboard]) for panel in panels}
    fed = [panel.key for panel in panels if panel.key not in NO_DATA_HERE]

    def empty() -> list[tuple[str, str, str]]:
        """The fed panels without data yet (rates need a few scrapes): none once everything arrived."""
        missing = []
        for key in fed:
            result = prometheus.api("query", query=queries[key])["result"]
            if not result or any(float(sample["value"][1]) != float(sample["value"][1]) for sample in result):
                missing.append(key)
        return missing

    # Rates need a few scrapes: wait for them, then name the panels still empty, if any.
    with contextlib.suppress(pytest.fail.Exception):
        eventually(lambda: not empty(), timeout=30, interval=1.0, what="every fed panel returning series")
    assert not [(key, queries[key]) for key in empty()]
    for key in NO_DATA_HERE:
        prometheus.api("query", query=queries[key])  # runs without error, data or not


def test_every_alert_and_recording_rule_expression_runs(pipeline: Pipeline) -> None:
    """Given the same Prometheus, When every expression of rules/kct.rules.yaml is run as an instant query,
    Then none errors; and the rules over the clients' series see them (the buggy-librdkafka count finds the
    consumer on 2.5.0, the error-rate and latency rules' inner aggregations return the pushed workloads)."""
    prometheus = pipeline.prometheus
    exprs = _rule_exprs()
    assert exprs
    for _, expr in exprs:
        prometheus.api("query", query=expr)  # raises on a parse or evaluation error
    buggy = dict(exprs)["KctClientsOnBuggyLibrdkafka"]
    (sample,) = prometheus.api("query", query=buggy)["result"]
    assert sample["metric"]["client_software_version"] == "2.5.0" and float(sample["value"][1]) == 1
    for alert in ("KctWorkloadErrorRateHigh", "KctWorkloadRequestLatencyHigh"):
        signal = dict(exprs)[alert].rsplit(">", 1)[0]
        assert {s["metric"].get("client_id") for s in prometheus.api("query", query=signal)["result"]}, alert
