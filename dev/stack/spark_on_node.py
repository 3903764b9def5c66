#!/usr/bin/env python3
"""The Kubeflow spark-operator installed on the node stack, ready to run a TelemetryReceiver's SparkApplication
in one job namespace: what tests/e2e/test_spark_operator_e2e.py and `make demo` share.

`install(node, namespace)`:
  1. imports the job image (`kct-spark`, `make images`) and the spark-operator's image (`make spark-operator`)
     into the node's containerd (the pods run them with `imagePullPolicy: Never`);
  2. gives the job namespace a static hostPath PersistentVolume on the node's folder
     `build/node-stack/volumes/<namespace>/` (storage class `kct-local`, provisioner
     `kubernetes.io/no-provisioner`: nothing provisions dynamically), pre-bound to the claim `aggregates`,
     the folder owned by the Spark image's user (185), which the pods write as; the host reads the Parquet
     from that folder;
  3. grants what spark-operator 2.4.0's chart lacks for Spark 4.2 (`networkpolicy_grant`);
  4. `helm upgrade --install`s the module's own chart (dev/stack/spark_operator.py `chart()`: controller,
     webhook, CRDs, the chart's RBAC) with `spark.jobNamespaces` = the job namespace, which creates the
     drivers' ServiceAccount `<release>-spark` there.
`uninstall(node, installed)` takes it down in reverse; SparkApplications go first, while their controller
still runs to release them.

    python3 dev/stack/spark_on_node.py install NAMESPACE     # the installation as JSON on stdout
    python3 dev/stack/spark_on_node.py uninstall NAMESPACE

(against the node stack of build/node-stack.env). Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import node
import spark_operator

__all__ = [
    "CLAIM",
    "RELEASE",
    "STORAGE_CLASS",
    "Installed",
    "NodeAccess",
    "SparkOnNodeError",
    "host_path_volume",
    "install",
    "networkpolicy_grant",
    "remove_applications",
    "uninstall",
]

REPO = Path(__file__).resolve().parents[2]
NODE_ENV = REPO / "build" / "node-stack.env"
IMAGES = REPO / "dev" / "images" / "images.py"
SPARK_OPERATOR_IMAGE = REPO / "dev" / "images" / "spark_operator_image.py"
TOOLS = REPO / "dev" / "tools" / "tools.py"
RELEASE = "spark-operator"
CLAIM = "aggregates"
STORAGE_CLASS = "kct-local"
SPARK_UID = 185  # the Spark image's user (the official image's `spark`)
GRANT = "spark-submit-networkpolicies"
APPLICATIONS = "sparkapplications.sparkoperator.k8s.io,scheduledsparkapplications.sparkoperator.k8s.io"


class SparkOnNodeError(RuntimeError):
    """A step of the installation failed; the message says which and what to run."""


@dataclass(frozen=True)
class NodeAccess:
    """How to reach the node stack: its host kubeconfig and `node-exec` (a command in the node's namespaces),
    as build/node-stack.env names them (KUBECONFIG, KCT_NODE_EXEC)."""

    kubeconfig: Path
    node_exec: Path

    @property
    def state(self) -> Path:
        """The node stack's state folder (build/node-stack), where node-exec lives."""
        return self.node_exec.parent

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 120) -> str:
        proc = subprocess.run(["kubectl", f"--kubeconfig={self.kubeconfig}", *args], input=stdin,
                              capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise SparkOnNodeError(f"kubectl {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc.stdout

    @classmethod
    def from_env_file(cls, path: Path = NODE_ENV) -> NodeAccess:
        env = dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
        return cls(kubeconfig=Path(env["KUBECONFIG"]), node_exec=Path(env["KCT_NODE_EXEC"]))


@dataclass(frozen=True)
class Installed:
    """What `install` set up for one job namespace."""

    namespace: str          # the job namespace: the TelemetryReceiver, its SparkApplication, the claim
    release: str            # the spark-operator's Helm release ...
    release_namespace: str  # ... and its namespace
    job_image: str          # kct.dev/kct-spark:<key>, for `spec.aggregation.image`
    operator_image: str     # kct.dev/spark-operator:<key>
    service_account: str    # the drivers' (`spec.aggregation.driver.serviceAccount`), made by the chart
    claim: str              # `spec.aggregation.sinkClaimName`
    volume: Path            # host side of the claim's PersistentVolume
    archive_mb: dict[str, int]       # image reference -> docker-archive size
    import_seconds: dict[str, float]  # image reference -> time to import it (absent: it was there already)


# ------------------------------------------------------------------------------------------ builders


def networkpolicy_grant(namespace: str, release: str, release_namespace: str) -> list[dict[str, Any]]:
    """What spark-operator 2.4.0's chart lacks for Spark 4.2: spark-submit (run by its controller) creates a
    NetworkPolicy for every driver, which the chart's Role does not allow ("cannot patch resource
    networkpolicies"): a Role for that, bound to the controller's ServiceAccount, in the job namespace."""
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": GRANT, "namespace": namespace},
         "rules": [{"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
                    "verbs": ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": GRANT, "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": GRANT},
         "subjects": [{"kind": "ServiceAccount", "name": f"{release}-controller", "namespace": release_namespace}]},
    ]


def volume_name(namespace: str) -> str:
    return f"{namespace}-{CLAIM}"


def host_path_volume(namespace: str, folder: Path) -> list[dict[str, Any]]:
    """The StorageClass `kct-local` (no provisioner), a PersistentVolume on `folder` of the node pre-bound to
    the claim CLAIM in `namespace`, and that claim. ReadWriteMany: driver and executors mount it at once."""
    return [
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": STORAGE_CLASS},
         "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "Immediate"},
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": volume_name(namespace)},
         "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                  "persistentVolumeReclaimPolicy": "Retain", "storageClassName": STORAGE_CLASS,
                  "hostPath": {"path": str(folder), "type": "Directory"},
                  "claimRef": {"namespace": namespace, "name": CLAIM}}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": CLAIM, "namespace": namespace},
         "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": STORAGE_CLASS,
                  "volumeName": volume_name(namespace), "resources": {"requests": {"storage": "1Gi"}}}},
    ]


