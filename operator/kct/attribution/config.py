"""The `attribution` section of the receiver's config (and so of a TelemetryReceiver's `spec.receiver`).

Only pydantic here, like `kct.receiver.config` which embeds it: the operator renders it without the
receiver's runtime dependencies.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, model_validator

from kct.models import StrictModel

__all__ = ["AttributionConfig", "AttributionRule", "MetadataAttribute"]

# An attribute name: OpenTelemetry style (dots, lower case), as a resource attribute key.
_ATTRIBUTE_NAME = r"^[-A-Za-z0-9_./]+$"  # no escapes: the same text is a CEL string literal
_ATTRIBUTE_NAME_MAX = 128
AttributeName = Annotated[str, Field(min_length=1, max_length=_ATTRIBUTE_NAME_MAX, pattern=_ATTRIBUTE_NAME)]
# A label or annotation key (`prefix/name`, at most 253 + 63 characters).
# A namespace name, or `*` for all of them.
WatchedNamespace = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?|\*)$")]
MetadataKey = Annotated[str, Field(min_length=1, max_length=317)]


class MetadataAttribute(StrictModel):
    """One pod label or annotation copied to a resource attribute."""

    key: MetadataKey
    """The label (or annotation) key, e.g. `app.kubernetes.io/name`."""
    attribute: AttributeName
    """The resource attribute it becomes, e.g. `service.name`."""


class AttributionRule(StrictModel):
    """Attributes for pushes whose source address is not a pod's own (outside the cluster, behind SNAT, a
    hostNetwork pod): matched on the broker's principal and client id. A rule names `principal`,
    `clientId` or both (then both must match); `*` in either matches any run of characters."""

    principal: str | None = Field(default=None, min_length=1, max_length=1024)
    """KafkaPrincipal as the broker gives it, e.g. `User:orders`."""
    client_id: str | None = Field(default=None, min_length=1, max_length=1024)
    """The client's `client.id`, e.g. `orders-*`."""
    # Keys as plain strings checked below: a constrained key type would become the schema's `patternProperties`,
    # which the API server refuses in a CRD; and a CEL rule over free-length map keys exceeds the API server's
    # cost budget, so a bad name is flagged in status (the operator's parse), not at apply time.
    attributes: dict[str, Annotated[str, Field(max_length=1024)]] = Field(min_length=1, max_length=32)
    """The resource attributes to add, e.g. `{k8s.namespace.name: shop, k8s.deployment.name: orders}`."""

    @model_validator(mode="after")
    def _matches_something(self) -> AttributionRule:
        if self.principal is None and self.client_id is None:
            raise ValueError("an attribution rule needs `principal`, `clientId` or both")
        bad = sorted(k for k in self.attributes if len(k) > _ATTRIBUTE_NAME_MAX or not re.match(_ATTRIBUTE_NAME, k))
        if bad:
            raise ValueError(f"attributes: {', '.join(map(repr, bad))}: every name matches {_ATTRIBUTE_NAME} and has "
                             f"at most {_ATTRIBUTE_NAME_MAX} characters")
        return self


DEFAULT_LABELS: tuple[MetadataAttribute, ...] = (
    MetadataAttribute(key="app.kubernetes.io/name", attribute="service.name"),
    MetadataAttribute(key="app.kubernetes.io/version", attribute="service.version"),
)


class AttributionConfig(StrictModel):
    """Which Kubernetes workload sent each push, found from the KIP-714 source address (the pod that held it
    at push time), else from `rules`; added as resource attributes named per the OpenTelemetry semantic
    conventions (`k8s.namespace.name`, `k8s.pod.name`, `k8s.deployment.name`, ...).

    Precedence: (1) a pod (not hostNetwork) that held the source address at push time; (2) the first rule, in
    list order, that matches the principal and client id; (3) none: `ambiguous` when the address is a node's
    shared by hostNetwork pods (no guess), else `unattributed` (outside the cluster, SNAT, unknown). Attributes
    attribution adds replace a client's own with the same key (a client cannot claim another workload)."""

    enabled: bool = True
    """Attribute pushes when the receiver runs in a Kubernetes pod with a service account token that may
    get/list/watch pods, replicasets and jobs (the operator grants that when this is true). Outside
    Kubernetes the receiver says so in its log and only `rules` apply. False: never."""
    namespaces: tuple[WatchedNamespace, ...] = Field(default=(), max_length=256)
    """Namespaces whose pods, ReplicaSets and Jobs are watched; empty = the receiver's own namespace (what a
    TelemetryReceiver grants: a Role in its namespace); `*` = every namespace (needs a cluster-wide grant,
    which the operator does not make: bind the receiver's service account yourself)."""
    labels: tuple[MetadataAttribute, ...] = Field(default=DEFAULT_LABELS, max_length=64)
    """Pod labels copied to resource attributes."""
    annotations: tuple[MetadataAttribute, ...] = Field(default=(), max_length=64)
    """Pod annotations copied to resource attributes."""
    rules: tuple[AttributionRule, ...] = Field(default=(), max_length=256)
    """Attributes for pushes not from a pod's own address, by principal and client id (first match wins)."""
    deleted_pod_grace_seconds: int = Field(default=120, ge=0, le=3600)
    """A pod's pushes still arriving this long after it was deleted (a terminating client's last push, the
    broker plugin's queue) are attributed to it, unless a newer pod holds its address."""
    clock_skew_seconds: int = Field(default=2, ge=0, le=300)
    """Tolerance between the API server's pod creation time and the receiver's clock."""
