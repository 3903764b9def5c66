"""The operator's /metrics: what the handlers record, and the endpoint `kct operator --metrics-address` serves,
scraped over HTTP and parsed as Prometheus parses it."""

from __future__ import annotations

import urllib.request
from typing import Any

import kopf
import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_export_status import driver_pod, report
from test_handler_bodies import AVAILABLE, receiver_body, receiver_memo, subscription_body, subscription_memo

from kct.controller.children import InMemoryChildren
from kct.controller.kernel import OperatorConfig, Outcome
from kct.controller.metrics import OperatorMetrics, outcome_labels, serve_metrics
from kct.controller.subscription_handlers import CLAIMS_INDEX, SubscriptionHandlers, claims_index
from kct.controller.telemetry_receiver_handlers import ReceiverHandlers
from kct.kafka.fake import InMemoryClientMetricsAdmin, InMemoryTopicAdmin


def samples(metrics: OperatorMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape of `metrics`' endpoint, by name and sorted labels."""
    server = serve_metrics(metrics, "127.0.0.1:0")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10) as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain")
            text = response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def ready_outcome(reason: str, *, retry_after: float | None = None, error: str | None = None) -> Outcome:
    status = {"conditions": [{"type": "Ready", "status": "True" if reason == "Reconciled" else "False",
                              "reason": reason}]}
    return Outcome(status, retry_after=retry_after, error=error)


def test_outcomes_are_labelled_ok_retry_or_stopped_with_their_ready_reason() -> None:
    """Given outcomes of each kind, Then ok / retry / stopped with the Ready reason ("" without one)."""
    assert outcome_labels(ready_outcome("Reconciled")) == ("ok", "Reconciled")
    assert outcome_labels(ready_outcome("KafkaUnreachable", retry_after=2.0, error="down")) == (
        "retry", "KafkaUnreachable")
    assert outcome_labels(ready_outcome("InvalidSpec", error="bad")) == ("stopped", "InvalidSpec")
    assert outcome_labels(Outcome({})) == ("ok", "")


def test_the_endpoint_serves_reconciles_durations_kafka_errors_and_export_failures() -> None:
    """Given recorded reconciles (one ok, two stopped by an unreachable broker) and a receiver's export report,
    When /metrics is scraped, Then the counters, the histogram's count and the export gauges read back exactly,
    and a forgotten receiver has no export series."""
    metrics = OperatorMetrics()
    metrics.observe_reconcile("TelemetryReceiver", 0.2, ready_outcome("Reconciled"))
    for _ in range(2):
        metrics.observe_reconcile("TelemetryReceiver", 3.0, ready_outcome("KafkaUnreachable", retry_after=4.0,
                                                                         error="no broker"))
    metrics.observe_export("ns", "tr", {"windowsSent": 5, "windowsFailed": 2})
    metrics.observe_export("ns", "gone", {"windowsSent": 1, "windowsFailed": 0})
    metrics.forget_receiver("ns", "gone")

    scraped = samples(metrics)
    kind = ("kind", "TelemetryReceiver")
    assert scraped["kct_operator_reconciles_total", (kind, ("outcome", "ok"), ("reason", "Reconciled"))] == 1
    assert scraped["kct_operator_reconciles_total", (kind, ("outcome", "retry"), ("reason", "KafkaUnreachable"))] == 2
    assert scraped["kct_operator_kafka_admin_errors_total", (kind, ("reason", "KafkaUnreachable"))] == 2
    assert scraped["kct_operator_reconcile_duration_seconds_count", (kind,)] == 3
    assert scraped["kct_operator_reconcile_duration_seconds_bucket", (kind, ("le", "0.25"))] == 1
    assert scraped["kct_operator_reconcile_duration_seconds_sum", (kind,)] == 6.2
    receiver = (("namespace", "ns"), ("telemetryreceiver", "tr"))
    assert scraped["kct_operator_aggregation_export_windows_failed", receiver] == 2
    assert scraped["kct_operator_aggregation_export_windows_sent", receiver] == 5
    assert not [key for key in scraped if ("telemetryreceiver", "gone") in key[1]]
    assert not [key for key in scraped if key[0].endswith("_created")]


async def test_the_handlers_record_every_reconcile_and_the_export_report() -> None:
    """Given the receiver and subscription handlers sharing one OperatorMetrics, When a receiver whose last
    aggregation run gave a window up is reconciled and a subscription is reconciled against a broker that is
    down, Then the receiver's reconcile is counted ok, its export failure is a gauge, and the subscription's
    is counted as a retry and a Kafka admin error."""
    metrics = OperatorMetrics()
    kube, kafka = InMemoryChildren(deployment_status=dict(AVAILABLE)), InMemoryTopicAdmin()
    spec: dict[str, Any] = {"aggregation": {"mode": "scheduled", "schedule": "0 * * * *",
                                            "export": {"endpoint": "http://prometheus:9090/api/v1/otlp/v1/metrics"}}}
    handlers = ReceiverHandlers(OperatorConfig(), metrics)
    memo = receiver_memo(kube, kafka)
    await handlers.on_change(body=kopf.Body(receiver_body(**spec)), patch=kopf.Patch(), memo=memo, retry=0)
    ((_, namespace, name),) = [key for key in kube.objects if key[0] == "ScheduledSparkApplication"]
    kube.patch_status("sparkoperator.k8s.io/v1beta2", "ScheduledSparkApplication", namespace, name,
                      {"lastRunName": "run-1"})
    kube.objects["Pod", "ns", "run-1-driver"] = driver_pod("run-1-driver", report(windows_sent=3, windows_failed=1))
    await handlers.resync(body=kopf.Body(receiver_body(**spec)), patch=kopf.Patch(), memo=memo)

    body = kopf.Body(subscription_body())
    index = {name: [claim] for name, claim in claims_index(body=body).items()}
    down = subscription_memo(InMemoryClientMetricsAdmin(unreachable=True))
    with pytest.raises(kopf.TemporaryError):
        await SubscriptionHandlers(OperatorConfig(), metrics).on_change(
            body=body, patch=kopf.Patch(), memo=down, retry=0, **{CLAIMS_INDEX: index})

    scraped = samples(metrics)
    receiver_kind = ("kind", "TelemetryReceiver")
    assert scraped["kct_operator_reconciles_total", (receiver_kind, ("outcome", "ok"), ("reason", "Reconciled"))] == 2
    assert scraped["kct_operator_aggregation_export_windows_failed",
                   (("namespace", "ns"), ("telemetryreceiver", "tr"))] == 1
    subscription_kind = ("kind", "ClientMetricsSubscription")
    assert scraped["kct_operator_reconciles_total",
                   (subscription_kind, ("outcome", "retry"), ("reason", "KafkaUnreachable"))] == 1
    assert scraped["kct_operator_kafka_admin_errors_total", (subscription_kind, ("reason", "KafkaUnreachable"))] == 1