def helm_values(operator_image: str, namespace: str) -> list[str]:
    """`--set`s for the chart: our build of the operator's image (imported, never pulled), one job namespace,
    and CPU and memory requests for its pods: the chart sets none, and on a busy node BestEffort pods got so
    little CPU next to the Spark pods (which request some) that their probes timed out and they restarted."""
    repository, tag = operator_image.rsplit(":", 1)
    registry, _, name = repository.partition("/")
    values = {"image.registry": registry, "image.repository": name, "image.tag": tag, "image.pullPolicy": "Never",
              "spark.jobNamespaces[0]": namespace}
    for component in ("controller", "webhook"):
        values[f"{component}.resources.requests.cpu"] = "100m"
        values[f"{component}.resources.requests.memory"] = "64Mi"
    return [arg for key, value in values.items() for arg in ("--set", f"{key}={value}")]


def _as_list(objects: list[dict[str, Any]]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})


# ------------------------------------------------------------------------------------------ steps


def _plan(argv: list[str], make: str) -> tuple[Path, str]:
    """ARCHIVE and REFERENCE of a built image, as its builder's `plan` prints them; never builds."""
    proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=120, check=False)
    line = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    archive, _, reference = line.partition("\t")
    if proc.returncode != 0 or not reference or not Path(archive).is_file():
        raise SparkOnNodeError(f"no image from `{Path(argv[0]).name} {' '.join(argv[1:])}` for these sources "
                               f"({proc.stderr.strip()[-300:] or 'not built'}): run `{make}`")
    return Path(archive), reference


def import_image(access: NodeAccess, archive: Path, reference: str) -> float | None:
    """The archive in the node's containerd unless there already; the seconds it took, None when present."""
    socket = node.NodePaths(access.state.resolve()).containerd_socket
    ctr = [str(access.node_exec), "ctr", f"--address={socket}", "--namespace=k8s.io"]
    listed = subprocess.run([*ctr, "images", "list", "--quiet"], capture_output=True, text=True, timeout=60,
                            check=False)
    if listed.returncode != 0:
        raise SparkOnNodeError(f"ctr images list on the node: {listed.stderr.strip()}")
    if reference in listed.stdout.split():
        return None
    started = time.monotonic()
    done = subprocess.run([*ctr, "images", "import", str(archive)], capture_output=True, text=True, timeout=900,
                          check=False)
    if done.returncode != 0:
        raise SparkOnNodeError(f"ctr images import {archive}: {done.stderr.strip()}")
    return time.monotonic() - started


