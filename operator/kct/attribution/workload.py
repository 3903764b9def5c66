"""A client's workload from its resource attributes: the one mapping from `k8s.*` names to (kind, name).

The attribution (`kct.attribution.index`) writes the pod's controller and, above it, the owner that names the
workload: a ReplicaSet's pod gets `k8s.replicaset.name` and, when a Deployment owns the ReplicaSet,
`k8s.deployment.name`; a Job's pod gets `k8s.job.name` and, under a CronJob, `k8s.cronjob.name`. Rules may
write any of them. So a record can carry two owner names, and the workload is the outermost: a Deployment
over its ReplicaSet, a CronJob over its Job; a bare ReplicaSet or Job names itself. The aggregation's columns
(kct.aggregation.workloads) and `kubectl kct` both read this table, so they never disagree. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

__all__ = ["NAMESPACE_ATTRIBUTE", "POD_ATTRIBUTE", "WORKLOAD_ATTRIBUTES", "workload_of"]

NAMESPACE_ATTRIBUTE: Final = "k8s.namespace.name"
POD_ATTRIBUTE: Final = "k8s.pod.name"
# (attribute, kind) in precedence order: the first present names the workload. Kinds as kubectl's resource
# names, so `deployment/orders` reads as kubectl would print it.
WORKLOAD_ATTRIBUTES: Final[tuple[tuple[str, str], ...]] = (
    ("k8s.deployment.name", "deployment"),
    ("k8s.statefulset.name", "statefulset"),
    ("k8s.daemonset.name", "daemonset"),
    ("k8s.cronjob.name", "cronjob"),
    ("k8s.job.name", "job"),
    ("k8s.replicaset.name", "replicaset"),
)


def workload_of(attributes: Mapping[str, str]) -> tuple[str, str] | None:
    """(kind, name) of the first workload attribute present with a non-empty value; None: unattributed."""
    return next(((kind, attributes[key]) for key, kind in WORKLOAD_ATTRIBUTES if attributes.get(key)), None)
