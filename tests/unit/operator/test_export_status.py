"""The aggregation export's report, from the last run's driver pod to `status.aggregation.export` and the
`AggregationExported` condition, against in-memory Kubernetes and Kafka."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from test_receiver_reconcile import World

from kct.aggregation.otlp_export import ExportStatus
from kct.aggregation.outputs import write_termination_message
from kct.controller.export_status import DRIVER_CONTAINER, driver_pod_name, report_from_pod

SCHEDULED = {"aggregation": {"mode": "scheduled", "schedule": "0 * * * *",
                             "export": {"endpoint": "http://prometheus:9090/api/v1/otlp/v1/metrics"}}}


def driver_pod(name: str, message: str | None) -> dict[str, Any]:
    state = {"terminated": {"exitCode": 0, "message": message}} if message is not None else {"running": {}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": "ns", "name": name},
            "status": {"containerStatuses": [{"name": DRIVER_CONTAINER, "state": state}]}}


def run_reported(world: World, run: str, message: str | None) -> None:
    """The spark-operator started `run` (the schedule's last run) and its driver pod is in `message`'s state."""
    ((_, namespace, name),) = [key for key in world.kube.objects if key[0] == "ScheduledSparkApplication"]
    world.kube.patch_status("sparkoperator.k8s.io/v1beta2", "ScheduledSparkApplication", namespace, name,
                            {"scheduleState": "Scheduled", "lastRunName": run})
    world.kube.objects["Pod", "ns", driver_pod_name(run)] = driver_pod(driver_pod_name(run), message)


def report(**counts: Any) -> str:
    return json.dumps(ExportStatus(**counts).as_dict(), sort_keys=True)


def test_a_run_that_gave_windows_up_sets_aggregation_exported_false_with_its_error() -> None:
    """Given scheduled aggregation with export, When the last run's driver ended reporting 2 windows given up,
    Then status.aggregation.export holds its counts and AggregationExported=False/ExportFailed names the run,
    the count and the error; Ready is untouched by it."""
    world = World()
    world.reconcile(SCHEDULED)
    run_reported(world, "tr-aggregation-1", report(windows_sent=3, windows_failed=2, requests_failed=8,
                                                   last_error="http://prometheus:9090: HTTP 503 (attempt 4 of 4)"))
    outcome = world.reconcile(SCHEDULED)
    export = outcome.status["aggregation"]["export"]
    assert export == {"run": "tr-aggregation-1", "windowsSent": 3, "windowsFailed": 2, "requestsFailed": 8,
                      "seriesSent": 0, "seriesDropped": 0,
                      "lastError": "http://prometheus:9090: HTTP 503 (attempt 4 of 4)"}
    condition = world.condition("AggregationExported")
    assert (condition["status"], condition["reason"]) == ("False", "ExportFailed")
    assert "tr-aggregation-1: 2 window(s)" in condition["message"] and "HTTP 503" in condition["message"]
    assert world.condition()["status"] == "True"


def test_a_run_that_sent_everything_sets_it_true_and_a_running_one_keeps_the_report() -> None:
    """Given a run that exported every window, Then AggregationExported=True/Exported with the newest window;
    When the next run's driver is still running, Then the previous run's report and condition stay."""
    world = World()
    world.reconcile(SCHEDULED)
    run_reported(world, "run-1", report(windows_sent=4, series_sent=48, last_window_end_sent="2026-11-21T11:55:00Z"))
    world.reconcile(SCHEDULED)
    condition = world.condition("AggregationExported")
    assert (condition["status"], condition["reason"]) == ("True", "Exported")
    assert condition["message"] == "run-1: 4 window(s) exported, the newest ending 2026-11-21T11:55:00Z"

    run_reported(world, "run-2", None)
    outcome = world.reconcile(SCHEDULED)
    assert outcome.status["aggregation"]["export"]["run"] == "run-1"
    assert outcome.status["aggregation"]["lastRun"] == "run-2"
    assert world.condition("AggregationExported")["reason"] == "Exported"


def test_without_export_or_before_any_report_there_is_no_condition() -> None:
    """Given aggregation without export, Then no AggregationExported condition; Given export but a driver
    that ended without a report (it failed before exporting: a stack trace), Then none either."""
    world = World()
    world.reconcile({"aggregation": {"mode": "scheduled", "schedule": "0 * * * *"}})
    run_reported(world, "run-1", report(windows_sent=1))
    outcome = world.reconcile({"aggregation": {"mode": "scheduled", "schedule": "0 * * * *"}})
    assert world.condition("AggregationExported") == {} and "export" not in outcome.status["aggregation"]

    world = World()
    world.reconcile(SCHEDULED)
    run_reported(world, "run-1", "Traceback (most recent call last): ...")
    outcome = world.reconcile(SCHEDULED)
    assert world.condition("AggregationExported") == {} and "export" not in outcome.status["aggregation"]


def test_a_pod_that_cannot_be_read_never_stops_the_reconcile() -> None:
    """Given pods the operator may not read (the fake serves no Pod kind), When a run is reported, Then the
    reconcile completes Ready=True and simply has no export report."""
    world = World()
    world.kube.missing_kinds = {"Pod"}
    world.reconcile(SCHEDULED)
    run_reported(world, "run-1", report(windows_sent=1))
    outcome = world.reconcile(SCHEDULED)
    assert outcome.error is None and world.condition()["status"] == "True"
    assert "export" not in outcome.status["aggregation"]


def test_the_driver_writes_the_report_the_operator_reads(tmp_path: Path) -> None:
    """Given the job's export status, When the driver writes it as its termination message (the file exists
    in a pod), Then the operator reads the same counts from a pod whose message is that file; outside a pod
    (no file) nothing is written."""
    status = ExportStatus(windows_sent=2, windows_failed=1, last_error="refused")
    termination_log = tmp_path / "termination-log"
    assert not write_termination_message(json.dumps(status.as_dict()), str(termination_log))
    termination_log.touch()
    assert write_termination_message(json.dumps(status.as_dict()), str(termination_log))
    pod = driver_pod("run-1-driver", termination_log.read_text())
    assert report_from_pod(pod) == {"windowsSent": 2, "windowsFailed": 1, "requestsFailed": 0, "seriesSent": 0,
                                    "seriesDropped": 0, "lastError": "refused"}
