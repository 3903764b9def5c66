"""Every panel of the shipped dashboards and every expression of the shipped alert rules, run against a live
Prometheus that holds what the pipeline produces: a real receiver's /metrics (scraped) and the aggregates of a
real Spark batch run (over OTLP).

Loopback processes only: a Kafka broker on free ports (as bench/receiver_slow_senders.py starts it), a
`kct receiver` writing to it, the Prometheus of dev/stack/prometheus.py with its OTLP receiver on and a scrape
job `kct-receiver` for the receiver (labelled with the `namespace` and `pod` Kubernetes discovery would give
it), and the tests' local Spark aggregating pushes that send the metrics the dashboards draw: the demo's
workloads (tests/unit/aggregation/demo_workloads.py: a producer Deployment and a consumer StatefulSet, two pods
each, attributed as the receiver attributes them) and a librdkafka consumer outside the cluster. Each panel's
variables are replaced by the values Prometheus has for them (as Grafana would offer), then by each demo
workload's own; `$__rate_interval` by a range that holds several scrapes.

A panel that this setup cannot feed is listed in NO_DATA_HERE with the reason; every other panel must return
series, so a new panel is either fed here or classified.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
import yaml
from demo_workloads import NAMESPACE, PUSHES, Workload, demo_pushes, push_metrics
from script_loader import load_script
from waiting import eventually

from kct.aggregation.batch import run_batch
from kct.aggregation.config import parse_job_config
from kct.aggregation.synthetic import SyntheticClient, TelemetryRecord, build_request

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[3]
DASHBOARDS = REPO / "helm" / "kct" / "dashboards"
RULES = REPO / "helm" / "kct" / "rules" / "kct.rules.yaml"
prometheus_stack = load_script(REPO / "dev" / "stack" / "prometheus.py")
SLOW = load_script(REPO / "bench" / "receiver_slow_senders.py")  # its broker, topic and receiver helpers

S = 1_000_000_000
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


def _pushes() -> tuple[tuple[Workload, ...], list[tuple[dt.datetime, TelemetryRecord]]]:
    """The demo's workloads (demo_workloads: its producer Deployment and consumer StatefulSet in kct-telemetry,
    attributed as the receiver attributes them), and beside them a librdkafka consumer outside the cluster on a
    version with the KIP-714 bug (unattributed: no workload labels); every 10 s for two minutes that ended at
    the last minute boundary but one, with the broker's headers as the plugin adds them."""
    end = (time.time_ns() // (60 * S) - 1) * 60 * S
    given, pushes = demo_pushes(end)
    begin = end - PUSHES * 10 * S
    outside = SyntheticClient("billing-consumer", started_ns=begin, software_name="librdkafka",
                              software_version="2.5.0", seed=2)
    for k in range(PUSHES):
        now_ns = begin + k * 10 * S + S
        metrics = build_request({}, push_metrics("consumer", now_ns, k, 0))
        record = TelemetryRecord(outside.instance_id.encode(), metrics, outside.push(now_ns).headers)
        pushes.append((dt.datetime.fromtimestamp(now_ns / S, tz=dt.UTC), record))
    return given, pushes


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
    workloads: tuple[Workload, ...]  # the demo's


@pytest.fixture(scope="module")
def pipeline(jvm_decoder: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    """The receiver pushed to (and refusing one push without the token), scraped; the aggregates exported."""
    from kct.aggregation.decode import RAW_SCHEMA_DDL

    workdir = tmp_path_factory.mktemp("dashboards")
    given, pushes = _pushes()
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
            yield Pipeline(prometheus, job, given)


# --------------------------------------------------------------------------------------------- queries


def _label_values(prometheus: Any, query: str) -> list[str]:
    """What Grafana offers for a `label_values(selector, label)` variable."""
    match = re.fullmatch(r"label_values\((?P<selector>.+),\s*(?P<label>\w+)\)", query)
    assert match, query
    values: list[str] = prometheus.api(f"label/{match['label']}/values", **{"match[]": match["selector"]})
    return values


def _substituted(prometheus: Any, expr: str, variables: list[dict[str, Any]]) -> str:
    """`expr` with each variable replaced by every value Prometheus offers for it, selected one by one (the
    variables are multi-valued: Grafana writes `(a|b)`), or by its `allValue`, `.*`, when it offers none; and
    `$__rate_interval`."""
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
        == {"billing-consumer", *(c for w in pipeline.workloads for c in w.client_ids)}
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


def _workload_values(workload: Workload) -> dict[str, list[str]]:
    """The dashboards' variables set to one demo workload: its namespace, kind, name, software, client ids."""
    return {"namespace": [NAMESPACE], "kind": [workload.kind], "workload": [workload.name],
            "software": [workload.software], "client": list(workload.client_ids)}


def _for_workload(expr: str, variables: list[dict[str, Any]], workload: Workload, clients_too: bool) -> str:
    """`expr` with the namespace, kind and workload variables set to `workload`'s values as Grafana writes a
    multi-value selection; the software and client ones too with `clients_too`, else at All (`allValue`)."""
    values = _workload_values(workload)
    for variable in variables:
        if clients_too or variable["name"] not in ("software", "client"):
            chosen = "(" + "|".join(re.escape(v) for v in values[variable["name"]]) + ")"
        else:
            chosen = variable["allValue"]
        expr = expr.replace(f"${variable['name']}", chosen.replace("\\", "\\\\"))
    expr = expr.replace("$__rate_interval", RATE_INTERVAL)
    assert "$" not in expr, expr
    return expr


def _role(expr: str) -> str | None:
    """Which demo workloads a clients' panel draws: producer or consumer metrics, both, or none of theirs."""
    producer, consumer = "kafka_producer_" in expr, "kafka_consumer_" in expr
    if "kafka_(producer|consumer)_" in expr or "kct_aggregation_workload_instances" in expr or (producer and consumer):
        return "both"
    return "producer" if producer else "consumer" if consumer else None


def test_each_client_panel_returns_each_demo_workloads_series(pipeline: Pipeline) -> None:
    """Given the demo's workloads exported, When the variables are set to one workload at a time (its namespace,
    kind and name, each a value the variable's own query offers; software and client at All, then set to the
    workload's too) and every panel over the clients' series that uses them is run, Then each panel drawing that
    workload's kind of metrics (producer, consumer, or any) returns finite series, only of that workload's
    clients, and its instance count is 2."""
    prometheus = pipeline.prometheus
    panels, variables = _panels()
    for uid, defined in variables.items():
        for variable in defined:
            # (the pipeline dashboard's `namespace` is the receivers', not the clients')
            if variable["name"] in _workload_values(pipeline.workloads[0]) and _role(variable["query"]):
                offered = set(_label_values(prometheus, variable["query"]))
                for workload in pipeline.workloads:
                    assert set(_workload_values(workload)[variable["name"]]) <= offered, (uid, variable["name"])
    drawn = [p for p in panels if _role(p.expr) is not None and "$" in p.expr.replace("$__rate_interval", "")]
    assert len(drawn) >= 12
    checked = 0
    for workload, clients_too in itertools.product(pipeline.workloads, (False, True)):
        for panel in drawn:
            if _role(panel.expr) not in ("both", workload.role):
                continue
            query = _for_workload(panel.expr, variables[panel.dashboard], workload, clients_too)
            result = prometheus.api("query", query=query)["result"]
            assert result, (workload.name, panel.key, query)
            for sample in result:
                value, labels = float(sample["value"][1]), sample["metric"]
                assert value == value, (panel.key, sample)  # not NaN
                assert labels.get("client_id", workload.client_ids[0]) in workload.client_ids, (panel.key, labels)
                assert labels.get("k8s_workload_name", workload.name) == workload.name, (panel.key, labels)
                if panel.title == "Instances per workload":
                    assert value == len(workload.clients), labels
            checked += 1
    assert checked >= 2 * len(drawn)


# Alerts that the data here makes fire: the librdkafka consumer outside the cluster is on 2.5.0. Every other
# alert must evaluate to nothing (healthy receiver and Kafka, nothing refused but one push, no export failure,
# the demo's clients under the latency and error-rate thresholds and on a fixed librdkafka).
FIRING_HERE: Final = frozenset({"KctClientsOnBuggyLibrdkafka"})
# Alerts whose signal (the expression before its final comparison) has no series here, and why.
NO_SIGNAL_HERE: Final = {
    "KctReceiverAbsent": "absent() has no comparison: its signal is its result, empty while a receiver is scraped",
    "KctReceiverKafkaErrors": "selects error_type!=\"\": a healthy broker acknowledges every record",
}


def _signal(expr: str) -> str:
    """An alert's expression before its final comparison with a number (`... > 500`, `... == 0`)."""
    match = re.fullmatch(r"(?s)(?P<signal>.+?)\s*(>|<|==|>=|<=|!=)\s*[0-9.]+\s*", expr)
    assert match, expr
    return match["signal"]


def test_every_alert_evaluates_fires_where_the_data_says_and_its_signal_has_data(pipeline: Pipeline) -> None:
    """Given the same Prometheus, When every expression of rules/kct.rules.yaml is run as an instant query,
    Then none errors; the alerts in FIRING_HERE return series and every other alert none; every alert's signal
    (its expression before the threshold) has series but those in NO_SIGNAL_HERE; the buggy-librdkafka alert
    names the client on 2.5.0 and not the demo's confluent-kafka-python; and the latency and error-rate
    signals return every demo workload's clients, labelled with their workload."""
    prometheus = pipeline.prometheus
    rules = dict(_rule_exprs())
    assert FIRING_HERE | set(NO_SIGNAL_HERE) <= set(rules)
    for expr in rules.values():
        prometheus.api("query", query=expr)  # raises on a parse or evaluation error
    alerts = {name: expr for name, expr in rules.items() if name.startswith("Kct")}
    firing = {name for name, expr in alerts.items() if prometheus.api("query", query=expr)["result"]}
    assert firing == FIRING_HERE
    (sample,) = prometheus.api("query", query=rules["KctClientsOnBuggyLibrdkafka"])["result"]
    assert (sample["metric"]["client_software_name"], sample["metric"]["client_software_version"]) == (
        "librdkafka", "2.5.0") and float(sample["value"][1]) == 1

    def silent() -> list[str]:
        """Alerts other than NO_SIGNAL_HERE whose signal has no series yet (rates need a few scrapes)."""
        return [name for name, expr in alerts.items()
                if name not in NO_SIGNAL_HERE and not prometheus.api("query", query=_signal(expr))["result"]]

    with contextlib.suppress(pytest.fail.Exception):
        eventually(lambda: not silent(), timeout=30, interval=1.0, what="every alert's signal returning series")
    assert not silent()
    for alert in ("KctWorkloadErrorRateHigh", "KctWorkloadRequestLatencyHigh"):
        seen = {(s["metric"].get("k8s_workload_name"), s["metric"].get("client_id"))
                for s in prometheus.api("query", query=_signal(rules[alert]))["result"]}
        wanted = {(w.name, c) for w in pipeline.workloads for c in w.client_ids
                  if alert == "KctWorkloadRequestLatencyHigh" or w.role == "producer"}
        assert wanted <= seen, alert
