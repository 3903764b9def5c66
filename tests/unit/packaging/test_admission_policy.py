"""The chart's ValidatingAdmissionPolicy: the operator writes only what it owns.

RBAC cannot narrow a verb by label, so the chart adds a policy checked for the operator's ServiceAccount
only: it may create, change and delete objects of its children's kinds only when they carry the label the
operator renders on every child. These tests pin its shape against the chart's own RBAC and the renderer's
label; tests/e2e/test_helm_e2e.py has a real API server evaluate it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from chart_support import Render, helm_template
from rbac_support import grants

from kct.render.names import MANAGED_BY, child_labels

_WRITES = frozenset({"create", "patch", "update", "delete"})
# Written by kopf or leader election, not children: the policy must not stand in their way.
_NOT_CHILDREN = frozenset({"clientmetricssubscriptions", "telemetryreceivers", "clientmetricssubscriptions/status",
                           "telemetryreceivers/status", "events", "leases"})


def _policy(objects: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    (policy,) = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"]
    (binding,) = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    return policy, binding


def _covered(policy: dict[str, Any]) -> set[tuple[str, str]]:
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    for rule in rules:
        assert sorted(rule["operations"]) == ["CREATE", "DELETE", "UPDATE"], rule
    return {(group, resource) for rule in rules for group in rule["apiGroups"] for resource in rule["resources"]}


def _written_children(helm: Path, *args: str) -> set[tuple[str, str]]:
    proc = helm_template(helm, *args)
    assert proc.returncode == 0, proc.stderr
    return {(g.api_group, g.resource) for g in grants(proc.stdout)
            if g.verb in _WRITES and g.resource not in _NOT_CHILDREN}


def test_the_policy_checks_the_operators_writes_only(render: Render) -> None:
    """Given the defaults, When the chart is rendered, Then a policy bound with Deny matches requests of the
    chart's ServiceAccount only, and fails closed."""
    policy, binding = _policy(render())
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    assert policy["spec"]["failurePolicy"] == "Fail"
    (condition,) = policy["spec"]["matchConditions"]
    assert condition["expression"] == "request.userInfo.username == 'system:serviceaccount:kct-system:kct'"


@pytest.mark.parametrize("args", [(), ("--set", "watchNamespaces={apps,telemetry}"),
                                  ("--set", "rbac.sparkApplications=false")],
                         ids=["all-namespaces", "listed-namespaces", "no-spark"])
def test_the_policy_covers_every_kind_the_operator_may_write(helm: Path, render: Render, args: tuple[str, ...]) -> None:
    """Given any mode, When the chart is rendered, Then the policy matches exactly the children's kinds the RBAC
    rules let the operator create, patch or delete (no write escapes it, no other kind is caught)."""
    assert _covered(_policy(render(*args))[0]) == _written_children(helm, *args)


def test_the_policy_requires_the_label_every_child_is_rendered_with(render: Render) -> None:
    """Given the policy, Then its validations demand the managed-by label with the renderer's value on the new
    object (unless deleting) and on the old one (unless creating), the label every child carries."""
    policy, _ = _policy(render())
    (variable,) = policy["spec"]["variables"]
    assert variable["expression"] == "'app.kubernetes.io/managed-by'"
    assert child_labels("tr", "receiver", "1")["app.kubernetes.io/managed-by"] == MANAGED_BY
    new, old = (v["expression"] for v in policy["spec"]["validations"])
    assert new.startswith("request.operation == 'DELETE' ||") and "object.metadata.labels" in new
    assert old.startswith("request.operation == 'CREATE' ||") and "oldObject.metadata.labels" in old
    for expression in (new, old):
        assert f"[variables.label] == '{MANAGED_BY}'" in expression


@pytest.mark.parametrize("args", [("--set", "rbac.writeOnlyOwned=false"), ("--set", "rbac.telemetryReceivers=false"),
                                  ("--set", "rbac.create=false")],
                         ids=["off", "no-receivers", "no-rbac"])
def test_the_policy_can_be_left_out(render: Render, args: tuple[str, ...]) -> None:
    """Given the policy turned off, or no receiver grants, or no RBAC at all, Then neither object is rendered."""
    kinds = {o["kind"] for o in render(*args)}
    assert not kinds & {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
