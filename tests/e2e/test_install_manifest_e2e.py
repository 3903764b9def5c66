"""deploy/install.yaml applied to the node stack the way its header tells users to: `kubectl apply
--server-side -f`, then `kubectl set env` for the Kafka cluster. No Helm here: the operator must run from the
manifest alone, with the manifest's own ServiceAccount and RBAC, and `kubectl delete -f` must take it all away.

The manifest names the published image; the node has no registry to pull from, so our runtime image for
these sources (`make images`, imported by `node-up`) is tagged on the node with that name first, as a
pre-pulled image would be. The manifest itself is applied unchanged.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import eventually, wait_for_client_metrics
from node_support import REPO, NodeStack
from preconditions import missing_precondition

pytestmark = pytest.mark.e2e

MANIFEST = REPO / "deploy" / "install.yaml"
NAMESPACE = "kct-system"  # fixed by the manifest
DEPLOYMENT = "kct"


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _operator_deployment() -> dict[str, Any]:
    return next(d for d in _documents(MANIFEST) if d["kind"] == "Deployment")


def _subscription(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "telemetry.kct.dev/v1alpha1", "kind": "ClientMetricsSubscription",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"metrics": ["org.apache.kafka.producer."], "intervalMs": 5000,
                 "match": {"clientId": f"{name}-.*"}},
    }


def _ready(stack: NodeStack, namespace: str, name: str) -> bool:
    found = json.loads(stack.kubectl("get", "clientmetricssubscription", name, "-n", namespace, "-o", "json",
                                     check=False) or "{}")
    conditions = {c["type"]: c for c in found.get("status", {}).get("conditions", [])}
    return bool(conditions.get("Ready", {}).get("status") == "True")


def _broker_configs(bootstrap: str, name: str) -> dict[str, Any]:
    """The configs CLIENT_METRICS `name` has on the broker (none once the subscription is deleted)."""
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kct-e2e-manifest")
    try:
        found = admin.describe_configs([ConfigResource(ConfigResourceType.CLIENT_METRICS, name)])
    finally:
        admin.close()
    current = found.get("client_metrics", {}).get(name, {})
    return {key: entry.get("value") for key, entry in current.items() if entry.get("value") not in (None, "")}


@pytest.fixture(scope="module")
def installed(node_stack: NodeStack) -> Iterator[NodeStack]:
    """The manifest applied with our image standing in for the published one; deleted at the end if a test
    left it (the last test deletes it itself)."""
    image = node_stack.kct_image
    if image is None:
        missing_precondition("the node stack has no runtime image: run `make images` before `make node-up`")
    assert image is not None  # missing_precondition does not return
    published = _operator_deployment()["spec"]["template"]["spec"]["containers"][0]["image"]
    node_stack.ctr("images", "tag", "--force", image, published)
    try:
        node_stack.kubectl("apply", "--server-side", "-f", str(MANIFEST))
        node_stack.kubectl("-n", NAMESPACE, "set", "env", f"deployment/{DEPLOYMENT}",
                           f"KAFKA_BOOTSTRAP_SERVERS={node_stack.kafka_pod_bootstrap}")
        node_stack.kubectl("-n", NAMESPACE, "rollout", "status", f"deployment/{DEPLOYMENT}", "--timeout=300s")
        yield node_stack
    finally:
        node_stack.kubectl("delete", "-f", str(MANIFEST), "--ignore-not-found", "--wait=true", "--timeout=180s",
                           check=False)
        node_stack.ctr("images", "remove", published)


def test_the_operator_runs_from_the_manifest_with_its_own_identity(installed: NodeStack) -> None:
    """Given deploy/install.yaml applied and the Kafka cluster set with `kubectl set env`
    When the operator's pods are looked at
    Then every one is Running and ready on the node with the manifest's image, under the manifest's
    ServiceAccount, non-root, with a read-only root filesystem."""
    template, replicas = _operator_deployment()["spec"]["template"]["spec"], _operator_deployment()["spec"]["replicas"]

    def rolled_pods() -> list[dict[str, Any]] | None:
        """The operator's pods once the ones `set env` replaced are gone (they had no Kafka cluster)."""
        pods: list[dict[str, Any]] = installed.get("pods", "-n", NAMESPACE, "-l",
                                                    "app.kubernetes.io/component=operator")["items"]
        return pods if len(pods) == replicas else None

    pods = eventually(rolled_pods, timeout=120, interval=2, what=f"{replicas} operator pods, the replaced ones gone")
    for pod in pods:
        container = pod["spec"]["containers"][0]
        assert pod["status"]["phase"] == "Running"
        assert all(s["ready"] for s in pod["status"]["containerStatuses"])
        assert pod["spec"]["nodeName"] == installed.node_name
        assert pod["spec"]["serviceAccountName"] == template["serviceAccountName"] != "default"
        assert container["image"] == template["containers"][0]["image"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True


def test_a_subscription_reaches_the_broker_and_leaves_it_when_deleted(installed: NodeStack) -> None:
    """Given the operator from the manifest
    When a ClientMetricsSubscription is applied, then deleted
    Then it becomes Ready with its CLIENT_METRICS configs on the broker, and deleting it removes them."""
    namespace, name = f"manifest-{uuid.uuid4().hex[:6]}", f"manifest-{uuid.uuid4().hex[:6]}"
    installed.kubectl("create", "namespace", namespace)
    try:
        installed.kubectl("apply", "-f", "-", stdin=json.dumps(_subscription(namespace, name)))

        eventually(lambda: _ready(installed, namespace, name), timeout=120, interval=1,
                   what=f"ClientMetricsSubscription {name} Ready")
        wait_for_client_metrics(installed.kafka_bootstrap, name,
                                {"metrics": "org.apache.kafka.producer.", "interval.ms": "5000",
                                 "match": f"client_id={name}-.*"}, timeout=60)

        installed.kubectl("delete", "clientmetricssubscription", name, "-n", namespace, "--timeout=120s")
        eventually(lambda: not _broker_configs(installed.kafka_bootstrap, name), timeout=60,
                   what=f"CLIENT_METRICS {name} removed from the broker")
    finally:
        installed.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_kubectl_delete_of_the_manifest_removes_the_operator(installed: NodeStack) -> None:
    """Given the operator from the manifest
    When `kubectl delete -f deploy/install.yaml` runs
    Then its namespace, cluster roles and CRDs are gone."""
    installed.kubectl("delete", "-f", str(MANIFEST), "--wait=true", "--timeout=180s")

    names = {(d["kind"], d["metadata"]["name"]) for d in _documents(MANIFEST) if "namespace" not in d["metadata"]}
    for kind, name in names:
        assert installed.kubectl("get", kind, name, "--ignore-not-found", "-o", "name") == "", (kind, name)
