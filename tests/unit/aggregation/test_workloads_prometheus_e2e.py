"""Per-workload and per-client series in a real Prometheus equal the Parquet aggregates of the same run.

The demo's workloads (tests/unit/aggregation/demo_workloads.py: a producer Deployment and a consumer
StatefulSet in kct-telemetry, two pods each, pushes attributed as the receiver attributes them) are aggregated
by the batch job in the tests' local Spark, with the export to the Prometheus of dev/stack/prometheus.py (its
OTLP receiver on). Then, for every window, PromQL at the window's end returns for each workload what
workload_rollups says (the merged gauges' sums, the counters' summed values and deltas, the instances) and
what the export's merge rules make of the workload's client_metrics rows (a `.max` gauge the max, an `.avg`
the mean); and for each client what its client_metrics row says. Loopback processes only.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from statistics import mean
from typing import Any, Final

import pytest
from demo_workloads import CUMULATIVE, DELTA, NAMESPACE, Workload, demo_pushes
from script_loader import load_script
from waiting import eventually

from kct.aggregation.batch import run_batch
from kct.aggregation.config import parse_job_config
from kct.aggregation.synthetic import PREFIX

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

prometheus_stack = load_script(Path(__file__).resolve().parents[3] / "dev" / "stack" / "prometheus.py")

JOB: Final = "kct-workloads-e2e"  # the export's service.name: the series' `job`
WORKLOAD_LABELS: Final = ("k8s_namespace_name", "k8s_workload_kind", "k8s_workload_name")


@dataclass(frozen=True)
class Checked:
    """How one KIP-714 metric is read back: its Prometheus name, the client_metrics column a client's series
    carries, and how the export merges a workload's clients (`sum`: also workload_rollups' `rollup` column)."""

    promql: str
    column: str
    merge: str
    rollup: str | None = None


CHECKED: Final[dict[str, Checked]] = {
    PREFIX + "producer.record.send.rate": Checked("kafka_producer_record_send_rate", "value_last", "sum",
                                                  "value_last_sum"),
    PREFIX + "consumer.fetch.manager.records.consumed.rate": Checked(
        "kafka_consumer_fetch_manager_records_consumed_rate", "value_last", "sum", "value_last_sum"),
    PREFIX + "producer.record.queue.time.max": Checked("kafka_producer_record_queue_time_max_milliseconds",
                                                       "value_last", "max"),
    PREFIX + "producer.record.queue.time.avg": Checked("kafka_producer_record_queue_time_avg_milliseconds",
                                                       "value_last", "mean"),
    PREFIX + "consumer.fetch.manager.fetch.latency.max": Checked(
        "kafka_consumer_fetch_manager_fetch_latency_max_milliseconds", "value_last", "max"),
    PREFIX + "producer.node.request.latency.max": Checked(
        "kafka_producer_node_request_latency_max_milliseconds", "value_last", "max"),
    PREFIX + CUMULATIVE["producer"]: Checked("kafka_producer_record_send_total", "value_last", "sum",
                                             "value_last_sum"),
    PREFIX + CUMULATIVE["consumer"]: Checked("kafka_consumer_fetch_manager_records_consumed_total", "value_last",
                                             "sum", "value_last_sum"),
    PREFIX + DELTA["producer"]: Checked("kafka_producer_record_retry_total", "delta", "sum", "delta"),
    PREFIX + DELTA["consumer"]: Checked("kafka_consumer_fetch_manager_fetch_total", "delta", "sum", "delta"),
}


@dataclass(frozen=True)
class Exported:
    prometheus: Any
    workloads: tuple[Workload, ...]
    client_metrics: list[dict[str, Any]]
    workload_rollups: list[dict[str, Any]]


@pytest.fixture(scope="module")
def exported(jvm_decoder: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exported]:
    """The demo's pushes aggregated by the batch job, exported to a fresh Prometheus; both tables read back."""
    from kct.aggregation.decode import RAW_SCHEMA_DDL

    out = tmp_path_factory.mktemp("workloads-prometheus")
    given, pushes = demo_pushes()
    with prometheus_stack.started() as prometheus:
        cfg = parse_job_config({
            "source": {"bootstrapServers": "unused:9092"}, "parquet": {"path": str(out / "aggregates")},
            "run": {"mode": "batch"},
            "export": {"endpoint": prometheus.otlp_metrics_url, "resourceAttributes": {"service.name": JOB}},
        })
        rows = [(r.key, r.value, "client-telemetry", 0, i, stamp, r.headers) for i, (stamp, r) in enumerate(pushes)]
        counts = run_batch(jvm_decoder, cfg, jvm_decoder.createDataFrame(rows, RAW_SCHEMA_DDL))
        tables = {table: [r.asDict() for r in jvm_decoder.read.parquet(f"{cfg.parquet.path}/{table}").collect()]
                  for table in ("client_metrics", "workload_rollups")}
        assert counts["workload_rollups"] == len(tables["workload_rollups"]) > 0
        yield Exported(prometheus, given, tables["client_metrics"], tables["workload_rollups"])


def _at(row: dict[str, Any]) -> float:
    # PySpark gives timestamps as naive datetimes in the driver's local time, which timestamp() reads back so.
    return float(row["window_end"].timestamp())


