"""Status conditions, the Kubernetes way, for every kct controller.

A condition is `{type, status, reason, message, observedGeneration, lastTransitionTime}`
(metav1.Condition). `set_condition` returns a new list where the condition of that type is replaced,
keeping `lastTransitionTime` when `status` did not change, so `kubectl wait`, Flux's kstatus and
Argo CD see a stable history. Every reason any controller writes is a member of `Reason`: one place
to look up what a reason means, and no typos between writers and readers (tests, docs, alerts). Which
reason an error stands for is decided in one place too: `kct.controller.reasons`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any, Literal

__all__ = [
    "ConditionStatus",
    "ConditionType",
    "Reason",
    "find_condition",
    "now_rfc3339",
    "remove_condition",
    "set_condition",
]

ConditionStatus = Literal["True", "False", "Unknown"]


class ConditionType(StrEnum):
    READY = "Ready"
    """The resource's desired state is in effect."""
    INTERVAL_CAPPED = "IntervalCapped"
    """True when the requested push interval exceeds what brokers honour (a warning)."""
    RECONCILIATION_PAUSED = "ReconciliationPaused"
    """Present and True while the pause annotation is set."""
    TOPIC_READY = "TopicReady"
    """TelemetryReceiver: the output topic exists with at least the requested partitions."""
    PARTITIONS_SHRINK_REFUSED = "PartitionsShrinkRefused"
    """TelemetryReceiver: True when the spec asks for fewer partitions than the topic has (a warning)."""
    REPLICATION_FACTOR_DIFFERS = "ReplicationFactorDiffers"
    """TelemetryReceiver: True when the topic's replication is not the spec's (Kafka does not change it by
    config) or the spec's min ISR cannot be set on it (a warning)."""
    AGGREGATION_READY = "AggregationReady"
    """TelemetryReceiver: the Spark application was accepted and has not failed (or aggregation is off)."""
    CLIENTS_MATCHED = "ClientsMatched"
    """ClientMetricsSubscription: live clients match it (False after a while without any; never affects Ready)."""
    AGGREGATION_EXPORTED = "AggregationExported"
    """TelemetryReceiver with spec.aggregation.export: the last reported run exported every window over OTLP."""


