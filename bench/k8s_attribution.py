"""A Kubernetes API with pods for the attributed scenarios of bench/receiver_vs_collector.py (issue 42).

Only etcd and kube-apiserver (dev/stack/kube.py's binaries, certificates and arguments, in the bench's own
state dir): no controller manager, scheduler or kubelet, so the pods created here are never scheduled and
nothing overwrites the `status.podIP` written through the status subresource. Each pod belongs to a
ReplicaSet owned by a Deployment (the owner chain both attribution engines resolve). Both servers read the
API with one service account token bound to a Role with the least the two need: get/list/watch on pods,
replicasets and jobs in the bench's namespace.

The pure builders (addresses, manifests, the Collector's processor, the expected attributes) are unit-tested
in tests/unit/test_bench_k8s_attribution.py.
"""

from __future__ import annotations

import json
import shutil
import ssl
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dev" / "stack"))

import kube

NAMESPACE = "bench"
SERVICE_ACCOUNT = "kct-bench"
NODE = "bench-node"
API_HOST, API_PORT = kube.HOST, kube.APISERVER_PORT
API = f"https://{API_HOST}:{API_PORT}"
# The k8s.* names both engines add and the check compares (the Collector's `extract.metadata`).
ATTRIBUTES = ("k8s.namespace.name", "k8s.pod.name", "k8s.pod.uid", "k8s.node.name", "k8s.deployment.name")


def pod_address(index: int) -> str:
    """The index-th pod's IP: 10.42.0.1, ... 250 per /24 (no .0 or .255), unique for up to 64,000 pods."""
    if not 0 <= index < 256 * 250:
        raise ValueError(f"pod index {index} out of range")
    return f"10.42.{index // 250}.{index % 250 + 1}"


def deployment_name(index: int, deployments: int) -> str:
    return f"app-{index % deployments:03d}"


def deployment_manifest(name: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"replicas": 0, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": _pod_spec()}},
    }


def replicaset_manifest(deployment: str, deployment_uid: str) -> dict[str, Any]:
    labels = {"app": deployment, "pod-template-hash": "bench"}
    return {
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": f"{deployment}-bench", "namespace": NAMESPACE, "labels": labels,
                     "ownerReferences": [_owner("apps/v1", "Deployment", deployment, deployment_uid)]},
        "spec": {"replicas": 0, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": _pod_spec()}},
    }


def pod_manifest(index: int, deployment: str, replicaset_uid: str) -> dict[str, Any]:
    replicaset = f"{deployment}-bench"
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{replicaset}-{index:05d}", "namespace": NAMESPACE,
                     "labels": {"app": deployment, "pod-template-hash": "bench"},
                     "ownerReferences": [_owner("apps/v1", "ReplicaSet", replicaset, replicaset_uid)]},
        "spec": {**_pod_spec(), "nodeName": NODE},
    }


def pod_status(address: str) -> dict[str, Any]:
    """The merge patch of the status subresource a kubelet would write for a running pod at `address`."""
    return {"status": {"phase": "Running", "podIP": address, "podIPs": [{"ip": address}], "hostIP": "10.41.0.1",
                       "startTime": "2026-01-01T00:00:00Z"}}


def _pod_spec() -> dict[str, Any]:
    # The bench's own service account: no controller manager creates `default`, which admission would want.
    return {"serviceAccountName": SERVICE_ACCOUNT, "automountServiceAccountToken": False,
            "containers": [{"name": "client", "image": "bench.invalid/client:1"}]}


def _owner(api_version: str, kind: str, name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": True,
            "blockOwnerDeletion": True}


def rbac_manifests() -> list[tuple[str, dict[str, Any]]]:
    """(collection path, object): the service account and its Role and RoleBinding (least rights)."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE},
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["apps"], "resources": ["replicasets"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "watch"]},
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SERVICE_ACCOUNT},
        "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}],
    }
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}"
    return [
        (f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
         {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SERVICE_ACCOUNT}}),
        (f"{rbac}/roles", role),
        (f"{rbac}/rolebindings", binding),
    ]


def collector_processor() -> str:
    """The Collector's `k8s_attributes` processor (YAML, under `processors:`): the same pods, found from the
    resource attribute k8s.pod.ip each push carries, the same k8s.* names; it waits for its pod cache before
    it serves, as the receiver's index is filled by its first list."""
    metadata = ", ".join(ATTRIBUTES)
    return f"""\
  k8s_attributes:
    auth_type: kubeConfig
    wait_for_metadata: true
    filter:
      namespace: {NAMESPACE}
    extract:
      metadata: [{metadata}]
    pod_association:
      - sources:
          - from: resource_attribute
            name: k8s.pod.ip
"""


@dataclass(frozen=True)
class BenchPod:
    name: str
    uid: str
    deployment: str
    address: str

    def attributes(self) -> dict[str, str]:
        """What both servers must add to a push from this pod's address."""
        return {"k8s.namespace.name": NAMESPACE, "k8s.pod.name": self.name, "k8s.pod.uid": self.uid,
                "k8s.node.name": NODE, "k8s.deployment.name": self.deployment}


