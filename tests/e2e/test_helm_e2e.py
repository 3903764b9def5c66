"""The Helm chart and the install manifest against the real local API server (RBAC on).

What a platform team checks before adopting the operator: `helm install` succeeds and creates the
Deployment with its ServiceAccount and RBAC; the single-file manifest passes the API server's own
validation; a misspelled value is refused naming it; and the operator, run here with nothing but the
ServiceAccount's token (pods never start on this stack: no kubelet), reconciles a ClientMetricsSubscription
in the namespace it watches and is refused everything else (e.g. Secrets of other namespaces).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import KCT, REPO, OperatorProcess, eventually, unique
from preconditions import missing_precondition

pytestmark = pytest.mark.e2e

CHART = REPO / "helm" / "kct"
TOOLS = REPO / "dev" / "tools" / "tools.py"


def _run(argv: list[str], *, stdin: str | None = None, check: bool = True,
         timeout: float = 180) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
    if check:
        assert proc.returncode == 0, f"{' '.join(argv[:4])} ...: {proc.stdout}\n{proc.stderr}"
    return proc


@dataclass(frozen=True)
class Cluster:
    kubeconfig: Path
    helm_binary: Path

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True,
                kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
        return _run(["kubectl", f"--kubeconfig={kubeconfig or self.kubeconfig}", *args], stdin=stdin, check=check)

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return _run([str(self.helm_binary), f"--kubeconfig={self.kubeconfig}", *args], check=check)

    def can_i(self, user: str, verb: str, resource: str, namespace: str | None, *, by_name: bool = False) -> bool:
        """Ask the authorizer directly (a SubjectAccessReview), as `kubectl auth can-i --as` would, but with
        the API group spelled out: can-i maps `resource.group` through discovery, which knows no group whose
        CRD is not installed (the spark-operator's, on a fresh cluster) and then asks the wrong question.
        `resource` is `plural.group[/subresource]`, or with `by_name` `plural.group/object-name`."""
        name, _, suffix = resource.partition("/")
        plural, _, group = name.partition(".")
        attributes: dict[str, str] = {"verb": verb, "group": group, "resource": plural}
        if suffix:
            attributes["name" if by_name else "subresource"] = suffix
        if namespace:
            attributes["namespace"] = namespace
        groups = ["system:authenticated"]
        if user.startswith("system:serviceaccount:"):
            groups += ["system:serviceaccounts", "system:serviceaccounts:" + user.split(":")[2]]
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                  "spec": {"user": user, "groups": groups, "resourceAttributes": attributes}}
        proc = self.kubectl("create", "-o", "json", "-f", "-", stdin=json.dumps(review))
        return bool(json.loads(proc.stdout)["status"].get("allowed", False))


def _new_namespace(cluster: Cluster, prefix: str) -> str:
    name = unique(prefix)
    cluster.kubectl("create", "namespace", name)
    return name


@pytest.fixture(scope="module")
def cluster(stack: Any) -> Cluster:
    helm = Path(_run([sys.executable, str(TOOLS), "path", "helm"], timeout=1200).stdout.strip().splitlines()[-1])
    return Cluster(kubeconfig=stack.kubeconfig, helm_binary=helm)


@dataclass(frozen=True)
class Release:
    name: str
    namespace: str
    watched: str
    unwatched: str
    service_account: str
    install_output: str

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"


@pytest.fixture(scope="module")
def release(cluster: Cluster, stack: Any) -> Iterator[Release]:
    """The chart installed in a fresh namespace, watching one other namespace; a third is not watched."""
    home, watched, unwatched = (_new_namespace(cluster, p) for p in ("kct-home", "kct-watched", "kct-other"))
    name = unique("kct")  # cluster-scoped RBAC objects are named after the release
    # The strictest Pod Security Standard: the operator's pod must still be admitted.
    cluster.kubectl("label", "namespace", home, "pod-security.kubernetes.io/enforce=restricted")
    installed = cluster.helm("install", name, str(CHART), "--namespace", home,
                             "--set", f"watchNamespaces={{{watched}}}",
                             "--set", f"kafka.bootstrapServers={stack.kafka_bootstrap}",
                             "--set", "resources.limits.memory=300Mi")
    try:
        yield Release(name=name, namespace=home, watched=watched, unwatched=unwatched, service_account=name,
                      install_output=installed.stdout)
    finally:
        cluster.helm("uninstall", name, "--namespace", home, "--wait", "--timeout=60s", check=False)
        for namespace in (home, watched, unwatched):
            cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_helm_install_creates_the_operator_with_its_service_account_and_rbac(cluster: Cluster,
                                                                             release: Release) -> None:
    """Given `helm install` with one watched namespace, then the Deployment runs as the chart's
    ServiceAccount, the watched namespace has a Role bound to it, and the CRDs are established."""
    deployment = json.loads(cluster.kubectl("get", "deployment", release.name, "-n", release.namespace,
                                            "-o", "json").stdout)
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == release.service_account
    assert deployment["spec"]["replicas"] == 2  # two replicas, one active through the Lease
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    pdb = json.loads(cluster.kubectl("get", "pdb", release.name, "-n", release.namespace, "-o", "json").stdout)
    assert pdb["spec"]["maxUnavailable"] == 1
    cluster.kubectl("get", "serviceaccount", release.service_account, "-n", release.namespace)
    binding = json.loads(cluster.kubectl("get", "rolebinding", release.name, "-n", release.watched,
                                         "-o", "json").stdout)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": release.service_account,
                                    "namespace": release.namespace}]
    assert cluster.kubectl("get", "role", "-n", release.unwatched, "-o", "name").stdout.strip() == ""
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    "crd/clientmetricssubscriptions.telemetry.kct.dev")
    # NOTES.txt tells what to do next, for the namespace actually watched.
    assert f"kubectl wait --for=condition=Ready cms/producers -n {release.watched}" in release.install_output
    # kube-controller-manager turns the Deployment into a ReplicaSet and a Pod, which Pod Security admission
    # ("restricted") lets in; the pod stays Pending here (no scheduler, no kubelet).
    pod = eventually(lambda: cluster.kubectl("get", "pods", "-n", release.namespace, "-o", "name").stdout.strip(),
                     timeout=60, what="the operator's Pod to be admitted")
    assert pod.startswith(f"pod/{release.name}-")


def test_service_account_can_do_exactly_what_the_operator_needs(cluster: Cluster, release: Release) -> None:
    """Given the installed RBAC, then the ServiceAccount may reconcile CRs and read Kafka Secrets in the
    watched namespace, and nothing of the kind anywhere else."""
    user = release.user
    for verb, resource in [("list", "clientmetricssubscriptions.telemetry.kct.dev"),
                           ("watch", "clientmetricssubscriptions.telemetry.kct.dev"),
                           ("patch", "clientmetricssubscriptions.telemetry.kct.dev"),
                           ("patch", "clientmetricssubscriptions.telemetry.kct.dev/status"),
                           ("create", "events"), ("get", "secrets"), ("create", "deployments.apps")]:
        assert cluster.can_i(user, verb, resource, release.watched), f"{verb} {resource} in the watched namespace"
    for verb, resource, namespace in [("get", "secrets", release.unwatched),
                                      ("list", "clientmetricssubscriptions.telemetry.kct.dev", release.unwatched),
                                      ("get", "secrets", release.namespace),
                                      # kopf only patches: no replacing a resource
                                      ("update", "clientmetricssubscriptions.telemetry.kct.dev", release.watched),
                                      ("list", "secrets", None),
                                      ("create", "clusterroles.rbac.authorization.k8s.io", None),
                                      ("delete", "namespaces", None),
                                      ("create", "customresourcedefinitions.apiextensions.k8s.io", None)]:
        assert not cluster.can_i(user, verb, resource, namespace), f"{verb} {resource} in {namespace or 'cluster'}"
    assert cluster.can_i(user, "watch", "customresourcedefinitions.apiextensions.k8s.io", None)
    assert cluster.can_i(user, "list", "namespaces", None)
    # Leader election: its own Lease in the release namespace, nothing else of the kind.
    assert cluster.can_i(user, "create", "leases.coordination.k8s.io", release.namespace)
    assert cluster.can_i(user, "update", f"leases.coordination.k8s.io/{release.name}", release.namespace, by_name=True)
    assert not cluster.can_i(user, "update", "leases.coordination.k8s.io/other", release.namespace, by_name=True)
    assert not cluster.can_i(user, "create", "leases.coordination.k8s.io", release.watched)


@pytest.fixture(scope="module")
def service_account_kubeconfig(cluster: Cluster, release: Release, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kubeconfig with the API server of the stack and a TokenRequest token of the operator's ServiceAccount."""
    token = cluster.kubectl("create", "token", release.service_account, "-n", release.namespace,
                            "--duration=1h").stdout.strip()
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]
    server = next(c for c in admin["clusters"] if c["name"] == context["cluster"])
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "operator",
        "clusters": [{"name": "stack", "cluster": server["cluster"]}],
        "users": [{"name": "operator", "user": {"token": token}}],
        "contexts": [{"name": "operator", "context": {"cluster": "stack", "user": "operator",
                                                      "namespace": release.namespace}}],
    }
    path = tmp_path_factory.mktemp("sa") / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def test_service_account_token_is_refused_outside_its_rbac(cluster: Cluster, release: Release,
                                                           service_account_kubeconfig: Path) -> None:
    """Given the ServiceAccount's own token, when it reads Secrets of a namespace the operator does not watch,
    then the API server answers Forbidden; in the watched namespace it may."""
    cluster.kubectl("create", "secret", "generic", "kafka-other", "-n", release.unwatched,
                    "--from-literal=client.properties=security.protocol=PLAINTEXT")
    refused = cluster.kubectl("get", "secret", "kafka-other", "-n", release.unwatched,
                              kubeconfig=service_account_kubeconfig, check=False)
    assert refused.returncode != 0
    assert "Forbidden" in refused.stderr or "forbidden" in refused.stderr, refused.stderr
    cluster.kubectl("create", "secret", "generic", "kafka-watched", "-n", release.watched,
                    "--from-literal=client.properties=security.protocol=PLAINTEXT")
    cluster.kubectl("get", "secret", "kafka-watched", "-n", release.watched, kubeconfig=service_account_kubeconfig)


