"""The Kubernetes half of the local stack behaves like a real cluster's control plane.

Runs against the real etcd + kube-apiserver + kube-controller-manager that `dev/stack/kube.py` builds and
starts (through the `stack` fixture). No kubelet runs, so pods stay Pending: these tests only rely on what the
API server and the controller manager do.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from helpers import eventually
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from preconditions import missing_precondition

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
KUBECTL = "kubectl"


def _load_kube_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kct_stack_kube", REPO / "dev" / "stack" / "kube.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


kube = _load_kube_module()


def _kubectl(kubeconfig: Path, *args: str) -> str:
    proc = subprocess.run([KUBECTL, f"--kubeconfig={kubeconfig}", *args], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, f"kubectl {' '.join(args)} failed: {proc.stderr}"
    return proc.stdout


def test_server_version_is_the_pinned_kubernetes_version(stack: Any) -> None:
    """Given the local stack is up
    When kubectl asks for the version
    Then the server answers with exactly the pinned KUBERNETES_VERSION."""
    out = json.loads(_kubectl(stack.kubeconfig, "version", "-o", "json"))

    assert out["serverVersion"]["gitVersion"] == f"v{kube.KUBERNETES_VERSION}"
    major, minor, _patch = kube.KUBERNETES_VERSION.split(".")
    assert (out["serverVersion"]["major"], out["serverVersion"]["minor"]) == (major, minor)


def test_apiserver_reports_ready(stack: Any) -> None:
    """Given the local stack is up
    When /readyz is read with the admin credential from the stack's kubeconfig
    Then it says ok."""
    assert _kubectl(stack.kubeconfig, "get", "--raw", "/readyz").strip() == "ok"


@pytest.fixture
def cel_crd(kube_api: client.ApiClient) -> Iterator[tuple[str, str, str]]:
    """A namespaced CRD whose schema carries a CEL rule (`x-kubernetes-validations`); removed afterwards."""
    group = "e2e.kct.dev"
    suffix = uuid.uuid4().hex[:8]
    plural, kind = f"gadgets{suffix}", f"Gadget{suffix}"
    ext = client.ApiextensionsV1Api(kube_api)
    body: dict[str, Any] = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": f"gadget{suffix}", "kind": kind},
            "versions": [{
                "name": "v1", "served": True, "storage": True,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"spec": {
                        "type": "object",
                        "properties": {"min": {"type": "integer"}, "max": {"type": "integer"}},
                        "x-kubernetes-validations": [
                            {"rule": "self.min <= self.max", "message": "min must not exceed max"},
                        ],
                    }},
                }},
            }],
        },
    }
    ext.create_custom_resource_definition(body)  # type: ignore[arg-type]  # the client accepts plain dicts
    try:
        def established() -> bool:
            crd = ext.read_custom_resource_definition(f"{plural}.{group}")
            conditions = (crd.status.conditions if crd.status else None) or []
            return any(c.type == "Established" and c.status == "True" for c in conditions)

        eventually(established, timeout=30, what="the CRD to be established")
        yield group, plural, kind
    finally:
        ext.delete_custom_resource_definition(f"{plural}.{group}")


def test_crd_cel_validation_is_enforced(kube_api: client.ApiClient, namespace: str,
                                        cel_crd: tuple[str, str, str]) -> None:
    """Given a CRD with a CEL rule `self.min <= self.max`
    When a valid object and then an invalid one are created
    Then the valid one is stored and the invalid one is refused with the rule's message."""
    group, plural, kind = cel_crd
    objects = client.CustomObjectsApi(kube_api)

    def obj(name: str, lo: int, hi: int) -> dict[str, Any]:
        return {"apiVersion": f"{group}/v1", "kind": kind, "metadata": {"name": name},
                "spec": {"min": lo, "max": hi}}

    # The first create right after Established can still race discovery: retry briefly on 404.
    def create_valid() -> bool:
        try:
            objects.create_namespaced_custom_object(group, "v1", namespace, plural, obj("ok", 1, 2))
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    eventually(create_valid, timeout=30, what="the custom resource endpoint")
    with pytest.raises(ApiException) as refused:
        objects.create_namespaced_custom_object(group, "v1", namespace, plural, obj("bad", 3, 2))

    assert refused.value.status == 422
    assert "min must not exceed max" in str(refused.value.body)
    stored: dict[str, Any] = objects.list_namespaced_custom_object(group, "v1", namespace, plural)  # type: ignore[assignment]
    assert [o["metadata"]["name"] for o in stored["items"]] == ["ok"]


def test_deployment_gets_a_replicaset(kube_api: client.ApiClient, namespace: str) -> None:
    """Given the controller manager is running
    When a Deployment is created
    Then a ReplicaSet owned by that Deployment appears (pods stay Pending: there is no kubelet)."""
    apps = client.AppsV1Api(kube_api)
    labels = {"app": "stack-e2e"}
    deployment = client.V1Deployment(
        metadata=client.V1ObjectMeta(name="web"),
        spec=client.V1DeploymentSpec(
            replicas=1,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(containers=[client.V1Container(name="web", image="example.invalid/web:1")]),
            ),
        ),
    )
    created = apps.create_namespaced_deployment(namespace, deployment)
    assert created.metadata is not None
    uid = created.metadata.uid

    def owned_replicasets() -> list[client.V1ReplicaSet]:
        items = apps.list_namespaced_replica_set(namespace).items
        return [rs for rs in items
                if rs.metadata and any(ref.uid == uid for ref in (rs.metadata.owner_references or []))]

    replicasets = eventually(owned_replicasets, timeout=60, what="the Deployment's ReplicaSet")
    assert len(replicasets) == 1
    assert replicasets[0].spec.replicas == 1


def test_namespace_deletion_completes(kube_api: client.ApiClient) -> None:
    """Given a namespace holding an object
    When the namespace is deleted
    Then the namespace controller empties it and it is gone."""
    core = client.CoreV1Api(kube_api)
    name = f"kct-e2e-nsdel-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    core.create_namespaced_config_map(name, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c"),
                                                               data={"k": "v"}))

    core.delete_namespace(name)

    def gone() -> bool:
        try:
            core.read_namespace(name)
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return False

    eventually(gone, timeout=90, what=f"namespace {name} to be deleted")


def test_up_again_reuses_the_running_stack(stack: Any) -> None:
    """Given the stack is running from the state dir that holds its kubeconfig
    When up() is called again
    Then it returns the same kubeconfig without starting new processes, and status shows all running."""
    state = Path(stack.kubeconfig).resolve().parent
    if not stack.local or not (state / "pids" / f"{kube.APISERVER}.pid").exists():
        missing_precondition("the stack's kubeconfig does not live in the kube state dir")
    pids_before = {n: (state / "pids" / f"{n}.pid").read_text() for n in kube.COMPONENTS}

    env = kube.up(state)

    assert env == {"KUBECONFIG": str(state / "kubeconfig")}
    assert {n: (state / "pids" / f"{n}.pid").read_text() for n in kube.COMPONENTS} == pids_before
    lines = kube.status(state)
    assert len(lines) == 3
    assert all(" running " in line for line in lines), lines
