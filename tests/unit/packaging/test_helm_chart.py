"""The Helm chart helm/kct: lint, render, Kubernetes schemas, values schema, RBAC, generated copies.

helm is the real binary (built from the Go module proxy by dev/tools/tools.py, cached); rendered objects are
validated against the Kubernetes 1.36 OpenAPI schemas shipped by the kubernetes-validate package (offline).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from chart_support import CHART, REPO, Render, helm_template
from preconditions import require_module
from script_loader import load_script

CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
SCHEMA_VERSION = "1.36"
OUR_GROUP = "telemetry.kct.dev"


def _objects_of(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


def _one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = _objects_of(objects, kind)
    return found


# ------------------------------------------------------------------------------------------ lint, render


@pytest.mark.parametrize("values", [None, *CI_VALUES], ids=lambda v: "defaults" if v is None else v.name)
def test_helm_lint_passes(helm: Path, values: Path | None) -> None:
    """Given the chart and a CI values file, when `helm lint --strict` runs, then it passes."""
    extra = ["--values", str(values)] if values is not None else []
    proc = subprocess.run([str(helm), "lint", "--strict", str(CHART), "--kube-version", "1.36.3", *extra],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


@pytest.mark.parametrize("values", [None, *CI_VALUES], ids=lambda v: "defaults" if v is None else v.name)
def test_rendered_objects_validate_against_kubernetes_schemas(render: Render, values: Path | None) -> None:
    """Given a CI values file, when the chart is rendered with its CRDs, then every built-in object is valid
    for Kubernetes 1.36 (strict: unknown fields fail) and every CRD is a valid CustomResourceDefinition."""
    kubernetes_validate: Any = require_module("kubernetes_validate", "it holds the Kubernetes schemas (a test extra)")
    objects = render("--include-crds", values=[values] if values else [])
    assert objects
    errors = []
    for obj in objects:
        if obj["apiVersion"].startswith(f"{OUR_GROUP}/"):
            continue  # our own kinds: validated by their CRD at the API server (tests/e2e)
        try:
            kubernetes_validate.validate(obj, SCHEMA_VERSION, strict=True)
        except kubernetes_validate.ValidationError as error:
            errors.append(f"{obj['kind']}/{obj['metadata']['name']}: {str(error).splitlines()[0]}")
    assert not errors, "\n".join(errors)


def test_defaults_render_the_operator_and_least_privilege_rbac(render: Render) -> None:
    """Given the default values, then the chart renders the operator's ServiceAccount, Deployment and a
    ClusterRole for watching every namespace, the leader-election Role, the PodDisruptionBudget of its
    two replicas and the admission policy keeping its writes to what it owns, and nothing that needs a
    cluster to exist first."""
    objects = render()
    kinds = sorted(obj["kind"] for obj in objects)
    assert kinds == sorted(["ServiceAccount", "Deployment", "ClusterRole", "ClusterRoleBinding",
                            "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "PodDisruptionBudget",
                            "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"])


# -------------------------------------------------------------------------------------------- Deployment


def test_operator_deployment_is_hardened(render: Render) -> None:
    """Given the defaults, then the operator runs as two replicas electing one leader (rolled one at a time,
    never below two), non-root, with a read-only root filesystem, no capabilities, a liveness probe on the
    health endpoint, its metrics on their own port, and resource requests."""
    deployment = _one(render(), "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
    }
    assert container["args"] == ["operator", "--liveness=http://0.0.0.0:8080/healthz",
                                 "--metrics-address=0.0.0.0:8081", "--lease-duration-seconds=10"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["resources"]["requests"] == {"cpu": "50m", "memory": "128Mi"}
    assert container["image"] == "ghcr.io/kct-dev/kct:0.1.0"
    assert pod["serviceAccountName"] == _one(render(), "ServiceAccount")["metadata"]["name"]


def test_leader_election_reaches_the_operator_with_its_own_lease(render: Render) -> None:
    """Given the defaults, then every replica competes for the Lease named after the release, in the release
    namespace, under its pod name, and the Role grants get/update on that one Lease only."""
    objects = render()
    deployment = _one(objects, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item for item in container["env"]}
    assert env["KCT_LEADER_ELECTION"]["value"] == "true"
    assert env["KCT_LEADER_ELECTION_NAME"]["value"] == deployment["metadata"]["name"]
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    role = _one(objects, "Role")
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
         "resourceNames": [deployment["metadata"]["name"]], "verbs": ["get", "update"]},
    ]
    pdb = _one(objects, "PodDisruptionBudget")
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]


def test_without_leader_election_one_replica_is_recreated(render: Render) -> None:
    """Given leader election off, then one replica with the Recreate strategy (two must never overlap),
    and neither the Lease Role nor a PodDisruptionBudget."""
    objects = render("--set", "operator.leaderElection.enabled=false", "--set", "replicas=3")
    spec = _one(objects, "Deployment")["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    (container,) = spec["template"]["spec"]["containers"]
    assert container["args"] == ["operator", "--liveness=http://0.0.0.0:8080/healthz", "--metrics-address=0.0.0.0:8081"]
    assert not {obj["kind"] for obj in objects} & {"Role", "RoleBinding", "PodDisruptionBudget"}


def test_kafka_secret_namespaces_and_log_level_reach_the_operator(render: Render) -> None:
    """Given watched namespaces, a Kafka Secret and debug logging, then the container gets them as the
    environment and flags `kct operator` reads, and the properties file is mounted read-only."""
    objects = render("--set", "watchNamespaces={apps,telemetry}", "--set", "kafka.bootstrapServers=k:9092",
                     "--set", "kafka.clientPropertiesSecret.name=kafka-client", "--set", "operator.logLevel=debug")
    (container,) = _one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["KCT_WATCH_NAMESPACES"] == "apps,telemetry"
    assert env["KAFKA_BOOTSTRAP_SERVERS"] == "k:9092"
    assert env["KCT_KAFKA_PROPERTIES_FILE"] == "/etc/kct/kafka/client.properties"
    assert "--verbose" in container["args"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "kafka-client-properties")
    assert mount == {"name": "kafka-client-properties", "mountPath": "/etc/kct/kafka", "readOnly": True}


def test_image_digest_wins_over_tag(render: Render) -> None:
    """Given an image digest, then the pod pulls by digest."""
    digest = "sha256:" + "a" * 64
    (container,) = _one(render("--set", f"image.digest={digest}"), "Deployment")["spec"]["template"]["spec"][
        "containers"]
    assert container["image"] == f"ghcr.io/kct-dev/kct@{digest}"


# ------------------------------------------------------------------------------------------------- RBAC


def _rules(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(f"{obj['kind']}/{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}", rule)
            for obj in objects if obj["kind"] in {"Role", "ClusterRole"} for rule in obj.get("rules", [])]


@pytest.mark.parametrize("values", [None, *CI_VALUES], ids=lambda v: "defaults" if v is None else v.name)
def test_rbac_has_no_wildcards(render: Render, values: Path | None) -> None:
    """Given any CI values, then no RBAC rule uses a wildcard verb, resource or API group."""
    for where, rule in _rules(render(values=[values] if values else [])):
        for field in ("verbs", "resources", "apiGroups"):
            assert not any("*" in item for item in rule.get(field, [])), f"{where}: wildcard in {field}: {rule}"
        assert "nonResourceURLs" not in rule, where


def test_watching_listed_namespaces_grants_only_there(render: Render) -> None:
    """Given watched namespaces, then each gets a Role and RoleBinding, and the only cluster-wide grants are
    read access to CRDs and Namespaces (what kopf needs to discover resources and namespaces)."""
    objects = render("--set", "watchNamespaces={apps,telemetry}", "--set", "operator.leaderElection.enabled=false")
    roles = _objects_of(objects, "Role")
    assert sorted(role["metadata"]["namespace"] for role in roles) == ["apps", "telemetry"]
    assert sorted(b["metadata"]["namespace"] for b in _objects_of(objects, "RoleBinding")) == ["apps", "telemetry"]
    (cluster_role,) = _objects_of(objects, "ClusterRole")
    cluster_grants = {(group, resource, verb) for rule in cluster_role["rules"] for group in rule["apiGroups"]
                      for resource in rule["resources"] for verb in rule["verbs"]}
    assert cluster_grants == {(group, resource, verb) for group, resource in
                              [("apiextensions.k8s.io", "customresourcedefinitions"), ("", "namespaces")]
                              for verb in ("get", "list", "watch")}


def test_watching_all_namespaces_uses_one_cluster_role(render: Render) -> None:
    """Given no watched namespaces, then the namespaced rules come as a ClusterRole bound cluster-wide,
    and namespaces are not listed (kopf does not need them cluster-wide). The only Role is leader election's,
    in the release namespace."""
    objects = render()
    assert [role["metadata"]["name"] for role in _objects_of(objects, "Role")] == ["kct-leader-election"]
    resources = {resource for _, rule in _rules(objects) for resource in rule["resources"]}
    assert {"clientmetricssubscriptions", "clientmetricssubscriptions/status", "telemetryreceivers",
            "events", "customresourcedefinitions", "deployments", "sparkapplications"} <= resources
    assert "namespaces" not in resources


def test_secrets_are_granted_only_when_needed(render: Render) -> None:
    """Given TelemetryReceiver children and Kafka Secrets switched off, then no rule mentions Secrets; with
    Kafka Secrets only, the operator may `get` them and nothing else."""
    none = render("--set", "rbac.telemetryReceivers=false", "--set", "rbac.readKafkaSecrets=false")
    assert not [rule for _, rule in _rules(none) if "secrets" in rule["resources"]]
    read_only = render("--set", "rbac.telemetryReceivers=false")
    secret_rules = [rule for _, rule in _rules(read_only) if "secrets" in rule["resources"]]
    assert secret_rules == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]


def test_rbac_can_be_left_to_the_user(render: Render) -> None:
    """Given rbac.create=false, then the chart renders no Role, ClusterRole or binding."""
    kinds = {obj["kind"] for obj in render("--set", "rbac.create=false")}
    assert not kinds & {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}


# ---------------------------------------------------------------------------------- values and schema


@pytest.mark.parametrize(("args", "named"), [
    (["--set", "replica=2"], "replica"),
    (["--set", "kafka.bootstrapServer=k:9092"], "bootstrapServer"),
    (["--set", "rbac.clusterAdmin=true"], "clusterAdmin"),
])
def test_values_schema_rejects_unknown_keys_naming_them(helm: Path, args: list[str], named: str) -> None:
    """Given an unknown (e.g. misspelled) value, when the chart is rendered, then helm fails with a schema
    error that names the key."""
    proc = helm_template(helm, *args)
    assert proc.returncode != 0
    assert "values don't meet the specifications of the schema" in proc.stderr
    assert named in proc.stderr


def test_values_schema_rejects_bad_types_and_enums(helm: Path) -> None:
    """Given a log level outside the enum, then helm fails naming the field."""
    proc = helm_template(helm, "--set", "operator.logLevel=trace")
    assert proc.returncode != 0
    assert "logLevel" in proc.stderr


def test_every_schema_object_forbids_unknown_keys() -> None:
    """Given values.schema.json, then every object with declared properties forbids others, and every
    property has a description."""
    schema = json.loads((CHART / "values.schema.json").read_text())

    def walk(node: dict[str, Any], path: str) -> None:
        if "properties" in node:
            assert node.get("additionalProperties") is False, f"{path}: additionalProperties must be false"
            for name, child in node["properties"].items():
                assert child.get("description"), f"{path}.{name}: no description"
                walk(child, f"{path}.{name}")
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}[]")

    walk(schema, "values")
    assert set(schema["properties"]) - {"global"} == set(yaml.safe_load((CHART / "values.yaml").read_text()))


def test_every_value_is_commented() -> None:
    """Given values.yaml, then every key has a comment right above it, unless it sits inside a value that is
    documented as a whole (a `# --` comment on its ancestor, e.g. `resources`)."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    undocumented = []
    stack: list[tuple[int, bool]] = []  # (indent, documented as a whole) of the enclosing keys
    comment_block: list[str] = []  # the comment lines right above the current line
    for line in lines:
        match = re.match(r"^(\s*)([\w.-]+):", line)
        if match:
            indent = len(match.group(1))
            while stack and stack[-1][0] >= indent:
                stack.pop()
            if not comment_block and not any(whole for _, whole in stack):
                undocumented.append(line.strip())
            stack.append((indent, bool(comment_block) and comment_block[0].startswith("# --")))
        comment_block = [*comment_block, line.strip()] if line.strip().startswith("#") else []
    assert not undocumented, undocumented


