"""The Grafana dashboards the chart ships, as code: built with grafana-foundation-sdk, written as JSON.

Hand-edited dashboard JSON drifts (a renamed metric, a panel copied with the wrong label) and nobody
reviews a 2,000-line JSON diff; these builders are the source and `helm/kct/dashboards/*.json` the
generated copies the chart puts into ConfigMaps (tests/unit/packaging/test_dashboards.py fails when they
are stale; `make manifests` rewrites them). The SDK is a test extra, not a dependency of the product: the
operator never builds a dashboard, so the generator lives under dev/, not in the `kct` package.

Three dashboards, each on a `datasource` variable (any Prometheus):

- **fleet**: clients reporting, by software and version, clients on a librdkafka with the KIP-714 bug,
  pushes and their attribution;
- **clients**: per workload / client, from the aggregation job's OTLP export (`kafka_producer_*`,
  `kafka_consumer_*`, labels as the export's default allow-list): produce/consume rates, request latency,
  queue time, errors, throttling;
- **pipeline**: the receiver's own metrics (kct.receiver.telemetry: pushes, refusals by reason, rate-limited
  and throttled pushes, closed connections, Kafka latency and errors) and the export's failures.

The workload variables (`k8s_namespace_name`, `k8s_workload_kind`, `k8s_workload_name`: the export's workload
labels) match with `=~` and an "All" of `.*`, which also matches a series without the label: clients that
were not attributed stay on the panels. The export sends each metric per client (with `client_instance_id`)
and per workload (without it: every instance of the workload merged); the per-client panels select
`client_instance_id!=""`, the per-workload ones `client_instance_id=""`, so neither counts the other.
The rates of the clients dashboard are the Java client's own rate gauges (`record.send.rate`, ...): gauges
read the same whatever temporality the broker asked for, where a counter sent as a delta sum would need
`sum_over_time` instead of `rate`. librdkafka sends only KIP-714's required set (latencies, queue and
throttle times), so its rate panels stay empty.

    python3 dev/dashboards/dashboards.py [--check] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as model

__all__ = [
    "AFFECTED_LIBRDKAFKA_NAMES",
    "AFFECTED_LIBRDKAFKA_VERSIONS",
    "DASHBOARDS",
    "OPERATOR_JOB",
    "RECEIVER_JOB",
    "check",
    "default_out_dir",
    "render",
    "write",
]

# The job label the chart's ServiceMonitor gives the receivers (jobLabel app.kubernetes.io/name); the
# alert rules use the same (helm/kct/rules/kct.rules.yaml).
RECEIVER_JOB: Final = "kct-receiver"
OPERATOR_JOB: Final = "kct-operator"  # the chart's PodMonitor (and the node stack's scrape job)
# librdkafka and the Confluent clients built on it (their version reads "<own>-rdkafka-<librdkafka>"),
# before 2.5.3: the versions with the KIP-714 bug the alert KctClientsOnBuggyLibrdkafka names.
AFFECTED_LIBRDKAFKA_NAMES: Final = "librdkafka|confluent-kafka-.+"
AFFECTED_LIBRDKAFKA_VERSIONS: Final = r"(.+-rdkafka-)?(0|1|2\\.[0-4]|2\\.5\\.[0-2])([.-].*)?"
# Every per-client series of the aggregation job's export: KIP-714 producer and consumer metrics (the export's
# per-workload series of the same names have no client_instance_id).
_CLIENT_SERIES: Final = '__name__=~"kafka_(producer|consumer)_.+", client_instance_id!=""'
_DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
_WIDTH: Final = 12
_HEIGHT: Final = 8


def _query(expr: str, legend: str, ref: str) -> prometheus.Dataquery:
    return prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(_DATASOURCE)


def _targets(panel: timeseries.Panel | stat.Panel, queries: Sequence[tuple[str, str]]) -> None:
    for index, (expr, legend) in enumerate(queries):
        panel.with_target(_query(expr, legend, chr(ord("A") + index)))


def _graph(title: str, description: str, unit: str, *queries: tuple[str, str]) -> timeseries.Panel:
    panel = (timeseries.Panel().title(title).description(description).unit(unit).datasource(_DATASOURCE)
             .height(_HEIGHT).span(_WIDTH))
    _targets(panel, queries)
    return panel


def _stat(title: str, description: str, expr: str) -> stat.Panel:
    panel = stat.Panel().title(title).description(description).datasource(_DATASOURCE).height(4).span(6)
    _targets(panel, [(expr, "")])
    return panel


def _variable(name: str, label: str, query: str, *, multi: bool = True) -> gd.QueryVariable:
    """A variable on "All" by default, whose "All" is `.*`: it also matches series that lack the label
    altogether, so an absent label (no workload attributed yet) leaves the panels filled."""
    return (gd.QueryVariable(name).label(label).query(query).datasource(_DATASOURCE)
            .current(model.VariableOption(selected=True, text="All", value="$__all"))
            .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(model.VariableSort.ALPHABETICAL_ASC)
            .multi(multi).include_all(True).all_value(".*"))


def _datasource_variable() -> gd.DatasourceVariable:
    return gd.DatasourceVariable("datasource").label("Data source").type("prometheus")


def _dashboard(uid: str, title: str, description: str) -> gd.Dashboard:
    return (gd.Dashboard(title).uid(uid).description(description).tags(["kafka", "kip-714", "kct"])
            .time("now-3h", "now").refresh("1m").timezone("browser").with_variable(_datasource_variable()))


# -- fleet -----------------------------------------------------------------------------------------
_FLEET: Final = f'{_CLIENT_SERIES}, k8s_namespace_name=~"$namespace", client_software_name=~"$software"'


def _per_instance(by: str, selector: str) -> str:
    """One series per client instance (whatever it reports), then counted `by`."""
    return f"count by ({by}) (count by (client_instance_id, {by}) ({{{selector}}}))"


def fleet() -> gd.Dashboard:
    affected = (f'{_CLIENT_SERIES}, client_software_name=~"{AFFECTED_LIBRDKAFKA_NAMES}", '
                f'client_software_version=~"{AFFECTED_LIBRDKAFKA_VERSIONS}"')
    receiver = f'job="{RECEIVER_JOB}"'
    return (
        _dashboard("kct-fleet", "KIP-714 clients: fleet",
                   "Which Kafka clients report telemetry, with which software, and how their pushes arrive.")
        .with_variable(_variable("namespace", "Namespace", f"label_values({{{_CLIENT_SERIES}}}, k8s_namespace_name)"))
        .with_variable(_variable("software", "Software",
                                 f"label_values({{{_CLIENT_SERIES}}}, client_software_name)"))
        .with_row(gd.Row("Clients"))
        .with_panel(_stat("Clients reporting", "Client instances with a series in the newest windows.",
                          f"count(count by (client_instance_id) ({{{_FLEET}}}))"))
        .with_panel(_stat("On a librdkafka with the KIP-714 bug",
                          "Client instances on librdkafka before 2.5.3 (also inside confluent-kafka-*).",
                          f"count(count by (client_instance_id) ({{{affected}}})) or vector(0)"))
        .with_panel(_graph("Clients by software and version", "Client instances per software name and version.",
                           "short", (_per_instance("client_software_name, client_software_version", _FLEET),
                                     "{{client_software_name}} {{client_software_version}}")))
        .with_row(gd.Row("Pushes"))
        .with_panel(_graph("Pushes stored", "Pushes the receivers stored, per namespace of the receiver.", "reqps",
                           (f"sum by (namespace) (rate(kct_receiver_pushes_total{{{receiver}}}[$__rate_interval]))",
                            "{{namespace}}")))
        .with_panel(_graph("Pushes by attribution", "attributed (by pod or rule), ambiguous, unattributed.", "reqps",
                           ("sum by (outcome, source) (rate(kct_receiver_attribution_pushes_total"
                            f"{{{receiver}}}[$__rate_interval]))", "{{outcome}} {{source}}")))
        .with_panel(_graph("Unattributed share", "Share of pushes no workload could be attributed to.",
                           "percentunit",
                           (f'sum(rate(kct_receiver_attribution_pushes_total{{{receiver}, outcome!="attributed"}}'
                            "[$__rate_interval])) / sum(rate(kct_receiver_attribution_pushes_total"
                            f"{{{receiver}}}[$__rate_interval]))", "not attributed")))
    )


# -- clients ---------------------------------------------------------------------------------------
_WORKLOAD: Final = 'k8s_namespace_name=~"$namespace", k8s_workload_kind=~"$kind", k8s_workload_name=~"$workload"'
_CLIENT: Final = f'client_instance_id!="", {_WORKLOAD}, client_software_name=~"$software", client_id=~"$client"'
_BY: Final = "client_id"
_WORKLOAD_BY: Final = "k8s_namespace_name, k8s_workload_kind, k8s_workload_name"


def _per_client(aggregate: str, metric: str) -> tuple[str, str]:
    # The legend names the metric (without the common prefix and unit): two series of a panel never share one.
    legend = "{{client_id}} " + metric.removeprefix("kafka_").removesuffix("_milliseconds")
    return f"{aggregate} by ({_BY}) ({metric}{{{_CLIENT}}})", legend


def _per_workload(metric: str) -> tuple[str, str]:
    """The export's per-workload series of `metric` (its instances already merged by the job)."""
    legend = "{{k8s_workload_kind}}/{{k8s_workload_name}} " + metric.removeprefix("kafka_").removesuffix(
        "_milliseconds")
    # Only the workload variables: these series have no client id or software (a client chosen would empty
    # the panel rather than narrow it).
    return f'max by ({_WORKLOAD_BY}) ({metric}{{client_instance_id="", {_WORKLOAD}}})', legend


