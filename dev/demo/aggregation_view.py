"""What the demo shows of the aggregation on the node: the SparkApplication the operator rendered, as the
spark-operator runs it (its state, its driver and executor pods), and the TelemetryReceiver's
`status.aggregation`; and the Parquet the job wrote to the claim's volume.

Pure functions over the JSON `kubectl get -o json` returns and over a folder, so the demo's summary and its
HTML report show the same rows. No Kubernetes client, no Spark here.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "APPLICATION_HEADER",
    "POD_HEADER",
    "AggregationState",
    "aggregated_client_ids",
    "application_rows",
    "copy_tables",
    "parquet_files",
    "pod_rows",
    "read_rows",
    "receiver_aggregation",
]

APPLICATION_HEADER = ("SparkApplication", "state", "attempts", "submitted", "driver", "executors")
POD_HEADER = ("pod", "spark-role", "status", "node", "image")


@dataclass(frozen=True)
class AggregationState:
    """The TelemetryReceiver's view of its aggregation (`status.aggregation` and its condition)."""

    application: str       # SparkApplication/<name>, "" when the operator has not reported one
    state: str             # the spark-operator's state as the receiver reports it, "" when absent
    condition: str         # AggregationReady: "True"/"False"/"" (absent)
    message: str

    @classmethod
    def of(cls, receiver: Mapping[str, Any]) -> AggregationState:
        status = receiver.get("status", {})
        aggregation = status.get("aggregation") or {}
        condition: Mapping[str, Any] = next(
            (c for c in status.get("conditions", []) if c.get("type") == "AggregationReady"), {})
        return cls(application=str(aggregation.get("application", "")), state=str(aggregation.get("state") or ""),
                   condition=str(condition.get("status", "")),
                   message=str(aggregation.get("message") or condition.get("message") or ""))

    def line(self) -> str:
        return (f"status.aggregation: application {self.application or '-'}, state {self.state or '-'}; "
                f"condition AggregationReady={self.condition or '-'}" + (f" ({self.message})" if self.message else ""))


def receiver_aggregation(aggregation: Mapping[str, Any], *, image: str, claim: str,
                         service_account: str) -> dict[str, Any]:
    """The example's `spec.aggregation` with what the node gives it: our `kct-spark` image (imported into the
    node, never pulled), the claim the volume is bound to, the drivers' ServiceAccount of the spark-operator's
    chart."""
    driver = {**aggregation.get("driver", {}), "serviceAccount": service_account}
    return {**aggregation, "image": image, "imagePullPolicy": "Never", "sinkClaimName": claim, "driver": driver}


def _running(pod: Mapping[str, Any]) -> bool:
    return pod.get("status", {}).get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")


def application_rows(applications: Iterable[Mapping[str, Any]],
                     pods: Sequence[Mapping[str, Any]]) -> list[tuple[str, ...]]:
    """One row per SparkApplication: its state and execution attempts as the spark-operator reports them, its
    driver pod, and how many of its executors run."""
    rows: list[tuple[str, ...]] = []
    for app in applications:
        name = app["metadata"]["name"]
        status = app.get("status", {})
        mine = [p for p in pods if p["metadata"].get("labels", {}).get("sparkoperator.k8s.io/app-name") == name]
        drivers = [p["metadata"]["name"] for p in mine if p["metadata"]["labels"].get("spark-role") == "driver"]
        executors = [p for p in mine if p["metadata"]["labels"].get("spark-role") == "executor"]
        rows.append((name, str(status.get("applicationState", {}).get("state", "")),
                     str(status.get("executionAttempts", "")), str(status.get("lastSubmissionAttemptTime", "")),
                     ", ".join(drivers), f"{sum(_running(p) for p in executors)}/{len(executors)} running"))
    return rows


def pod_rows(pods: Iterable[Mapping[str, Any]]) -> list[tuple[str, ...]]:
    """The Spark pods, driver first: name, role, phase, node, image."""
    def order(pod: Mapping[str, Any]) -> tuple[int, str]:
        return (0 if pod["metadata"]["labels"].get("spark-role") == "driver" else 1, pod["metadata"]["name"])

    return [(p["metadata"]["name"], p["metadata"]["labels"].get("spark-role", ""),
             "Terminating" if p["metadata"].get("deletionTimestamp") else str(p.get("status", {}).get("phase", "")),
             str(p.get("spec", {}).get("nodeName", "")), str(p["spec"]["containers"][0]["image"]))
            for p in sorted(pods, key=order)]


def running_roles(pods: Iterable[Mapping[str, Any]]) -> set[str]:
    """The spark-roles with a running pod."""
    return {p["metadata"]["labels"].get("spark-role", "") for p in pods if _running(p)}


def _table_files(table: Path) -> list[Path]:
    # Spark's committer stages under `_temporary`; `_spark_metadata`/`_checkpoints` are no data.
    return sorted(p for p in table.rglob("*.parquet")
                  if not any(part.startswith(("_", ".")) for part in p.relative_to(table).parts))


def parquet_files(root: Path, table: str = "client_metrics") -> list[Path]:
    """The committed Parquet files of one table under the sink's `root`."""
    return _table_files(root / table) if (root / table).is_dir() else []


def read_rows(root: Path, table: str = "client_metrics") -> list[dict[str, Any]]:
    """The rows of one table (hive partition columns included); [] before the job wrote any."""
    files = parquet_files(root, table)
    if not files:
        return []
    import pyarrow.dataset as ds  # type: ignore[import-untyped]

    dataset = ds.dataset([str(f) for f in files], format="parquet", partitioning="hive",
                         partition_base_dir=str(root / table))
    rows: list[dict[str, Any]] = dataset.to_table().to_pylist()
    return rows


def aggregated_client_ids(root: Path) -> set[str]:
    """The client ids with at least one client_metrics row."""
    return {str(r["client_id"]) for r in read_rows(root)}


def copy_tables(root: Path, target: Path) -> list[str]:
    """The committed Parquet of every table under `root` copied to `target` (the volume goes with the demo's
    resources; the copy stays); returns the tables' names."""
    if target.exists():
        shutil.rmtree(target)
    tables = []
    for table in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))) \
            if root.is_dir() else []:
        for source in _table_files(table):
            dest = target / table.name / source.relative_to(table)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, dest)
        tables.append(table.name)
    return tables