def test_default_receiver_must_be_in_a_watched_namespace(helm: Path) -> None:
    """Given a default TelemetryReceiver in a namespace the operator does not watch, then rendering fails
    with a message naming both."""
    proc = helm_template(helm, "--set", "defaultReceiver.enabled=true", "--set", "watchNamespaces={apps}",
                         "--set", "defaultReceiver.namespace=telemetry")
    assert proc.returncode != 0
    assert 'defaultReceiver.namespace: "telemetry" is not watched' in proc.stderr


def test_default_receiver_renders_its_spec(render: Render) -> None:
    """Given a default TelemetryReceiver with a spec, then it is rendered in the release namespace as given."""
    objects = render("--set", "defaultReceiver.enabled=true", "--set", "defaultReceiver.spec.replicas=2")
    receiver = _one(objects, "TelemetryReceiver")
    assert receiver["apiVersion"] == f"{OUR_GROUP}/v1alpha1"
    assert receiver["metadata"]["namespace"] == "kct-system"
    assert receiver["spec"] == {"replicas": 2}


# ------------------------------------------------------------------------------------- generated files


def test_chart_crds_are_identical_to_the_generated_crds() -> None:
    """Given crds/ (generated from the API models), then the chart's crds/ holds byte-identical copies."""
    sources = {path.name: path.read_bytes() for path in (REPO / "crds").glob("*.yaml")}
    copies = {path.name: path.read_bytes() for path in (CHART / "crds").glob("*.yaml")}
    assert sources, "crds/ is empty"
    assert copies == sources, "helm/kct/crds/ drifted from crds/: run `python dev/gen_install_manifest.py`"


