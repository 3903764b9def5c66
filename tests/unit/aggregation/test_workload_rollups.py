"""Workloads in the aggregates: client_metrics' workload columns, the per-workload roll-up and the export's
per-workload series, from records carrying the attribution's resource attributes (Spark local mode)."""

from __future__ import annotations

from pathlib import Path
from statistics import mean
from typing import Any

import pytest
from aggregation_helpers import point, records_df

from kct.aggregation import batch
from kct.aggregation.config import AggregationConfig, ExportSettings
from kct.aggregation.otlp_metrics import EXPORT_COLUMNS, WORKLOAD_INSTANCES, window_points
from kct.aggregation.transforms import WORKLOAD_COLUMNS, WORKLOAD_ROLLUP_COLUMNS, with_workload_columns
from kct.attribution.workload import WORKLOAD_ATTRIBUTES, workload_of

pytestmark = pytest.mark.spark

QTIME = "org.apache.kafka.producer.record.queue.time.max"
SENT = "org.apache.kafka.producer.record.send.total"

# Two pods of one Deployment (their ReplicaSet too, as the attribution writes it), a StatefulSet's pod, and a
# client the attribution found nothing for.
CLIENTS: dict[str, dict[str, str]] = {
    "inst-a": {"k8s.namespace.name": "shop", "k8s.pod.name": "orders-7d9f-a", "k8s.replicaset.name": "orders-7d9f",
               "k8s.deployment.name": "orders", "service.name": "orders"},
    "inst-b": {"k8s.namespace.name": "shop", "k8s.pod.name": "orders-7d9f-b", "k8s.replicaset.name": "orders-7d9f",
               "k8s.deployment.name": "orders"},
    "inst-c": {"k8s.namespace.name": "shop", "k8s.pod.name": "ledger-0", "k8s.statefulset.name": "ledger"},
    "inst-d": {},
}
WORKLOAD = {"inst-a": ("shop", "deployment", "orders"), "inst-b": ("shop", "deployment", "orders"),
            "inst-c": ("shop", "statefulset", "ledger"), "inst-d": (None, None, None)}
# Within window 0 (seconds after T0): each client's gauge points and its delta counter's points.
GAUGE = {"inst-a": [(10, 3.0), (40, 5.0)], "inst-b": [(10, 7.0), (40, 2.0)], "inst-c": [(10, 4.0), (40, 6.0)],
         "inst-d": [(10, 9.0), (40, 1.0)]}
DELTAS = {"inst-a": [(10, 10.0), (40, 20.0)], "inst-b": [(10, 5.0)], "inst-c": [(10, 7.0)], "inst-d": [(40, 1.0)]}


def _records(spark: Any) -> Any:
    rows = []
    for instance, resource in CLIENTS.items():
        who = {"client_instance_id": instance, "client_id": f"app-{instance}", "resource_attributes": resource}
        rows += [point(QTIME, t, v, **who) for t, v in GAUGE[instance]]
        rows += [point(SENT, t, v, type="sum", temporality="delta", monotonic=True, start_s=t - 10, **who)
                 for t, v in DELTAS[instance]]
    return records_df(spark, rows)


def _expected() -> dict[tuple[Any, ...], dict[str, Any]]:
    """The workload roll-up of window 0 computed here from the points: per client first (a window's min, max,
    mean, last; its deltas' sum), then across the workload's clients."""
    expected: dict[tuple[Any, ...], dict[str, Any]] = {}
    for workload in sorted(set(WORKLOAD.values()), key=str):
        members = [i for i, w in WORKLOAD.items() if w == workload]
        values = [[v for _, v in GAUGE[i]] for i in members]
        expected[(*workload, QTIME)] = {
            "instances": len(members), "points": sum(len(v) for v in values),
            "value_min": min(min(v) for v in values), "value_max": max(max(v) for v in values),
            "value_avg": mean(mean(v) for v in values), "value_last_sum": sum(v[-1] for v in values),
        }
        delta = sum(v for i in members for _, v in DELTAS[i])
        expected[(*workload, SENT)] = {
            "instances": len(members), "points": sum(len(DELTAS[i]) for i in members),
            "delta": delta, "rate": delta / 60,
        }
    return expected