def test_service_account_writes_only_objects_the_operator_owns(cluster: Cluster, release: Release,
                                                              service_account_kubeconfig: Path) -> None:
    """Given the chart's admission policy, when the operator's ServiceAccount writes ConfigMaps in the watched
    namespace, then one labelled managed-by=kct-operator may be created, changed and deleted, while creating
    an unlabelled one, or relabelling or deleting someone else's, is refused with the policy's message; the
    administrator is not affected."""
    owned, foreign = unique("kct-owned"), unique("kct-foreign")
    labelled = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "1"},
                "metadata": {"name": owned, "namespace": release.watched,
                             "labels": {"app.kubernetes.io/managed-by": "kct-operator"}}}

    def as_operator(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        result: subprocess.CompletedProcess[str] = cluster.kubectl(
            *args, "-n", release.watched, kubeconfig=service_account_kubeconfig, check=False, stdin=stdin)
        return result

    def refused_create() -> subprocess.CompletedProcess[str] | None:
        attempt = as_operator("create", "configmap", foreign, "--from-literal=a=1")
        if attempt.returncode == 0:  # the API server compiles a new policy asynchronously: not active yet
            cluster.kubectl("delete", "configmap", foreign, "-n", release.watched)
            return None
        return attempt

    refused = eventually(refused_create, timeout=30, what="the admission policy to refuse an unlabelled ConfigMap")
    assert "managed-by=kct-operator" in refused.stderr, refused.stderr
    assert as_operator("apply", "-f", "-", stdin=yaml.safe_dump(labelled)).returncode == 0
    assert as_operator("patch", "configmap", owned, "--type=merge", "-p", '{"data":{"a":"2"}}').returncode == 0
    assert as_operator("delete", "configmap", owned).returncode == 0
    cluster.kubectl("create", "configmap", foreign, "-n", release.watched, "--from-literal=a=1")
    relabel = as_operator("label", "configmap", foreign, "app.kubernetes.io/managed-by=kct-operator")
    assert relabel.returncode != 0 and "objects it created" in relabel.stderr, relabel.stderr
    assert as_operator("delete", "configmap", foreign).returncode != 0
    cluster.kubectl("delete", "configmap", foreign, "-n", release.watched)


def test_operator_with_the_service_account_token_reconciles_a_subscription(
        cluster: Cluster, release: Release, service_account_kubeconfig: Path, stack: Any,
        tmp_path: Path) -> None:
    """Given `kct operator` run with the ServiceAccount's token and the chart's settings, when a
    ClientMetricsSubscription is applied in the watched namespace, then it becomes Ready, and the operator
    logs no permission problem."""
    if not KCT.exists():
        missing_precondition("the kct console script is not installed in .venv")
    env = stack.env()
    env.update(KUBECONFIG=str(service_account_kubeconfig), KAFKA_BOOTSTRAP_SERVERS=stack.kafka_bootstrap,
               KCT_WATCH_NAMESPACES=release.watched, KCT_RESYNC_SECONDS="5",
               # as the chart's Deployment sets them: leader election through the release's own Lease
               KCT_LEADER_ELECTION="true", KCT_LEADER_ELECTION_NAME=release.name, POD_NAMESPACE=release.namespace,
               POD_NAME=f"{release.name}-test")
    log_path = tmp_path / "operator.log"
    operator = OperatorProcess(env, log_path)
    name = unique("helm")
    try:
        operator.start(timeout=60)
        subscription = {
            "apiVersion": "telemetry.kct.dev/v1alpha1", "kind": "ClientMetricsSubscription",
            "metadata": {"name": name, "namespace": release.watched},
            "spec": {"metrics": ["org.apache.kafka.producer."], "intervalMs": 60000,
                     "match": {"clientId": unique("kct-helm-e2e-nobody")}},
        }
        cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(subscription))
        cluster.kubectl("wait", f"cms/{name}", "-n", release.watched, "--for=condition=Ready", "--timeout=90s")
        cluster.kubectl("delete", "cms", name, "-n", release.watched, "--timeout=60s")
        lease = json.loads(cluster.kubectl("get", "lease", release.name, "-n", release.namespace, "-o", "json").stdout)
        assert lease["spec"]["holderIdentity"] == f"{release.name}-test"
    finally:
        operator.stop()
        sys.stderr.write(f"--- operator log tail ---\n{operator.log_tail(3000)}\n")
    log_text = log_path.read_text()
    assert "Not enough permissions" not in log_text
    assert "forbidden" not in log_text.lower(), "the operator hit a permission error"


