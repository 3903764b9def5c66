"""Every (apiGroup, resource, verb) the chart grants, in both modes, each justified next to its rule.

The chart's RBAC rules each start with a `# why: ...` comment (rbac_support.py describes the convention);
these tests render the chart with the cached helm binary, list every grant, fail on one without a reason,
and pin the whole list, so a new verb is a reviewed change of this file as well as of the chart.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from chart_support import helm_template
from rbac_support import grants, unjustified

_MANAGE = ("get", "list", "watch", "create", "patch", "delete")
_READ = ("get", "list", "watch")
_NAMESPACED: frozenset[tuple[str, str, str]] = frozenset(
    {("telemetry.kct.dev", resource, verb) for resource in ("clientmetricssubscriptions", "telemetryreceivers")
     for verb in ("get", "list", "watch", "patch")}
    | {("telemetry.kct.dev", f"{resource}/status", verb)
       for resource in ("clientmetricssubscriptions", "telemetryreceivers") for verb in ("get", "patch")}
    | {("", "events", "create")}
    | {(group, resource, verb) for group, resource in [
        ("", "configmaps"), ("", "secrets"), ("", "services"), ("apps", "deployments"),
        ("policy", "poddisruptionbudgets"), ("autoscaling", "horizontalpodautoscalers"),
        ("networking.k8s.io", "networkpolicies"), ("sparkoperator.k8s.io", "sparkapplications"),
        ("sparkoperator.k8s.io", "scheduledsparkapplications"), ("", "serviceaccounts"),
        ("rbac.authorization.k8s.io", "roles"), ("rbac.authorization.k8s.io", "rolebindings")] for verb in _MANAGE}
    # pod attribution: held so the operator may grant them to the receivers' Role (pods: also listed to find
    # the receiver replicas whose client registries it reads)
    | {(group, resource, verb) for group, resource in [("", "pods"), ("apps", "replicasets"), ("batch", "jobs")]
       for verb in _READ}
    # status.clients: each receiver replica's client registry, read through the API server's pod proxy
    | {("", "pods/proxy", "get")}
)
_CRDS = frozenset(("apiextensions.k8s.io", "customresourcedefinitions", verb) for verb in _READ)
_NAMESPACES = frozenset(("", "namespaces", verb) for verb in _READ)
_LEASES = frozenset({("coordination.k8s.io", "leases", "create"), ("coordination.k8s.io", "leases", "get"),
                     ("coordination.k8s.io", "leases", "update")})

_ALL_NAMESPACES: tuple[str, ...] = ()
_LISTED = ("apps", "telemetry")


def _rendered(helm: Path, *args: str) -> str:
    proc = helm_template(helm, *args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _watch_args(namespaces: tuple[str, ...]) -> list[str]:
    return ["--set", "watchNamespaces={" + ",".join(namespaces) + "}"] if namespaces else []


def _by_scope(rendered: str) -> dict[str, set[tuple[str, str, str]]]:
    """{'cluster' or a namespace: {(apiGroup, resource, verb)}} of every grant."""
    scopes: dict[str, set[tuple[str, str, str]]] = {}
    for grant in grants(rendered):
        kind, namespace, _ = grant.where.split("/", 2)
        scope = "cluster" if kind == "ClusterRole" else namespace
        scopes.setdefault(scope, set()).add((grant.api_group, grant.resource, grant.verb))
    return scopes


@pytest.mark.parametrize("namespaces", [_ALL_NAMESPACES, _LISTED], ids=["all-namespaces", "listed-namespaces"])
def test_every_grant_the_chart_makes_is_justified(helm: Path, namespaces: tuple[str, ...]) -> None:
    """Given the chart watching all namespaces or listed ones, When it is rendered, Then every grant of every
    Role and ClusterRole has a `# why:` reason next to its rule."""
    rendered = _rendered(helm, *_watch_args(namespaces))
    assert grants(rendered)
    assert [f"{g.where}: {g.api_group or 'core'}/{g.resource} {g.verb}" for g in unjustified(rendered)] == []


def test_watching_all_namespaces_grants_exactly_this(helm: Path) -> None:
    """Given the defaults (all namespaces), When the chart is rendered, Then the cluster-wide grants are the
    namespaced rules plus reading CRDs, and the release namespace gets the leader election Lease only."""
    assert _by_scope(_rendered(helm)) == {"cluster": set(_NAMESPACED | _CRDS), "kct-system": set(_LEASES)}


def test_watching_listed_namespaces_grants_exactly_this(helm: Path) -> None:
    """Given listed namespaces, When the chart is rendered, Then cluster-wide the operator only reads CRDs and
    Namespaces, each listed namespace gets the namespaced rules, and the release namespace the Lease."""
    assert _by_scope(_rendered(helm, *_watch_args(_LISTED))) == {
        "cluster": set(_CRDS | _NAMESPACES), "apps": set(_NAMESPACED), "telemetry": set(_NAMESPACED),
        "kct-system": set(_LEASES),
    }


def test_without_receivers_only_kafka_secrets_are_read(helm: Path) -> None:
    """Given the TelemetryReceiver controller's grants off, When the chart is rendered, Then Secrets are only
    read by name (spec.kafka.secretRef), never listed, watched or written, and that grant is justified."""
    rendered = _rendered(helm, "--set", "rbac.telemetryReceivers=false")
    secrets = {g.verb for g in grants(rendered) if g.resource == "secrets"}
    assert secrets == {"get"}
    assert not {g.resource for g in grants(rendered)} & {"configmaps", "deployments", "networkpolicies"}
    assert unjustified(rendered) == []


_SYNTHETIC = """\
# Source: kct/templates/rbac.yaml
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: demo
rules:
  # why: reads the CRDs kopf serves.
  - apiGroups: ["apiextensions.k8s.io"]
    resources: ["customresourcedefinitions"]
    verbs: ["get"]
{added}
---
# Source: kct/templates/other.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: not-a-role
data:
  rules: "- apiGroups: [x]"
