"""The aggregation's OTLP export, as its last run's driver reported it: what `status.aggregation.export` and
the `AggregationExported` condition show.

The job keeps its export's status in `<sinkPath>/_export/status.json`, on a volume or an object store the
operator does not mount. So the driver also writes the same JSON to its container's termination message
file (`kct.aggregation.outputs.TERMINATION_LOG`), and Kubernetes copies it into the pod's status when the
container ends (`state.terminated.message`, at most 4 KiB). The operator reads it from the pod of the
ScheduledSparkApplication's last run (`<lastRun>-driver`, the spark-operator's name for it): no credentials
for the driver, no volume for the operator, only `get` on pods.

While a run is in progress (its driver has not ended) or its pod is gone, the previous report is kept, so
the condition does not flap with every run. Reading is best-effort: a pod that cannot be read never stops a
reconcile, it only leaves the previous report in place.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, Final

from kct.controller.children import ChildrenClient
from kct.controller.conditions import ConditionType, Reason
from kct.controller.kernel import ConditionTracker

__all__ = [
    "DRIVER_CONTAINER",
    "driver_pod_name",
    "export_condition",
    "read_export_status",
    "report_from_pod",
]

log = logging.getLogger(__name__)

DRIVER_CONTAINER: Final = "spark-kubernetes-driver"
"""The driver container's name in the pods Spark on Kubernetes creates."""

# ExportStatus field (kct.aggregation.otlp_export) -> status.aggregation.export field
_FIELDS: Final = {
    "windows_sent": "windowsSent",
    "windows_failed": "windowsFailed",
    "requests_failed": "requestsFailed",
    "series_sent": "seriesSent",
    "series_dropped": "seriesDropped",
    "last_error": "lastError",
    "last_window_end_sent": "lastWindowEndSent",
}


def driver_pod_name(application: str) -> str:
    """The spark-operator's name for a SparkApplication's driver pod."""
    return f"{application}-driver"


def report_from_pod(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """The export report in an ended driver pod's termination message, in status form; None while the driver
    runs, or when it ended without one (a job without export, or one that failed before exporting)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for container in statuses:
        if container.get("name") != DRIVER_CONTAINER:
            continue
        message = ((container.get("state") or {}).get("terminated") or {}).get("message")
        if not message:
            return None
        try:
            raw = json.loads(message)
        except ValueError:
            return None  # the message of a driver that died otherwise (e.g. a stack trace)
        if not isinstance(raw, dict) or "windows_failed" not in raw:
            return None
        return {status: raw[field] for field, status in _FIELDS.items() if raw.get(field) not in (None, "")}
    return None


def read_export_status(
    children: ChildrenClient, namespace: str, last_run: str | None, previous: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """The report of the run `last_run` if its driver ended with one, else `previous` (kept as it was)."""
    if not last_run:
        return dict(previous) if previous else None
    try:
        pod = children.get("v1", "Pod", namespace, driver_pod_name(last_run))
    except Exception as error:  # an observation, never a reason to stop the reconcile (e.g. no RBAC on pods)
        log.debug("reading driver pod %s/%s: %s", namespace, driver_pod_name(last_run), error)
        pod = None
    report = report_from_pod(pod) if pod is not None else None
    if report is None:
        return dict(previous) if previous else None
    return {**report, "run": last_run}


def export_condition(export: Mapping[str, Any] | None, exporting: bool, conditions: ConditionTracker) -> None:
    """`AggregationExported`: False when the last reported run gave windows up, True when it sent all; absent
    without `spec.aggregation.export` or before a run reported."""
    if not exporting or export is None:
        conditions.remove(ConditionType.AGGREGATION_EXPORTED)
        return
    run = export.get("run", "the last run")
    failed = int(export.get("windowsFailed") or 0)
    sent = int(export.get("windowsSent") or 0)
    if failed:
        message = (f"{run}: {failed} window(s) not exported after the retries ({sent} sent): "
                   f"{export.get('lastError') or 'no error recorded'}; they are in Parquet only")
        conditions.set(ConditionType.AGGREGATION_EXPORTED, False, Reason.EXPORT_FAILED, message)
    else:
        last = export.get("lastWindowEndSent")
        message = f"{run}: {sent} window(s) exported" + (f", the newest ending {last}" if last else "")
        conditions.set(ConditionType.AGGREGATION_EXPORTED, True, Reason.EXPORTED, message)
