"""The receiver's read grant for attribution comes and goes with `spec.receiver.attribution`, and the
rendered receiver config carries the section as the receiver reads it."""

from __future__ import annotations

from typing import Any

import yaml

from kct.api.telemetry_receiver import parse_receiver_spec
from kct.receiver.config import parse_receiver_config
from kct.render import render_children
from kct.render.params import ReceiverParams, receiver_config_yaml


def params(spec: dict[str, Any]) -> ReceiverParams:
    return ReceiverParams("tr", "ns", "uid-1", parse_receiver_spec(spec), "broker:9092", generated_token="t0k")


def children(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["kind"]: m for m in render_children(params(spec))}


def pod_spec(spec: dict[str, Any]) -> dict[str, Any]:
    return dict(children(spec)["Deployment"]["spec"]["template"]["spec"])


def test_by_default_the_receiver_reads_pods_replicasets_and_jobs_in_its_namespace_only() -> None:
    rendered = children({})
    assert {"ServiceAccount", "Role", "RoleBinding"} <= rendered.keys()
    role = rendered["Role"]
    assert role["metadata"]["namespace"] == "ns"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["apps"], "resources": ["replicasets"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "watch"]},
    ]
    assert rendered["RoleBinding"]["subjects"] == [{"kind": "ServiceAccount", "name": "tr-receiver", "namespace": "ns"}]
    assert (pod_spec({})["serviceAccountName"], pod_spec({})["automountServiceAccountToken"]) == ("tr-receiver", True)


def test_attribution_off_grants_nothing_and_mounts_no_token() -> None:
    spec = {"receiver": {"attribution": {"enabled": False}}}
    assert not {"ServiceAccount", "Role", "RoleBinding"} & children(spec).keys()
    assert pod_spec(spec)["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in pod_spec(spec)


def test_a_given_service_account_is_bound_not_created() -> None:
    spec = {"serviceAccountName": "mine"}
    rendered = children(spec)
    assert "ServiceAccount" not in rendered
    assert rendered["RoleBinding"]["subjects"][0]["name"] == "mine"
    assert pod_spec(spec)["serviceAccountName"] == "mine"


def test_other_namespaces_only_get_no_role_here() -> None:
    # Grants outside the receiver's namespace cannot be owned by the TelemetryReceiver: not rendered
    rendered = children({"receiver": {"attribution": {"namespaces": ["apps"]}}})
    assert "Role" not in rendered and "RoleBinding" not in rendered
    assert "Role" in children({"receiver": {"attribution": {"namespaces": ["apps", "ns"]}}})


def test_the_rendered_config_has_the_section_as_the_receiver_reads_it() -> None:
    spec = {"receiver": {"attribution": {
        "labels": [{"key": "team", "attribute": "kct.team"}],
        "rules": [{"clientId": "legacy-*", "attributes": {"k8s.deployment.name": "legacy"}}],
    }}}
    loaded = parse_receiver_config(yaml.safe_load(receiver_config_yaml(params(spec))))
    assert loaded.attribution.labels[0].attribute == "kct.team"
    assert loaded.attribution.rules[0].client_id == "legacy-*"
    assert loaded.attribution.rules[0].attributes == {"k8s.deployment.name": "legacy"}