def clients() -> gd.Dashboard:
    return (
        _dashboard("kct-clients", "KIP-714 clients: per workload and client",
                   "The aggregation job's per-window aggregates, per client (and per workload once attributed).")
        .with_variable(_variable("namespace", "Namespace", f"label_values({{{_CLIENT_SERIES}}}, k8s_namespace_name)"))
        .with_variable(_variable("kind", "Workload kind",
                                 f"label_values({{{_CLIENT_SERIES}}}, k8s_workload_kind)"))
        .with_variable(_variable("workload", "Workload", f"label_values({{{_CLIENT_SERIES}}}, k8s_workload_name)"))
        .with_variable(_variable("software", "Software", f"label_values({{{_CLIENT_SERIES}}}, client_software_name)"))
        .with_variable(_variable("client", "Client id", f"label_values({{{_CLIENT_SERIES}}}, client_id)"))
        .with_row(gd.Row("Workloads"))
        .with_panel(_graph("Instances per workload", "Clients each workload's series merge (the unattributed "
                           "clients under an empty workload).", "short",
                           _per_workload("kct_aggregation_workload_instances")))
        .with_panel(_graph("Produce rate per workload", "Records sent per second, the workload's instances added.",
                           "short", _per_workload("kafka_producer_record_send_rate")))
        .with_row(gd.Row("Throughput"))
        .with_panel(_graph("Produce rate", "Records sent per second (Java clients' record.send.rate).", "short",
                           _per_client("sum", "kafka_producer_record_send_rate")))
        .with_panel(_graph("Consume rate", "Records consumed per second (records.consumed.rate).", "short",
                           _per_client("sum", "kafka_consumer_fetch_manager_records_consumed_rate")))
        .with_row(gd.Row("Latency"))
        .with_panel(_graph("Request latency (max)", "Longest broker request of the window, per client.", "ms",
                           _per_client("max", "kafka_producer_node_request_latency_max_milliseconds"),
                           _per_client("max", "kafka_consumer_node_request_latency_max_milliseconds")))
        .with_panel(_graph("Record queue time", "Time records wait in the producer's accumulator.", "ms",
                           _per_client("max", "kafka_producer_record_queue_time_max_milliseconds"),
                           _per_client("avg", "kafka_producer_record_queue_time_avg_milliseconds")))
        .with_panel(_graph("Fetch latency (max)", "Longest fetch of the window, per consumer.", "ms",
                           _per_client("max", "kafka_consumer_fetch_manager_fetch_latency_max_milliseconds")))
        .with_row(gd.Row("Errors and throttling"))
        .with_panel(_graph("Record errors", "Records that failed to send, per second (record.error.rate).", "short",
                           _per_client("sum", "kafka_producer_record_error_rate"),
                           _per_client("sum", "kafka_producer_record_retry_rate")))
        .with_panel(_graph("Broker throttling (max)", "Time the brokers throttled the client for its quota.", "ms",
                           _per_client("max", "kafka_producer_produce_throttle_time_max_milliseconds"),
                           _per_client("max", "kafka_consumer_fetch_manager_fetch_throttle_time_max_milliseconds")))
    )


