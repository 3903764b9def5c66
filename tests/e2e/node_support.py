"""Helpers for the end-to-end tests on the node stack (not a test module, not fixtures; those are in
conftest.py).

- `NodeStack`: where `stack.py node-up` put things (build/node-stack.env), and `kubectl`/`get` against it.
- `Release`: a Helm release of helm/kct on the node stack, and `helm` with its kubeconfig.
- `telemetry_receiver(...)`: a TelemetryReceiver with our image (one replica unless told); `wait_ready(...)`.
- `java_image(stack)`: the kct-spark image (Java, kafka-clients) in the node's containerd, for client pods.
- `in_node(stack, script, *args)`: a Python script run in the node's network namespace (where ClusterIPs and
  pod addresses answer), its stdout.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers import eventually
from preconditions import missing_precondition

REPO = Path(__file__).resolve().parents[2]
STACK = [sys.executable, str(REPO / "dev" / "stack" / "stack.py")]
NODE_ENV = REPO / "build" / "node-stack.env"
CHART = REPO / "helm" / "kct"
TOOLS = REPO / "dev" / "tools" / "tools.py"
IMAGES = REPO / "dev" / "images" / "images.py"


@dataclass(frozen=True)
class NodeStack:
    kubeconfig: Path
    node_name: str
    probe_image: str
    probe_binary: Path
    node_exec: list[str]   # argv prefix: a command in the node's network namespace
    kct_image: str | None  # our runtime image (`make images`), imported by node-up when it was built
    kafka_bootstrap: str       # the node stack's broker from the host (through the forwarder)
    kafka_pod_bootstrap: str   # ... and from pods (its listener on the node's address)
    receiver_token_file: Path  # the bearer token the node stack's broker plugin sends
    containerd_socket: Path    # the node's containerd (`ctr --address`), in the node's namespaces

    def ctr(self, *args: str, timeout: float = 120) -> str:
        """`ctr` against the node's containerd, in the CRI's image namespace (the images pods run from)."""
        proc = subprocess.run([*self.node_exec, "ctr", f"--address={self.containerd_socket}", "--namespace=k8s.io",
                               *args], capture_output=True, text=True, timeout=timeout, check=False)
        assert proc.returncode == 0, f"ctr {' '.join(args)} failed: {proc.stderr}"
        return proc.stdout

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 60) -> str:
        proc = subprocess.run(["kubectl", f"--kubeconfig={self.kubeconfig}", *args], input=stdin,
                              capture_output=True, text=True, timeout=timeout, check=False)
        if check:
            assert proc.returncode == 0, f"kubectl {' '.join(args)} failed: {proc.stderr}"
        return proc.stdout

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json"))


def env_file(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {key: value for key, value in pairs}


def node_stack_running() -> bool:
    out = subprocess.run([*STACK, "node-status"], capture_output=True, text=True, check=False)
    return NODE_ENV.exists() and out.returncode == 0 and "stopped" not in out.stdout


def node_stack_from_env() -> NodeStack:
    env = env_file(NODE_ENV)
    return NodeStack(kubeconfig=Path(env["KUBECONFIG"]), node_name=env["KCT_NODE_NAME"],
                     probe_image=env["KCT_NODE_PROBE_IMAGE"], probe_binary=Path(env["KCT_NODE_PROBE_BINARY"]),
                     node_exec=[env["KCT_NODE_EXEC"]], kct_image=env.get("KCT_NODE_KCT_IMAGE"),
                     kafka_bootstrap=env["KAFKA_BOOTSTRAP_SERVERS"],
                     kafka_pod_bootstrap=env["KCT_NODE_KAFKA_POD_BOOTSTRAP"],
                     receiver_token_file=Path(env["KCT_RECEIVER_TOKEN_FILE"]),
                     containerd_socket=Path(env["KCT_NODE_CONTAINERD_SOCKET"]))


@dataclass(frozen=True)
class Release:
    name: str
    namespace: str
    helm: list[str]   # argv prefix: helm with the node stack's kubeconfig

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """`helm ARGS -n <namespace>`; fails the test with helm's own words when it fails."""
        proc = subprocess.run([*self.helm, *args, "-n", self.namespace], capture_output=True, text=True,
                              timeout=timeout, check=False)
        assert proc.returncode == 0, f"helm {' '.join(args)} failed: {proc.stderr}"
        return proc


def helm_for(stack: NodeStack) -> list[str]:
    out = subprocess.run([sys.executable, str(TOOLS), "path", "helm"], capture_output=True, text=True,
                         timeout=1200, check=True)
    return [out.stdout.strip().splitlines()[-1], f"--kubeconfig={stack.kubeconfig}"]


def chart_values(stack: NodeStack) -> list[str]:
    """`--set`s that run the chart with our runtime image (never pulled) against the node stack's Kafka."""
    assert stack.kct_image is not None
    repository, tag = stack.kct_image.rsplit(":", 1)
    return ["--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
            "--set", "image.pullPolicy=Never", "--set", f"kafka.bootstrapServers={stack.kafka_pod_bootstrap}"]


def telemetry_receiver(namespace: str, image: str, bootstrap: str, topic: str, token_secret: str | None = None,
                       replicas: int = 1) -> dict[str, Any]:
    auth: dict[str, Any] = {"enabled": True}
    if token_secret is not None:
        auth["tokenSecretRef"] = {"name": token_secret, "key": "token"}
    return {
        "apiVersion": "telemetry.kct.dev/v1alpha1", "kind": "TelemetryReceiver",
        "metadata": {"name": "telemetry", "namespace": namespace},
        "spec": {
            "image": image, "imagePullPolicy": "Never", "replicas": replicas, "autoscaling": {"enabled": False},
            "receiver": {"auth": auth}, "kafka": {"bootstrapServers": bootstrap},
            "topic": {"name": topic, "partitions": 1, "replicationFactor": 1, "deleteOnRemoval": True},
        },
    }


def java_image(stack: NodeStack) -> str:
    """The kct-spark image for these sources (`make images`: Java, kafka-clients under /opt/spark/jars) in the
    node's containerd, imported unless there (the Spark tests and the demo import the same one)."""
    proc = subprocess.run([sys.executable, str(IMAGES), "plan", "kct-spark"], capture_output=True, text=True,
                          timeout=120, check=False)
    archive, _, reference = proc.stdout.strip().rpartition("\n")[2].partition("\t")
    if proc.returncode != 0 or not reference or not Path(archive).is_file():
        missing_precondition("no kct-spark image for these sources: run `make images`")
    if reference not in stack.ctr("images", "list", "--quiet").split():
        stack.ctr("images", "import", archive, timeout=900)
    return reference


def ready_condition(stack: NodeStack, namespace: str) -> dict[str, Any]:
    resource: dict[str, Any] = stack.get("telemetryreceiver", "telemetry", "-n", namespace)
    conditions = {c["type"]: c for c in resource.get("status", {}).get("conditions", [])}
    ready: dict[str, Any] = conditions.get("Ready", {})
    return ready


def wait_ready(stack: NodeStack, namespace: str) -> None:
    eventually(lambda: ready_condition(stack, namespace).get("status") == "True", timeout=300,
               what=f"the TelemetryReceiver in {namespace} to be Ready", interval=2)


def in_node(stack: NodeStack, script: str, *args: str, timeout: float = 60) -> str:
    proc = subprocess.run([*stack.node_exec, sys.executable, "-c", script, *args], capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout
