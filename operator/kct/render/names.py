"""Names and labels of everything rendered from one TelemetryReceiver, from one place.

Kubernetes names of Services (and label values) are DNS-1035 labels: at most 63 characters. A long
resource name is cut and suffixed with a short hash of the full name, so two long names that share a
prefix never collide and the same input always gives the same name. Selector labels are a fixed subset
of the labels and never change: a Deployment's selector is immutable.
"""

from __future__ import annotations

import hashlib
from typing import Final

__all__ = [
    "COMPONENT_AGGREGATION",
    "COMPONENT_RECEIVER",
    "CONFIG_HASH_ANNOTATION",
    "MANAGED_BY",
    "OWNER_LABEL",
    "ChildNames",
    "child_labels",
    "children_selector",
    "dns_label",
    "owned_selector",
    "selector_labels",
]

MAX_LABEL: Final = 63
MANAGED_BY: Final = "kct-operator"
PART_OF: Final = "kafka-client-telemetry"
OWNER_LABEL: Final = "telemetry.kct.dev/receiver"
CONFIG_HASH_ANNOTATION: Final = "telemetry.kct.dev/config-hash"
COMPONENT_RECEIVER: Final = "receiver"
COMPONENT_AGGREGATION: Final = "aggregation"


def dns_label(value: str, max_length: int = MAX_LABEL) -> str:
    """`value` if it fits, else its first characters + `-` + 8 hex digits of its SHA-256."""
    if len(value) <= max_length:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:8]
    return f"{value[: max_length - 9].rstrip('-.')}-{digest}"


class ChildNames:
    """The name of every child of the TelemetryReceiver `name`."""

    def __init__(self, name: str) -> None:
        self.owner = name

    def _child(self, suffix: str) -> str:
        return dns_label(f"{self.owner}-{suffix}")

    @property
    def receiver(self) -> str:
        """Deployment, Service, ConfigMap, PDB, HPA and NetworkPolicy of the receiver."""
        return self._child("receiver")

    @property
    def token_secret(self) -> str:
        return self._child("token")

    @property
    def ca_secret(self) -> str:
        """The operator's CA (`tls.mode: issued`): its key never leaves this Secret."""
        return self._child("ca")

    @property
    def tls_secret(self) -> str:
        """The receivers' serving certificate (`kubernetes.io/tls`, `tls.mode: issued`)."""
        return self._child("tls")

    @property
    def ca_bundle_secret(self) -> str:
        """The CA bundle brokers trust (`ca.crt`; no private key): published for `kct.telemetry.tls.ca.file`."""
        return self._child("ca-bundle")

    @property
    def aggregation(self) -> str:
        """SparkApplication / ScheduledSparkApplication and the job's ConfigMap."""
        return self._child("aggregation")

    @property
    def aggregation_hourly(self) -> str:
        """The hourly roll-up's ScheduledSparkApplication."""
        return self._child("aggregation-hourly")


def selector_labels(owner: str, component: str) -> dict[str, str]:
    """Labels selecting the pods of one component; never change them (selectors are immutable)."""
    return {
        "app.kubernetes.io/name": f"kct-{component}",
        "app.kubernetes.io/instance": dns_label(owner),
        "app.kubernetes.io/component": component,
    }


def child_labels(owner: str, component: str, version: str) -> dict[str, str]:
    """Labels every child carries; `OWNER_LABEL` + managed-by find them for pruning."""
    return {
        **selector_labels(owner, component),
        "app.kubernetes.io/part-of": PART_OF,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/version": dns_label(version),
        OWNER_LABEL: dns_label(owner),
    }


def owned_selector(owner: str) -> str:
    """Label selector of every child of `owner` (ownerReferences decide; this narrows the list)."""
    return f"app.kubernetes.io/managed-by={MANAGED_BY},{OWNER_LABEL}={dns_label(owner)}"


def children_selector() -> str:
    """Label selector of every child of any TelemetryReceiver: the operator's watches pass it to the API
    server, so Secrets and ConfigMaps (and the other kinds) it does not own never reach it."""
    return f"app.kubernetes.io/managed-by={MANAGED_BY},{OWNER_LABEL}"