@pytest.fixture(scope="module")
def job_tables(jvm_decoder: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """run_batch over the records: its client_metrics and workload_rollups rows."""
    out: Path = tmp_path_factory.mktemp("workloads")
    cfg = AggregationConfig.model_validate({"source": {"bootstrapServers": "unused"}, "parquet": {"path": str(out)}})
    counts = batch.run_batch(jvm_decoder, cfg, records=_records(jvm_decoder))
    tables = {table: [r.asDict() for r in jvm_decoder.read.parquet(str(out / table)).collect()]
              for table in ("client_metrics", "workload_rollups")}
    assert counts["workload_rollups"] == len(tables["workload_rollups"])
    return tables


def test_client_metrics_carry_the_workload_of_their_resource_attributes(
        job_tables: dict[str, list[dict[str, Any]]]) -> None:
    """Given pushes attributed to two Deployment pods, a StatefulSet pod and one client without attributes,
    When the batch job aggregates them, Then each client_metrics row names its client's namespace, workload
    kind and name and pod (the Deployment over its ReplicaSet), and the unattributed client's are null."""
    seen = {(r["client_instance_id"], r["k8s_namespace_name"], r["k8s_workload_kind"], r["k8s_workload_name"],
             r["k8s_pod_name"]) for r in job_tables["client_metrics"]}
    assert seen == {(i, *WORKLOAD[i], CLIENTS[i].get("k8s.pod.name")) for i in CLIENTS}


def test_the_workload_rollup_merges_each_workloads_instances(job_tables: dict[str, list[dict[str, Any]]]) -> None:
    """Given the same records, Then workload_rollups has one row per workload and metric in the window: the
    Deployment's two pods merged (gauges: min of mins, max of maxes, mean of means, last values summed;
    counter deltas and rates summed), the StatefulSet alone, the unattributed client under the null workload,
    each with the instances it merged."""
    rows = job_tables["workload_rollups"]
    assert all(set(r) == set(WORKLOAD_ROLLUP_COLUMNS) for r in rows)  # `date` read back last: the partition
    got = {(r["k8s_namespace_name"], r["k8s_workload_kind"], r["k8s_workload_name"], r["metric"]): r for r in rows}
    expected = _expected()
    assert set(got) == set(expected)
    for key, figures in expected.items():
        for name, value in figures.items():
            assert got[key][name] == pytest.approx(value, rel=1e-12), (key, name)


def test_the_export_sends_a_series_per_workload_beside_the_clients(
        job_tables: dict[str, list[dict[str, Any]]]) -> None:
    """Given the job's client_metrics rows and the default allow-list, When the export builds the window's
    points, Then each workload has its own series (workload labels, no instance id) with the clients' values
    merged and its instance count, the unattributed clients one without workload labels, and every client its
    own series still, labelled with its workload; a cap below the total drops whole clients first."""
    rows = [{c: r[c] for c in EXPORT_COLUMNS} for r in job_tables["client_metrics"]]
    [window] = window_points(rows, ExportSettings(endpoint="http://x"))
    series = {(p.name, p.labels): p.value for p in window.points}
    orders = (("k8s_namespace_name", "shop"), ("k8s_workload_kind", "deployment"), ("k8s_workload_name", "orders"))
    ledger = (("k8s_namespace_name", "shop"), ("k8s_workload_kind", "statefulset"), ("k8s_workload_name", "ledger"))
    queue, sent = "kafka.producer.record.queue.time.max", "kafka.producer.record.send.total"
    per_workload = {key: value for key, value in series.items() if "client_instance_id" not in dict(key[1])}
    assert per_workload == {
        (queue, orders): 5.0, (queue, ledger): 6.0, (queue, ()): 1.0,  # `.max` gauges: the max of the last values
        (sent, orders): 35.0, (sent, ledger): 7.0, (sent, ()): 1.0,  # delta sums: the window's deltas added
        (WORKLOAD_INSTANCES, orders): 2.0, (WORKLOAD_INSTANCES, ledger): 1.0, (WORKLOAD_INSTANCES, ()): 1.0,
    }
    b_labels = dict(next(labels for name, labels in series if name == queue
                         and dict(labels).get("client_instance_id") == "inst-b"))
    assert b_labels == {"client_instance_id": "inst-b", "client_id": "app-inst-b", "client_software_name": "librdkafka",
                        "client_software_version": "2.12.1", **dict(orders)}
    assert len(series) - len(per_workload) == 2 * len(CLIENTS)
    [capped] = window_points(rows, ExportSettings(endpoint="http://x", max_series_per_window=len(per_workload) + 3))
    assert {p.labels for p in capped.points} >= {labels for _, labels in per_workload}
    assert (capped.dropped_clients, capped.dropped_series) == (3, 6)


def test_the_sql_columns_follow_the_attribution_mapping(spark: Any) -> None:
    """Given resource attribute maps with every pair of owner attributes (and empty values), When the workload
    columns are computed in Spark SQL, Then each row's kind and name are kct.attribution.workload's for the
    same map, and namespace and pod its attributes (null when absent or empty)."""
    keys = [key for key, _ in WORKLOAD_ATTRIBUTES]
    maps = [{}, {"k8s.namespace.name": "", "k8s.pod.name": ""}, {keys[0]: ""}]
    maps += [{"k8s.namespace.name": "ns", "k8s.pod.name": "p", a: "x", b: "y"} for a in keys for b in keys if a != b]
    df = spark.createDataFrame([(i, m) for i, m in enumerate(maps)], "i int, resource_attributes map<string,string>")
    got = {r["i"]: tuple(r[c] for c in WORKLOAD_COLUMNS)
           for r in with_workload_columns(df, ("i", *WORKLOAD_COLUMNS)).collect()}
    for i, m in enumerate(maps):
        kind, name = workload_of(m) or (None, None)
        assert got[i] == (m.get("k8s.namespace.name") or None, kind, name, m.get("k8s.pod.name") or None), m