# -- pipeline --------------------------------------------------------------------------------------
_RECEIVER: Final = f'job="{RECEIVER_JOB}", namespace=~"$namespace"'


def _rate(metric: str, by: str, extra: str = "") -> str:
    selector = f"{_RECEIVER}, {extra}" if extra else _RECEIVER
    return f"sum by ({by}) (rate({metric}{{{selector}}}[$__rate_interval]))"


def _quantile(q: str, metric: str) -> str:
    return f"histogram_quantile({q}, {_rate(metric + '_bucket', 'le')})"


def pipeline() -> gd.Dashboard:
    return (
        _dashboard("kct-pipeline", "KIP-714 clients: pipeline",
                   "The receivers (ingress, pipeline, Kafka sink) and the aggregation job's OTLP export.")
        .with_variable(_variable("namespace", "Namespace",
                                 f'label_values(kct_receiver_data_points_total{{job="{RECEIVER_JOB}"}}, namespace)'))
        .with_row(gd.Row("Receivers"))
        .with_panel(_stat("Receivers up", "Receiver pods the scrape reaches.", f"sum(up{{{_RECEIVER}}})"))
        .with_panel(_stat("Kafka ready", "Receiver pods whose Kafka sink is ready.",
                          f"sum(kct_receiver_sink_ready{{{_RECEIVER}}})"))
        .with_panel(_graph("Pushes stored", "Pushes stored, by whether the value was re-encoded.", "reqps",
                           (_rate("kct_receiver_pushes_total", "modified"), "modified={{modified}}")))
        .with_panel(_graph("Data points", "Data points accepted and rejected.", "short",
                           (_rate("kct_receiver_data_points_total", "outcome"), "{{outcome}}")))
        .with_panel(_graph("Refusals by reason", "Pushes refused (4xx/5xx), by reason.", "reqps",
                           (_rate("kct_receiver_rejections_total", "reason"), "{{reason}}")))
        .with_panel(_graph("Rate-limited and throttled", "Pushes answered with a Retry-After, by reason.", "reqps",
                           (_rate("kct_receiver_throttle_time_seconds_count", "reason"), "{{reason}}")))
        .with_panel(_graph("Connections closed", "Connections the receiver closed to protect itself.", "short",
                           (_rate("kct_receiver_connections_closed_total", "reason"), "{{reason}}")))
        .with_panel(_graph("Request duration", "HTTP request duration, p50 and p99.", "s",
                           (_quantile("0.5", "http_server_request_duration_seconds"), "p50"),
                           (_quantile("0.99", "http_server_request_duration_seconds"), "p99")))
        .with_row(gd.Row("Kafka sink"))
        .with_panel(_graph("Kafka latency", "Produce to acknowledgement, p50 and p99.", "s",
                           (_quantile("0.5", "messaging_client_operation_duration_seconds"), "p50"),
                           (_quantile("0.99", "messaging_client_operation_duration_seconds"), "p99")))
        .with_panel(_graph("Kafka errors", "Records Kafka did not store, by error type.", "short",
                           (_rate("messaging_client_sent_messages_total", "error_type", 'error_type!=""'),
                            "{{error_type}}")))
        .with_panel(_graph("In-flight records", "Records awaiting Kafka's acknowledgement.", "short",
                           (f"sum by (pod) (kct_receiver_sink_inflight_records{{{_RECEIVER}}})", "{{pod}}")))
        .with_row(gd.Row("Aggregation export"))
        .with_panel(_graph("Export failures", "Windows the OTLP export gave up on (counted when it gets through).",
                           "short", ("sum by (job) (increase(kct_aggregation_export_failures_total[1h]))", "{{job}}")))
        .with_panel(_graph("Series dropped", "Series over the per-window cap, dropped.", "short",
                           ("sum by (job) (increase(kct_aggregation_export_series_dropped_total[1h]))", "{{job}}")))
        .with_row(gd.Row("Operator"))
        .with_panel(_graph("Reconciles", "Reconciles by kind and outcome (ok, retry, stopped).", "ops",
                           (f'sum by (kind, outcome) (rate(kct_operator_reconciles_total{{job="{OPERATOR_JOB}"}}'
                            "[$__rate_interval]))", "{{kind}} {{outcome}}")))
        .with_panel(_graph("Kafka admin errors", "Reconciles a Kafka Admin API call stopped, by reason.", "ops",
                           (f'sum by (kind, reason) (rate(kct_operator_kafka_admin_errors_total{{job="{OPERATOR_JOB}"}}'
                            "[$__rate_interval]))", "{{kind}} {{reason}}")))
        .with_panel(_graph("Export windows failed, last run", "Per TelemetryReceiver, as its last aggregation run "
                           "reported (status.aggregation.export).", "short",
                           (f'max by (namespace, telemetryreceiver) (kct_operator_aggregation_export_windows_failed'
                            f'{{job="{OPERATOR_JOB}"}})', "{{namespace}}/{{telemetryreceiver}}")))
    )