"""


_DELETE_SECRETS = [("secrets", "delete")]


@pytest.mark.parametrize("added, expected", [
    ('  - apiGroups: [""]\n    resources: ["secrets"]\n    verbs: ["delete"]', _DELETE_SECRETS),
    ('  # Deletes Secrets.\n  - apiGroups: [""]\n    resources: ["secrets"]\n    verbs: ["delete"]', _DELETE_SECRETS),
    ('  # why:\n  - apiGroups: [""]\n    resources: ["secrets"]\n    verbs: ["delete"]', _DELETE_SECRETS),
    # Not led by apiGroups: no rule of the role can be paired with its comment, so none counts as justified.
    ('  - resources: ["secrets"]\n    apiGroups: [""]\n    verbs: ["delete"]',
     [("customresourcedefinitions", "get"), *_DELETE_SECRETS]),
], ids=["no-comment", "comment-without-why", "empty-why", "rule-not-led-by-apiGroups"])
def test_a_rule_added_without_a_reason_fails(added: str, expected: list[tuple[str, str]]) -> None:
    """Given a rendered ClusterRole with one justified rule, When a rule is added without a reason, Then its
    grants are reported unjustified (and a ConfigMap that merely mentions rules is no role)."""
    rendered = _SYNTHETIC.format(added=added)
    assert [(g.resource, g.verb) for g in unjustified(rendered)] == expected


def test_a_reason_may_span_several_comment_lines() -> None:
    """Given a rule whose `# why:` continues on the next comment line, When its grants are listed, Then the
    reason is the whole text and the rule is justified."""
    rendered = _SYNTHETIC.format(added='  # why: prunes the token Secret\n  # it created.\n'
                                       '  - apiGroups: [""]\n    resources: ["secrets"]\n    verbs: ["delete"]')
    assert unjustified(rendered) == []
    assert grants(rendered)[-1].why == "prunes the token Secret it created."