def mismatches(pods_by_address: dict[str, BenchPod], records: list[dict[str, str]]) -> list[str]:
    """For records' resource attributes (each carries the push's k8s.pod.ip), what differs from its pod's."""
    problems = []
    for attributes in records:
        pod = pods_by_address.get(attributes.get("k8s.pod.ip", ""))
        if pod is None:
            problems.append(f"no bench pod for k8s.pod.ip={attributes.get('k8s.pod.ip')!r}")
            continue
        wrong = {k: (attributes.get(k), v) for k, v in pod.attributes().items() if attributes.get(k) != v}
        if wrong:
            problems.append(f"{pod.address}: {wrong} (got, want)")
    return problems


# -- the API server -------------------------------------------------------------------------------------


class Cluster:
    """etcd + kube-apiserver under `state`, reached as the admin (client certificate)."""

    def __init__(self, state: Path) -> None:
        self.state = state.resolve()
        self.pods: list[BenchPod] = []

    def up(self) -> None:
        """A fresh API server: a previous run's objects (etcd's data) are dropped first."""
        kube.down(self.state)
        shutil.rmtree(self.state / "etcd-data", ignore_errors=True)
        self.state.mkdir(parents=True, exist_ok=True)
        kube._ensure_pki(self.state)
        kube._ensure_started(self.state, kube.ETCD)
        kube._wait(self.state, kube.ETCD, kube._etcd_ready, 60)
        kube._ensure_started(self.state, kube.APISERVER)
        kube._wait(self.state, kube.APISERVER, lambda: kube._apiserver_ready(self.state), 180)

    def down(self) -> None:
        kube.down(self.state)

    @property
    def ca_file(self) -> Path:
        return self.state / "pki" / "ca.crt"

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None,
                 content_type: str = "application/json") -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(API + path, data=data, method=method, headers={"Content-Type": content_type})
        ctx: ssl.SSLContext = kube._admin_ssl(self.state)
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=60) as resp:
                result: dict[str, Any] = json.loads(resp.read())
                return result
        except urllib.error.HTTPError as exc:
            raise SystemExit(f"{method} {path}: {exc.code} {exc.read().decode(errors='replace')[:500]}") from exc

    def _create(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        return self._request("POST", path, obj)

    def populate(self, pods: int, deployments: int) -> list[BenchPod]:
        """The namespace, RBAC, `deployments` Deployments with one ReplicaSet each and `pods` pods spread over
        them, each pod's status.podIP written."""
        self._create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        for path, obj in rbac_manifests():
            self._create(path, obj)
        apps = f"/apis/apps/v1/namespaces/{NAMESPACE}"
        rs_uid: dict[str, str] = {}
        for d in range(min(deployments, pods)):
            name = deployment_name(d, deployments)
            uid = self._create(f"{apps}/deployments", deployment_manifest(name))["metadata"]["uid"]
            rs_uid[name] = self._create(f"{apps}/replicasets", replicaset_manifest(name, uid))["metadata"]["uid"]

        def one(index: int) -> BenchPod:
            name = deployment_name(index, deployments)
            pod = self._create(f"/api/v1/namespaces/{NAMESPACE}/pods", pod_manifest(index, name, rs_uid[name]))
            pod_name, address = pod["metadata"]["name"], pod_address(index)
            self._request("PATCH", f"/api/v1/namespaces/{NAMESPACE}/pods/{pod_name}/status", pod_status(address),
                          "application/merge-patch+json")
            return BenchPod(pod_name, pod["metadata"]["uid"], name, address)

        with ThreadPoolExecutor(max_workers=8) as pool:
            self.pods = list(pool.map(one, range(pods)))
        return self.pods

    def token(self) -> str:
        """A bound token of the bench's service account (TokenRequest), valid for the run."""
        path = f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{SERVICE_ACCOUNT}/token"
        answer = self._request("POST", path, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                              "spec": {"expirationSeconds": 86400}})
        return str(answer["status"]["token"])

    def write_credentials(self, where: Path) -> tuple[Path, Path]:
        """A service-account directory (token, ca.crt, namespace) as a pod would mount it, for the receiver,
        and a kubeconfig with the same token, for the Collector."""
        token = self.token()
        sa_dir = where / "serviceaccount"
        sa_dir.mkdir(parents=True, exist_ok=True)
        (sa_dir / "token").write_text(token)
        (sa_dir / "ca.crt").write_bytes(self.ca_file.read_bytes())
        (sa_dir / "namespace").write_text(NAMESPACE)
        kubeconfig = where / "bench.kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "bench", "cluster": {"server": API, "certificate-authority": str(self.ca_file)}}],
            "users": [{"name": SERVICE_ACCOUNT, "user": {"token": token}}],
            "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": SERVICE_ACCOUNT,
                                                       "namespace": NAMESPACE}}],
            "current-context": "bench",
        }))
        return sa_dir, kubeconfig