def test_install_manifest_and_argocd_config_are_not_stale(helm: Path) -> None:
    """Given the chart, when the generator runs in --check mode, then deploy/ and the chart CRDs are current."""
    generator = load_script(REPO / "dev" / "gen_install_manifest.py")
    assert generator.stale_files(helm) == []


def test_install_manifest_holds_namespace_crds_and_operator() -> None:
    """Given deploy/install.yaml, then it creates the namespace first, then the CRDs, then the operator."""
    objects = [doc for doc in yaml.safe_load_all((REPO / "deploy" / "install.yaml").read_text()) if doc]
    assert objects[0]["kind"] == "Namespace"
    kinds = [obj["kind"] for obj in objects]
    assert kinds.index("CustomResourceDefinition") < kinds.index("Deployment")
    assert {obj["metadata"].get("namespace") for obj in objects if obj["kind"] in {"Deployment", "ServiceAccount"}} \
        == {objects[0]["metadata"]["name"]}


def test_argocd_configmap_carries_each_health_check() -> None:
    """Given the generated argocd-cm patch, then it holds each kind's health.lua under Argo CD's key."""
    data = yaml.safe_load((REPO / "deploy" / "argocd" / "argocd-cm-health.yaml").read_text())["data"]
    for kind in ("ClientMetricsSubscription", "TelemetryReceiver"):
        script = (REPO / "deploy" / "argocd" / OUR_GROUP / kind / "health.lua").read_text()
        assert data[f"resource.customizations.health.{OUR_GROUP}_{kind}"] == script