class Reason(StrEnum):
    RECONCILED = "Reconciled"
    """Ready=True: the external state equals the spec."""
    INVALID_SPEC = "InvalidSpec"
    """The spec breaks a rule the API server cannot check (e.g. RE2 syntax); nothing was sent."""
    CONFLICT = "Conflict"
    """Another, older resource manages the same external object."""
    KAFKA_UNREACHABLE = "KafkaUnreachable"
    """No broker answered; retried with backoff."""
    KAFKA_NOT_AUTHORIZED = "KafkaNotAuthorized"
    """Authentication failed or ACLs are missing; retried with backoff."""
    KAFKA_REJECTED = "KafkaRejected"
    """The broker refused the configs or the topic; fix the spec (not retried: the resync looks again)."""
    KAFKA_ERROR = "KafkaError"
    """Any other Kafka error; retried with backoff."""
    KAFKA_CONNECTION_INVALID = "KafkaConnectionInvalid"
    """No cluster configured, or the connection Secret is missing or unusable; retried slowly."""
    PAUSED = "Paused"
    """The pause annotation is set; the operator leaves the external state alone."""
    CLEANUP_ABANDONED = "CleanupAbandoned"
    """Event: a deleted resource's Kafka connection (its Secret) is gone, so its configs were left on the broker."""
    INTERVAL_ABOVE_BROKER_CAP = "IntervalAboveBrokerCap"
    INTERVAL_WITHIN_BROKER_CAP = "IntervalWithinBrokerCap"
    DRIFT_REVERTED = "DriftReverted"
    """Event reason: a change made outside the operator was undone."""
    ROLLOUT_IN_PROGRESS = "RolloutInProgress"
    """Ready=False while the receiver Deployment has fewer available pods than it wants (Argo CD: Progressing)."""
    APPLY_FAILED = "ApplyFailed"
    """The API server refused a child object; retried with backoff."""
    PARTITIONS_SHRINK_REFUSED = "PartitionsShrinkRefused"
    """The spec asks for fewer partitions than the topic has; Kafka cannot remove partitions."""
    PARTITIONS_MATCH = "PartitionsMatch"
    REPLICATION_UNSATISFIABLE = "ReplicationUnsatisfiable"
    """The topic is not created: spec.topic asks for more replicas than the cluster has brokers, or a min ISR
    above the replicas (the resync looks again, e.g. after brokers were added)."""
    REPLICATION_FACTOR_DIFFERS = "ReplicationFactorDiffers"
    """The existing topic has another replication factor than the spec's; reported, not changed."""
    MIN_INSYNC_ABOVE_REPLICAS = "MinInsyncAboveReplicas"
    """spec.topic.minInsyncReplicas exceeds the existing topic's replicas; the topic's own value is kept."""
    REPLICATION_MATCHES = "ReplicationMatches"
    SPARK_OPERATOR_MISSING = "SparkOperatorMissing"
    """The sparkoperator.k8s.io CRDs are not installed; the aggregation is not deployed."""
    SPARK_APPLICATION_FAILED = "SparkApplicationFailed"
    """AggregationReady=False: the spark-operator reports the aggregation's application failed."""
    CLIENTS_MATCHED = "ClientsMatched"
    """ClientsMatched=True: at least one live client matches the subscription."""
    AWAITING_CLIENTS = "AwaitingClients"
    """ClientsMatched=Unknown: no client matches yet, for less than the warning period."""
    NO_MATCHING_CLIENTS = "NoMatchingClients"
    """ClientsMatched=False (and a Warning event): no live client matched for longer than the warning period."""
    RECEIVERS_SILENT = "ReceiversSilent"
    """ClientsMatched=Unknown: no receiver's client registry was read lately, so the matches are not known."""
    EXPORTED = "Exported"
    """AggregationExported=True: the last reported run sent every window to spec.aggregation.export."""
    EXPORT_FAILED = "ExportFailed"
    """AggregationExported=False: the last reported run gave windows up after its retries (Parquet has them)."""


def now_rfc3339(now: dt.datetime | None = None) -> str:
    moment = now if now is not None else dt.datetime.now(dt.UTC)
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def find_condition(conditions: Iterable[Mapping[str, Any]] | None, type_: str) -> Mapping[str, Any] | None:
    for condition in conditions or ():
        if condition.get("type") == type_:
            return condition
    return None


def set_condition(
    conditions: Iterable[Mapping[str, Any]] | None,
    type_: str,
    status: ConditionStatus | bool,
    reason: Reason,
    message: str,
    *,
    observed_generation: int | None = None,
    now: dt.datetime | None = None,
) -> list[dict[str, Any]]:
    """A copy of `conditions` with the condition `type_` set; other conditions keep their order."""
    status_text: ConditionStatus = ("True" if status else "False") if isinstance(status, bool) else status
    previous = find_condition(conditions, type_)
    transition = (
        str(previous["lastTransitionTime"])
        if previous is not None and previous.get("status") == status_text and previous.get("lastTransitionTime")
        else now_rfc3339(now)
    )
    updated: dict[str, Any] = {
        "type": type_,
        "status": status_text,
        "reason": str(reason),
        "message": message,
        "lastTransitionTime": transition,
    }
    if observed_generation is not None:
        updated["observedGeneration"] = observed_generation
    result: list[dict[str, Any]] = []
    replaced = False
    for condition in conditions or ():
        if condition.get("type") == type_:
            result.append(updated)
            replaced = True
        else:
            result.append(dict(condition))
    if not replaced:
        result.append(updated)
    return result


def remove_condition(conditions: Iterable[Mapping[str, Any]] | None, type_: str) -> list[dict[str, Any]]:
    return [dict(c) for c in conditions or () if c.get("type") != type_]
