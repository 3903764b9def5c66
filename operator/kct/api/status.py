"""Status models: the schema of what the operator writes under `.status`.

These describe the operator's output, not user input, so they exist to generate the CRD's status
schema (and document it); the controller writes plain dicts shaped like them. `Condition` follows the
Kubernetes convention (metav1.Condition) so `kubectl wait --for=condition=Ready`, Flux's kstatus and
Argo CD's health checks understand it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kct.api._base import SpecModel

__all__ = ["ClientMetricsSubscriptionStatus", "Condition", "SoftwareCount", "SubscriptionClients", "WorkloadCount"]


class Condition(SpecModel):
    """One observation of the resource's state (metav1.Condition)."""

    type: str = Field(min_length=1, max_length=316)
    """Condition type, e.g. `Ready`."""
    status: Literal["True", "False", "Unknown"]
    """`True`, `False` or `Unknown`."""
    reason: str = Field(min_length=1, max_length=1024)
    """Machine-readable CamelCase reason, from the operator's reason enum."""
    message: str = Field(default="", max_length=32768)
    """Human-readable detail, naming field, value and rule when the spec is at fault."""
    observed_generation: int | None = Field(default=None, ge=0)
    """The `.metadata.generation` this condition was computed from."""
    last_transition_time: str = Field(json_schema_extra={"format": "date-time"})
    """When `status` last changed."""


class SoftwareCount(SpecModel):
    """How many matched clients run one client software (KIP-714 `client_software_name`/`_version`)."""

    name: str = Field(max_length=256)
    version: str = Field(max_length=256)
    count: int = Field(ge=0)


class WorkloadCount(SpecModel):
    """How many matched clients belong to one workload, from the receivers' pod attribution."""

    workload: str = Field(max_length=600)
    """`namespace/kind/name`, e.g. `shop/deployment/checkout`."""
    count: int = Field(ge=0)


class SubscriptionClients(SpecModel):
    """The live clients this subscription matches, as the receivers saw them (every replica, every
    TelemetryReceiver the operator watches), matched with the broker's own rule."""

    matched: int = Field(ge=0)
    """Clients that pushed lately (within max(60 s, 3 push intervals)) and match `spec.match`."""
    by_software: list[SoftwareCount] = Field(default_factory=list, max_length=10)
    """Matched clients by software name and version, most clients first (at most 10)."""
    top_workloads: list[WorkloadCount] = Field(default_factory=list, max_length=10)
    """The workloads with the most matched clients (at most 10); only attributed clients are counted."""
    last_push_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """The latest push of a matched client."""
    left_out: int | None = Field(default=None, ge=0)
    """While the operator's census of clients is full: how many it left out so far (the counts may be low)."""


class ClientMetricsSubscriptionStatus(SpecModel):
    """What the operator observed and did."""

    observed_generation: int | None = None
    """The `.metadata.generation` last reconciled."""
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """`Ready` (reasons: Reconciled, InvalidSpec, Conflict, KafkaUnreachable, KafkaNotAuthorized,
    KafkaRejected, Paused), `IntervalCapped` (True when intervalMs exceeds the broker's 5-minute cap) and
    `ClientsMatched` (False, reason NoMatchingClients, when no live client matched for a while; Unknown while
    no receiver answered lately). `ClientsMatched` never changes `Ready`."""
    subscription_name: str | None = None
    """The CLIENT_METRICS resource this resource manages (spec.subscriptionName or metadata.name)."""
    applied_configs: dict[str, str] | None = None
    """The CLIENT_METRICS configs last applied (`metrics`, `interval.ms`, `match`), as sent to the broker."""
    last_sync_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When the broker's configs were last confirmed equal to the spec."""
    drift_reverted: int | None = Field(default=None, ge=0)
    """How many times a change made outside the operator was reverted."""
    last_drift_reverted_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When drift was last reverted."""
    bootstrap_servers: str | None = None
    """The cluster the configs were applied to."""
    clients: SubscriptionClients | None = None
    """The live clients this subscription matches (`CLIENTS` column of `kubectl get`)."""