def test_tools_module_pins_versions(tools: ModuleType) -> None:
    """Given dev/tools, then each tool has an exact pinned version (no `latest`)."""
    for version in (tools.HELM_VERSION, tools.HADOLINT_VERSION):
        assert re.fullmatch(r"\d+\.\d+\.\d+", version)


def test_gitops_examples_use_valid_chart_values() -> None:
    """Given the Argo CD Application and Flux HelmRelease examples, then the values they pass to the chart
    satisfy its values schema, and they point at the chart's path."""
    jsonschema: Any = require_module("jsonschema", "it checks values against the chart's schema")
    schema = json.loads((CHART / "values.schema.json").read_text())
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    gitops = REPO / "deploy" / "gitops"
    application = yaml.safe_load((gitops / "argocd-application.yaml").read_text())
    release = next(doc for doc in yaml.safe_load_all((gitops / "flux-helmrelease.yaml").read_text())
                   if doc["kind"] == "HelmRelease")
    assert application["spec"]["source"]["path"] == "helm/kct"
    assert release["spec"]["chart"]["spec"]["chart"] == "helm/kct"
    for values in (application["spec"]["source"]["helm"]["valuesObject"], release["spec"]["values"]):
        merged = {**defaults, **values, "kafka": {**defaults["kafka"], **values.get("kafka", {})}}
        merged["kafka"]["clientPropertiesSecret"] = {**defaults["kafka"]["clientPropertiesSecret"],
                                                     **values.get("kafka", {}).get("clientPropertiesSecret", {})}
        jsonschema.validate(merged, schema)