def test_telemetry_receiver_reconciled_with_the_service_account_token(cluster: Cluster, release: Release) -> None:
    """Given the TelemetryReceiver CRD, then the ServiceAccount may manage it and its children in the watched
    namespace (the controller's own e2e test reconciles one)."""
    assert list((REPO / "crds").glob("*telemetryreceivers*.yaml")), "crds/ has no TelemetryReceiver CRD"
    for verb, resource in [("list", "telemetryreceivers.telemetry.kct.dev"),
                           ("patch", "telemetryreceivers.telemetry.kct.dev/status"),
                           ("create", "configmaps"), ("create", "services"), ("delete", "deployments.apps"),
                           ("create", "poddisruptionbudgets.policy"),
                           ("create", "horizontalpodautoscalers.autoscaling"),
                           ("create", "networkpolicies.networking.k8s.io"),
                           ("create", "sparkapplications.sparkoperator.k8s.io")]:
        assert cluster.can_i(release.user, verb, resource, release.watched), f"{verb} {resource}"


def test_unknown_value_is_refused_naming_it(cluster: Cluster) -> None:
    """Given a misspelled value, when `helm install` runs, then it fails before touching the cluster with a
    schema error naming the key."""
    proc = cluster.helm("install", "kct-typo", str(CHART), "--namespace", "default",
                        "--set", "kafka.bootstrapServer=kafka:9092", check=False)
    assert proc.returncode != 0
    assert "bootstrapServer" in proc.stderr and "schema" in proc.stderr, proc.stderr
    assert cluster.helm("status", "kct-typo", "--namespace", "default", check=False).returncode != 0


def test_install_manifest_passes_server_side_validation(cluster: Cluster) -> None:
    """Given deploy/install.yaml, when applied as a server-side dry run, then the API server accepts every object."""
    # Dry-run the namespaced objects into a real (fresh) namespace, since a dry-run Namespace is not created.
    namespace = _new_namespace(cluster, "kct-manifest")
    manifest = (REPO / "deploy" / "install.yaml").read_text().replace("kct-system", namespace)
    try:
        proc = cluster.kubectl("apply", "--server-side", "--dry-run=server", "--force-conflicts", "-f", "-",
                               stdin=manifest, check=False)
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    errors = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("Warning:")]
    assert proc.returncode == 0 and not errors, proc.stderr
    for created in ("customresourcedefinition.apiextensions.k8s.io/clientmetricssubscriptions.telemetry.kct.dev",
                    "deployment.apps/kct", "serviceaccount/kct", "clusterrole.rbac.authorization.k8s.io/kct"):
        assert created in proc.stdout, proc.stdout
