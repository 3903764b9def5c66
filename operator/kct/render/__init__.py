"""Desired state of a TelemetryReceiver: pure builders, one per Kubernetes kind.

`render_children(params)` is the whole desired set, in apply order (config before the workloads that
mount it). The builders import neither kopf nor a Kubernetes client; golden files pin their output.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from kct.render.attribution_rbac import (
    render_attribution_role,
    render_attribution_role_binding,
    render_receiver_service_account,
)
from kct.render.params import ReceiverParams
from kct.render.receiver_workload import (
    render_ca_bundle_secret,
    render_ca_secret,
    render_receiver_configmap,
    render_receiver_deployment,
    render_receiver_hpa,
    render_receiver_network_policy,
    render_receiver_pdb,
    render_receiver_service,
    render_tls_secret,
    render_token_secret,
)
from kct.render.spark import (
    render_aggregation_configmap,
    render_scheduled_spark_application,
    render_spark_application,
)

__all__ = ["BUILDERS", "CHILD_KINDS", "ReceiverParams", "render_children"]

Builder = Callable[[ReceiverParams], dict[str, Any] | None]

BUILDERS: Final[tuple[Builder, ...]] = (
    render_receiver_configmap,
    render_token_secret,
    render_ca_secret,
    render_tls_secret,
    render_ca_bundle_secret,
    render_receiver_service_account,
    render_attribution_role,
    render_attribution_role_binding,
    render_receiver_deployment,
    render_receiver_service,
    render_receiver_pdb,
    render_receiver_hpa,
    render_receiver_network_policy,
    render_aggregation_configmap,
    render_spark_application,
    render_scheduled_spark_application,
)

# Every (apiVersion, kind) a TelemetryReceiver may own: what pruning looks through.
CHILD_KINDS: Final[tuple[tuple[str, str], ...]] = (
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("v1", "ServiceAccount"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("policy/v1", "PodDisruptionBudget"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("sparkoperator.k8s.io/v1beta2", "SparkApplication"),
    ("sparkoperator.k8s.io/v1beta2", "ScheduledSparkApplication"),
)


def render_children(params: ReceiverParams) -> list[dict[str, Any]]:
    """Every child the spec wants, in apply order."""
    return [manifest for build in BUILDERS if (manifest := build(params)) is not None]
