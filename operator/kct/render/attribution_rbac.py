"""What the receiver pods may read for attribution: a ServiceAccount, a Role and its RoleBinding.

Least privilege: get/list/watch on pods, apps/replicasets and batch/jobs, in the receiver's own namespace
(what `spec.receiver.attribution.namespaces` empty means), and nothing when attribution is off (the pods
then mount no service account token at all). Grants in other namespaces or cluster-wide cannot be owned by
a TelemetryReceiver (owner references stay within a namespace), so they are left to whoever installs it.
With `spec.serviceAccountName` the Role is bound to that account and no ServiceAccount is created.
"""

from __future__ import annotations

from typing import Any, Final

from kct.render.names import COMPONENT_RECEIVER, child_labels
from kct.render.params import ReceiverParams

__all__ = [
    "ATTRIBUTION_RULES",
    "attribution_grant_wanted",
    "receiver_service_account",
    "render_attribution_role",
    "render_attribution_role_binding",
    "render_receiver_service_account",
]

READ: Final = ["get", "list", "watch"]
ATTRIBUTION_RULES: Final = (
    {"apiGroups": [""], "resources": ["pods"], "verbs": READ},
    {"apiGroups": ["apps"], "resources": ["replicasets"], "verbs": READ},
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": READ},
)


def attribution_grant_wanted(params: ReceiverParams) -> bool:
    """Attribution is on and watches the receiver's own namespace (the grant the operator makes)."""
    attribution = params.spec.receiver.attribution
    return attribution.enabled and (not attribution.namespaces or params.namespace in attribution.namespaces)


def receiver_service_account(params: ReceiverParams) -> str | None:
    """The pods' service account: the spec's, else ours when attribution needs one, else the default."""
    if params.spec.service_account_name:
        return params.spec.service_account_name
    return params.names.receiver if params.spec.receiver.attribution.enabled else None


def _metadata(params: ReceiverParams) -> dict[str, Any]:
    return {
        "name": params.names.receiver,
        "namespace": params.namespace,
        "labels": child_labels(params.name, COMPONENT_RECEIVER, params.version),
        "ownerReferences": [params.owner_reference()],
    }


def render_receiver_service_account(params: ReceiverParams) -> dict[str, Any] | None:
    if params.spec.service_account_name or not params.spec.receiver.attribution.enabled:
        return None
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _metadata(params)}


def render_attribution_role(params: ReceiverParams) -> dict[str, Any] | None:
    if not attribution_grant_wanted(params):
        return None
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _metadata(params),
        "rules": [dict(rule) for rule in ATTRIBUTION_RULES],
    }


def render_attribution_role_binding(params: ReceiverParams) -> dict[str, Any] | None:
    account = receiver_service_account(params)
    if not attribution_grant_wanted(params) or account is None:
        return None
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _metadata(params),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": params.names.receiver},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": params.namespace}],
    }