def _value(prometheus: Any, promql: str, at: float) -> float:
    result = prometheus.query(promql, at=at)
    assert len(result) == 1, (promql, at, result)
    return float(result[0]["value"][1])


def _workload_selector(row: dict[str, Any]) -> str:
    return ",".join(f'{label}="{row[label]}"' for label in WORKLOAD_LABELS)


def _windows(exported: Exported) -> list[float]:
    return sorted({_at(r) for r in exported.client_metrics})


def _wait_for_the_workload_series(exported: Exported) -> None:
    """Every workload's instance count at the last window's end (the export posts synchronously; a query that
    races the server's commit of the appended samples is retried, with a deadline)."""
    last = _windows(exported)[-1]
    eventually(lambda: len(exported.prometheus.query(
        f'kct_aggregation_workload_instances{{job="{JOB}",client_instance_id=""}}', at=last)) == len(
        exported.workloads), timeout=30, what="a series per workload in Prometheus")


def test_each_workload_has_its_series_with_its_instances(exported: Exported) -> None:
    """Given the demo's two workloads of two pods each, When their windows are exported,
    Then per window Prometheus has one instance-count series per workload, labelled with the namespace, kind and
    name attribution gave its pods, whose value is workload_rollups' instances for it (2)."""
    _wait_for_the_workload_series(exported)
    windows = _windows(exported)
    assert len(windows) >= 2
    rollups = {(_at(r), *(r[label] for label in WORKLOAD_LABELS)): r["instances"] for r in exported.workload_rollups}
    for at in windows:
        result = exported.prometheus.query(
            f'kct_aggregation_workload_instances{{job="{JOB}",client_instance_id=""}}', at=at)
        got = {(at, *(s["metric"][label] for label in WORKLOAD_LABELS)): float(s["value"][1]) for s in result}
        assert set(got) == {(at, NAMESPACE, w.kind, w.name) for w in exported.workloads}
        assert all(got[key] == rollups[key] == len(w.clients)
                   for key, w in zip(sorted(got), sorted(exported.workloads, key=lambda w: w.kind), strict=True))


def test_per_workload_series_equal_the_parquet_aggregates(exported: Exported) -> None:
    """Given the same run, When each workload's series of the checked metrics is read at each window's end,
    Then it equals workload_rollups for the metrics the roll-up merges as the export does (the rates' and
    counters' values summed over the workload's clients, the delta counters' deltas summed), and the export's
    merge of the workload's client_metrics rows for the rest (a `.max` gauge the max, an `.avg` the mean)."""
    _wait_for_the_workload_series(exported)
    prometheus = exported.prometheus
    checked = 0
    for r in exported.workload_rollups:
        how = CHECKED.get(r["metric"])
        if how is None:
            continue
        assert r["k8s_workload_name"] is not None, r  # every demo client is attributed
        at = _at(r)
        members = [c for c in exported.client_metrics
                   if c["metric"] == r["metric"] and _at(c) == at
                   and all(c[label] == r[label] for label in WORKLOAD_LABELS)]
        assert len(members) == r["instances"] == 2
        values = [float(c[how.column]) for c in members]
        expected = {"sum": sum(values), "max": max(values), "mean": mean(values)}[how.merge]
        if how.rollup is not None:
            assert math.isclose(r[how.rollup], expected, rel_tol=1e-9), (r["metric"], how.rollup)
            expected = r[how.rollup]
        promql = f'{how.promql}{{job="{JOB}",client_instance_id="",{_workload_selector(r)}}}'
        assert math.isclose(_value(prometheus, promql, at), expected, rel_tol=1e-9), (promql, at, values)
        checked += 1
    # every checked metric of its workload (producer: 6, consumer: 4), in each of 2+ windows
    assert checked >= 2 * len(CHECKED)


def test_per_client_series_equal_the_client_metrics_rows(exported: Exported) -> None:
    """Given the same run, When each client's series of the checked metrics is read at each window's end,
    Then it equals its client_metrics row (the gauge's and counter's newest value, the delta counter's delta),
    and it is labelled with its pod's workload and its client id (the pod's name)."""
    _wait_for_the_workload_series(exported)
    prometheus = exported.prometheus
    workload_of = {c.synthetic.instance_id: (w, c) for w in exported.workloads for c in w.clients}
    checked = 0
    for r in exported.client_metrics:
        how = CHECKED.get(r["metric"])
        if how is None:
            continue
        workload, client = workload_of[r["client_instance_id"]]
        assert (r["k8s_namespace_name"], r["k8s_workload_kind"], r["k8s_workload_name"], r["k8s_pod_name"]) == (
            NAMESPACE, workload.kind, workload.name, client.pod)
        promql = f'{how.promql}{{job="{JOB}",client_instance_id="{r["client_instance_id"]}"}}'
        result = prometheus.query(promql, at=_at(r))
        assert len(result) == 1, (promql, result)
        labels = result[0]["metric"]
        assert (labels["client_id"], labels["k8s_workload_name"], labels["k8s_workload_kind"]) == (
            client.pod, workload.name, workload.kind)
        assert math.isclose(float(result[0]["value"][1]), r[how.column], rel_tol=1e-12), (promql, _at(r))
        checked += 1
    assert checked >= 2 * 2 * len(CHECKED)  # 2 clients per metric, 2+ windows