def helm(access: NodeAccess) -> list[str]:
    """argv prefix: our helm (dev/tools/tools.py, installed when missing) with the node stack's kubeconfig."""
    proc = subprocess.run([sys.executable, str(TOOLS), "path", "helm"], capture_output=True, text=True,
                          timeout=1200, check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise SparkOnNodeError(f"no helm: {proc.stderr.strip()[-300:]}")
    return [proc.stdout.strip().splitlines()[-1], f"--kubeconfig={access.kubeconfig}"]


def _volume_folder(access: NodeAccess, namespace: str, *, empty: bool) -> Path:
    folder = access.state.resolve() / "volumes" / namespace
    if empty and folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    shutil.chown(folder, SPARK_UID, SPARK_UID)
    return folder


def _wait_bound(access: NodeAccess, namespace: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        phase = access.kubectl("get", "pvc", CLAIM, "-n", namespace, "-o", "jsonpath={.status.phase}", check=False)
        if phase == "Bound":
            return
        time.sleep(1)
    raise SparkOnNodeError(f"the claim {namespace}/{CLAIM} is not Bound after {timeout:.0f}s")


def install(access: NodeAccess, namespace: str, *, release: str = RELEASE, release_namespace: str = RELEASE,
            empty_volume: bool = False, progress: Callable[[str], None] = print) -> Installed:
    """The images on the node, the namespace's volume and grant, the chart (see the module docstring).
    `namespace` must exist. Idempotent (`helm upgrade --install`); `empty_volume` removes what an earlier run
    left on the volume (aggregates and the streaming checkpoint, which names offsets of an earlier topic).
    `progress` is told each slow step before it starts."""
    job_archive, job_image = _plan([str(IMAGES), "plan", "kct-spark"], "make images")
    operator_archive, operator_image = _plan([str(SPARK_OPERATOR_IMAGE), "plan"], "make spark-operator")
    chart = spark_operator.chart()
    sizes, seconds = {}, {}
    for archive, reference in ((job_archive, job_image), (operator_archive, operator_image)):
        sizes[reference] = round(archive.stat().st_size / 1e6)
        progress(f"image {reference} ({sizes[reference]} MB) into the node's containerd, unless there")
        took = import_image(access, archive, reference)
        if took is not None:
            seconds[reference] = round(took, 1)
    volume = _volume_folder(access, namespace, empty=empty_volume)
    access.kubectl("apply", "-f", "-", stdin=_as_list(host_path_volume(namespace, volume)))
    _wait_bound(access, namespace)
    access.kubectl("apply", "-f", "-", stdin=_as_list(networkpolicy_grant(namespace, release, release_namespace)))
    argv = [*helm(access), "upgrade", "--install", release, str(chart), "-n", release_namespace, "--create-namespace",
            *helm_values(operator_image, namespace), "--wait", "--timeout", "300s"]
    progress(f"helm upgrade --install {release} {chart} -n {release_namespace} (waits for its pods)")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=360, check=False)
    if proc.returncode != 0:
        raise SparkOnNodeError(f"helm upgrade --install {release} (spark-operator chart): {proc.stderr.strip()}")
    return Installed(namespace=namespace, release=release, release_namespace=release_namespace,
                     job_image=job_image, operator_image=operator_image, service_account=f"{release}-spark",
                     claim=CLAIM, volume=volume, archive_mb=sizes, import_seconds=seconds)


def remove_applications(access: NodeAccess, namespace: str, timeout: float = 120) -> None:
    """Delete the (Scheduled)SparkApplications of `namespace` and wait until they are gone: their controller
    removes the drivers while it runs (uninstalled first, the objects would wait on it). Nothing to do when
    the spark-operator's CRDs are absent."""
    crds = access.kubectl("get", "crd", "-o", "name", check=False)
    if "sparkapplications.sparkoperator.k8s.io" not in crds:
        return
    access.kubectl("delete", APPLICATIONS, "--all", "-n", namespace, "--wait=true", f"--timeout={timeout:.0f}s",
                   timeout=timeout + 30, check=False)


def uninstall(access: NodeAccess, installed: Installed, *, keep_volume: bool = False) -> None:
    """Reverse of `install`; best effort (a step that fails does not stop the next). The StorageClass stays
    (cluster-wide, other namespaces' volumes may use it); the namespaces are the caller's."""
    ns = installed.namespace
    remove_applications(access, ns)
    with contextlib.suppress(SparkOnNodeError, subprocess.SubprocessError):
        subprocess.run([*helm(access), "uninstall", installed.release, "-n", installed.release_namespace, "--wait"],
                       capture_output=True, timeout=300, check=False)
    access.kubectl("delete", "rolebinding,role", GRANT, "-n", ns, "--ignore-not-found", check=False)
    access.kubectl("delete", "pvc", CLAIM, "-n", ns, "--ignore-not-found", "--wait=false", check=False)
    access.kubectl("delete", "pv", volume_name(ns), "--ignore-not-found", "--wait=false", check=False)
    if not keep_volume:
        shutil.rmtree(installed.volume, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["install", "uninstall"])
    parser.add_argument("namespace", help="the job namespace (must exist)")
    args = parser.parse_args(argv)
    access = NodeAccess.from_env_file()
    try:
        if args.action == "install":
            installed = install(access, args.namespace, progress=lambda line: print(line, file=sys.stderr))
            print(json.dumps(asdict(installed), default=str, indent=2))
        else:
            uninstall(access, install_record(access, args.namespace, RELEASE))
    except SparkOnNodeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


def install_record(access: NodeAccess, namespace: str, release_namespace: str, release: str = RELEASE) -> Installed:
    """What `install` returns, as far as `uninstall` needs it, without looking anything up: for a command line
    `uninstall`, or a caller cleaning up after an `install` that failed half-way."""
    return Installed(namespace=namespace, release=release, release_namespace=release_namespace, job_image="",
                     operator_image="", service_account=f"{release}-spark", claim=CLAIM,
                     volume=access.state.resolve() / "volumes" / namespace, archive_mb={}, import_seconds={})


if __name__ == "__main__":
    sys.exit(main())
