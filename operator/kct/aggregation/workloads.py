"""The workload columns of client_metrics, from the resource attributes the receiver's attribution wrote.

The receiver writes the client's pod and owners as OpenTelemetry resource attributes on every push
(kct.attribution); the decoder keeps a push's resource attributes (`resource_attributes`, per client and
window). Which attribute names the workload is `kct.attribution.workload`'s (one table for the aggregation and
`kubectl kct`); here it becomes Spark SQL over the map column, so client_metrics, the hourly table and the
per-workload roll-up read the same four columns. A client without them (outside the cluster, behind SNAT,
hostNetwork, attribution off) has nulls: it rolls up under the null workload and is counted there.
"""

from __future__ import annotations

from typing import Final

from kct.attribution.workload import NAMESPACE_ATTRIBUTE, POD_ATTRIBUTE, WORKLOAD_ATTRIBUTES

__all__ = ["WORKLOAD_COLUMNS", "WORKLOAD_KEY_COLUMNS", "workload_sql"]

# Named as Prometheus names the OpenTelemetry attributes (the export's labels are these column names).
WORKLOAD_KEY_COLUMNS: Final[tuple[str, ...]] = ("k8s_namespace_name", "k8s_workload_kind", "k8s_workload_name")
WORKLOAD_COLUMNS: Final[tuple[str, ...]] = (*WORKLOAD_KEY_COLUMNS, "k8s_pod_name")


def _attribute(resource: str, key: str) -> str:
    # try_element_at: null for a missing key whatever the ANSI setting; an empty value counts as absent.
    return f"nullif(try_element_at({resource}, '{key}'), '')"


def workload_sql(resource: str = "resource_attributes") -> dict[str, str]:
    """SQL per WORKLOAD_COLUMNS column over the map column `resource`: the namespace, the workload's kind and
    name (the first attribute of WORKLOAD_ATTRIBUTES present), the pod; null where absent."""
    kinds = " ".join(f"WHEN {_attribute(resource, key)} IS NOT NULL THEN '{kind}'"
                     for key, kind in WORKLOAD_ATTRIBUTES)
    names = ", ".join(_attribute(resource, key) for key, _ in WORKLOAD_ATTRIBUTES)
    return {
        "k8s_namespace_name": _attribute(resource, NAMESPACE_ATTRIBUTE),
        "k8s_workload_kind": f"CASE {kinds} END",
        "k8s_workload_name": f"coalesce({names})",
        "k8s_pod_name": _attribute(resource, POD_ATTRIBUTE),
    }