DASHBOARDS: Final[dict[str, Callable[[], gd.Dashboard]]] = {
    "kct-fleet": fleet,
    "kct-clients": clients,
    "kct-pipeline": pipeline,
}


def render(name: str) -> str:
    """The dashboard's JSON as committed: sorted keys, two-space indent, a final newline."""
    built = DASHBOARDS[name]().build()
    return json.dumps(json.loads(json.dumps(built, cls=JSONEncoder)), indent=2, sort_keys=True) + "\n"


def default_out_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "helm" / "kct" / "dashboards"


def write(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in DASHBOARDS:
        target = out / f"{name}.json"
        target.write_text(render(name))
        written.append(target)
    return written


def check(out: Path) -> list[str]:
    """What differs between `out` and the builders: stale, missing and unexpected files."""
    problems = []
    for name in DASHBOARDS:
        target = out / f"{name}.json"
        if not target.is_file():
            problems.append(f"{target}: missing")
        elif target.read_text() != render(name):
            problems.append(f"{target}: stale (differs from dev/dashboards/dashboards.py)")
    expected = {f"{name}.json" for name in DASHBOARDS}
    problems += [f"{extra}: not generated" for extra in sorted(out.glob("*.json")) if extra.name not in expected]
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="report stale files instead of writing them")
    parser.add_argument("--out", type=Path, default=default_out_dir())
    args = parser.parse_args(argv)
    if args.check:
        problems = check(args.out)
        print("\n".join(problems) or "dashboards up to date")
        return 1 if problems else 0
    for path in write(args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
