"""dev/demo/aggregation_view.py: what the demo shows of the aggregation on the node, from `kubectl get -o
json` answers and from the Parquet folder the executors write. The demo itself runs in
tests/e2e/test_demo_e2e.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "dev" / "demo"))
import aggregation_view as view

APP = "telemetry-aggregation"


def _pod(name: str, role: str, phase: str = "Running", deleting: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": {"spark-role": role, "sparkoperator.k8s.io/app-name": APP}}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-26T06:00:00Z"
    return {"metadata": metadata, "spec": {"nodeName": "kct-node", "containers": [{"image": "kct.dev/kct-spark:1"}]},
            "status": {"phase": phase}}


def test_the_application_row_shows_its_state_its_driver_and_its_running_executors() -> None:
    """Given a RUNNING application with its driver, a running executor and one being deleted, then its row
    names the state, the attempts, the driver and counts 1 of 2 executors running."""
    application = {"metadata": {"name": APP}, "status": {"applicationState": {"state": "RUNNING"},
                                                         "executionAttempts": 1,
                                                         "lastSubmissionAttemptTime": "2026-11-26T06:00:00Z"}}
    pods = [_pod(f"{APP}-driver", "driver"), _pod("exec-1", "executor"), _pod("exec-0", "executor", deleting=True)]
    assert view.application_rows([application], pods) == [
        (APP, "RUNNING", "1", "2026-11-26T06:00:00Z", f"{APP}-driver", "1/2 running")]


def test_pod_rows_put_the_driver_first_and_show_a_deleted_pod_as_terminating() -> None:
    pods = [_pod("b-exec", "executor", deleting=True), _pod("a-exec", "executor", "Pending"),
            _pod("z-driver", "driver")]
    rows = view.pod_rows(pods)
    assert [r[:3] for r in rows] == [("z-driver", "driver", "Running"), ("a-exec", "executor", "Pending"),
                                     ("b-exec", "executor", "Terminating")]
    assert {r[3:] for r in rows} == {("kct-node", "kct.dev/kct-spark:1")}
    assert view.running_roles(pods) == {"driver"}


def test_the_receivers_aggregation_state_comes_from_its_status_and_condition() -> None:
    receiver = {"status": {"aggregation": {"application": f"SparkApplication/{APP}", "state": "RUNNING"},
                           "conditions": [{"type": "Ready", "status": "True"},
                                          {"type": "AggregationReady", "status": "True", "message": "RUNNING"}]}}
    state = view.AggregationState.of(receiver)
    assert (state.application, state.state, state.condition) == (f"SparkApplication/{APP}", "RUNNING", "True")
    assert state.line().startswith(f"status.aggregation: application SparkApplication/{APP}, state RUNNING;")
    assert view.AggregationState.of({}).line().startswith("status.aggregation: application -, state -;")


def test_the_receivers_aggregation_gets_the_nodes_image_claim_and_service_account() -> None:
    """Given the example's aggregation, then the node's image (never pulled), claim and ServiceAccount are set
    and the example's own settings (driver memory, window) are kept."""
    example = {"window": {"sizeSeconds": 10}, "driver": {"memory": "768m"}}
    out = view.receiver_aggregation(example, image="kct.dev/kct-spark:1", claim="aggregates",
                                    service_account="spark-operator-spark")
    assert out == {"window": {"sizeSeconds": 10}, "image": "kct.dev/kct-spark:1", "imagePullPolicy": "Never",
                   "sinkClaimName": "aggregates",
                   "driver": {"memory": "768m", "serviceAccount": "spark-operator-spark"}}
    assert example["driver"] == {"memory": "768m"}


def _write(path: Path, client_ids: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"client_id": client_ids, "points": [1] * len(client_ids)}), path)


def test_only_committed_parquet_is_read_and_copied(tmp_path: Path) -> None:
    """Given a volume with committed files of two tables (hive partitions), a file Spark's committer still
    stages under _temporary and the streaming checkpoint, then the rows, the client ids and the copy hold the
    committed files only, partition columns included."""
    volume = tmp_path / "volume"
    assert view.read_rows(volume) == [] and view.parquet_files(volume) == []
    _write(volume / "client_metrics" / "date=2026-11-26" / "part-0.parquet", ["demo-a", "demo-b"])
    _write(volume / "client_metrics" / "_temporary" / "0" / "part-1.parquet", ["demo-staged"])
    _write(volume / "alerts" / "part-0.parquet", ["demo-a"])
    _write(volume / "_checkpoints" / "client_metrics_state" / "0" / "pending" / "part-0.parquet", ["demo-c"])
    assert len(view.parquet_files(volume)) == 1
    assert view.aggregated_client_ids(volume) == {"demo-a", "demo-b"}
    assert {r["date"] for r in view.read_rows(volume)} == {"2026-11-26"}
    copy = tmp_path / "copy"
    assert view.copy_tables(volume, copy) == ["alerts", "client_metrics"]
    assert sorted(str(p.relative_to(copy)) for p in copy.rglob("*.parquet")) == [
        "alerts/part-0.parquet", "client_metrics/date=2026-11-26/part-0.parquet"]
    assert view.aggregated_client_ids(copy) == {"demo-a", "demo-b"}
