"""The operator's own Prometheus metrics, served on `kct operator --metrics-address` at /metrics.

What a platform team asks of an operator: is it reconciling, how long does that take, is Kafka refusing it,
and is each TelemetryReceiver's aggregation export getting through. So:

- `kct_operator_reconciles_total{kind, outcome, reason}`: reconciles by resource kind, `outcome` ok / retry /
  stopped (stopped: the spec or a human must act first; no retry) and the Ready condition's reason (a
  `Reason`, a closed set: bounded cardinality);
- `kct_operator_reconcile_duration_seconds{kind}`: a histogram of the blocking reconcile's time;
- `kct_operator_kafka_admin_errors_total{kind, reason}`: reconciles that a Kafka Admin API call stopped, by
  reason (KafkaUnreachable, KafkaNotAuthorized, ...), the errors `kct.controller.reasons` maps;
- `kct_operator_aggregation_export_windows_failed{namespace, telemetryreceiver}` and
  `kct_operator_aggregation_export_windows_sent{...}`: the last aggregation run's OTLP export, as its driver
  reported it (`kct.controller.export_status`); a receiver without a reported run has no series.

Each `kct operator` process has one `OperatorMetrics` on its own registry (not prometheus_client's global
one, so tests build as many as they like); the handlers record into it, never the reconcile functions,
which stay plain and kopf-free.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.exposition import start_http_server

from kct.controller.conditions import ConditionType, Reason, find_condition
from kct.controller.kernel import Outcome

__all__ = ["KAFKA_REASONS", "OperatorMetrics", "outcome_labels", "serve_metrics"]

KAFKA_REASONS: Final = frozenset({
    Reason.KAFKA_UNREACHABLE,
    Reason.KAFKA_NOT_AUTHORIZED,
    Reason.KAFKA_REJECTED,
    Reason.KAFKA_ERROR,
    Reason.KAFKA_CONNECTION_INVALID,
})
"""Ready reasons that mean a Kafka Admin API call (or the connection for it) failed."""

# A reconcile takes milliseconds against fakes and seconds against a slow API server or an unreachable
# broker (the admin client's timeout): buckets from 10 ms to a minute.
_DURATION_BUCKETS: Final = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def outcome_labels(outcome: Outcome) -> tuple[str, str]:
    """(outcome, reason) of a reconcile: ok / retry / stopped, and its Ready reason ("" when it wrote none,
    e.g. a paused resource)."""
    ready = find_condition((outcome.status or {}).get("conditions"), ConditionType.READY) or {}
    reason = str(ready.get("reason") or "")
    if outcome.retry_after is not None:
        return "retry", reason
    if outcome.error is not None:
        return "stopped", reason
    return "ok", reason


class OperatorMetrics:
    """The operator's metrics on a registry of their own."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        # Only the `_total` samples: `_created` doubles every series for nothing a dashboard reads.
        disable_created_metrics()  # type: ignore[no-untyped-call]  # the library leaves it unannotated
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.reconciles = Counter(
            "kct_operator_reconciles", "Reconciles by resource kind, outcome (ok, retry, stopped) and Ready reason",
            ["kind", "outcome", "reason"], registry=self.registry,
        )
        self.duration = Histogram(
            "kct_operator_reconcile_duration_seconds", "Time of one reconcile (Kubernetes and Kafka calls included)",
            ["kind"], buckets=_DURATION_BUCKETS, registry=self.registry,
        )
        self.kafka_errors = Counter(
            "kct_operator_kafka_admin_errors", "Reconciles stopped by a Kafka Admin API error, by reason",
            ["kind", "reason"], registry=self.registry,
        )
        self.export_failed = Gauge(
            "kct_operator_aggregation_export_windows_failed",
            "Windows whose OTLP export the last aggregation run gave up after its retries",
            ["namespace", "telemetryreceiver"], registry=self.registry,
        )
        self.export_sent = Gauge(
            "kct_operator_aggregation_export_windows_sent",
            "Windows the last aggregation run exported over OTLP",
            ["namespace", "telemetryreceiver"], registry=self.registry,
        )
        self._lock = threading.Lock()  # reconciles of several resources record from several threads

    def observe_reconcile(self, kind: str, seconds: float, outcome: Outcome) -> None:
        """One reconcile of a `kind` resource that took `seconds` and decided `outcome`."""
        result, reason = outcome_labels(outcome)
        with self._lock:
            self.reconciles.labels(kind, result, reason).inc()
            self.duration.labels(kind).observe(seconds)
            if reason in KAFKA_REASONS:
                self.kafka_errors.labels(kind, reason).inc()

    def observe_export(self, namespace: str, name: str, export: Mapping[str, Any] | None) -> None:
        """A TelemetryReceiver's `status.aggregation.export` (None: no run reported; its series go away)."""
        with self._lock:
            if export is None:
                self.forget_receiver(namespace, name)
                return
            self.export_failed.labels(namespace, name).set(float(export.get("windowsFailed") or 0))
            self.export_sent.labels(namespace, name).set(float(export.get("windowsSent") or 0))

    def forget_receiver(self, namespace: str, name: str) -> None:
        """A deleted receiver keeps no series."""
        for gauge in (self.export_failed, self.export_sent):
            with contextlib.suppress(KeyError):  # no report was ever recorded for it
                gauge.remove(namespace, name)


def serve_metrics(metrics: OperatorMetrics, address: str) -> Any:
    """Serve `metrics` on `address` ("host:port"; port 0 picks a free one) in a daemon thread; returns the
    server (its `server_port` is the port bound)."""
    host, _, port = address.rpartition(":")
    server, _thread = start_http_server(int(port), addr=host or "0.0.0.0", registry=metrics.registry)
    return server
