"""Helpers for the end-to-end tests on the node stack (not a test module, not fixtures; those are in
conftest.py).

- `NodeStack`: where `stack.py node-up` put things (build/node-stack.env), and `kubectl`/`get` against it.
- `Release`: a Helm release of helm/kct on the node stack, and `helm` with its kubeconfig.
- `telemetry_receiver(...)`: a TelemetryReceiver with our image (one replica unless told); `wait_ready(...)`, which
  for the receiver the broker plugin posts to also writes its CA bundle where the plugin reads it
  (`publish_receiver_ca`).
- `java_image(stack)`: the kct-spark image (Java, kafka-clients) in the node's containerd, for client pods.
- `in_node(stack, script, *args)`: a Python script run in the node's network namespace (where ClusterIPs and
  pod addresses answer), its stdout.
"""

from __future__ import annotations

import base64
import json
import os
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
    kafka_bootstrap: str       # the node stack's brokers (all three) from the host (through the forwarder)
    kafka_pod_bootstrap: str   # ... and from pods (their listeners on the node's address)
    receiver_token_file: Path  # the bearer token the node stack's broker plugins send
    receiver_ca_file: Path     # the CA bundle it trusts (kct.telemetry.tls.ca.file): see publish_receiver_ca
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
                     # a stack started before the variable existed: the file's place is the same
                     receiver_ca_file=Path(env.get("KCT_RECEIVER_CA_FILE",
                                                   str(Path(env["KUBECONFIG"]).parent / "receiver-ca.pem"))),
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


CLIENTS_INTERVAL_SECONDS = 5
NO_CLIENTS_WARNING_SECONDS = 20
CLIENTS_STATUS_VALUES = ("--set", f"operator.clients.intervalSeconds={CLIENTS_INTERVAL_SECONDS}",
                         "--set", f"operator.clients.noMatchWarningSeconds={NO_CLIENTS_WARNING_SECONDS}")


def helm_set_value(value: str) -> str:
    """`value` for helm's `--set key=value`, which would split it at its commas (a bootstrap list)."""
    return value.replace("\\", "\\\\").replace(",", "\\,")


def chart_values(stack: NodeStack) -> list[str]:
    """`--set`s that run the chart with our runtime image (never pulled) against the node stack's Kafka."""
    assert stack.kct_image is not None
    repository, tag = stack.kct_image.rsplit(":", 1)
    return ["--set", f"image.repository={repository}", "--set", f"image.tag={tag}", "--set", "image.pullPolicy=Never",
            "--set", f"kafka.bootstrapServers={helm_set_value(stack.kafka_pod_bootstrap)}",
            # status.clients within seconds, and a subscription matching nothing warned after 20 s, not 10 min
            *CLIENTS_STATUS_VALUES]


# The node stack's Kafka is three brokers: the topics its tests create, and TelemetryReceivers' output topics,
# have a replica on each, two of which must have a write before it is acknowledged.
NODE_REPLICATION = 3
NODE_MIN_INSYNC_REPLICAS = 2


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
            "topic": {"name": topic, "partitions": 1, "replicationFactor": NODE_REPLICATION,
                      "minInsyncReplicas": NODE_MIN_INSYNC_REPLICAS, "deleteOnRemoval": True},
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
    """Wait until `telemetry` in `namespace` is Ready; in the namespace the broker plugin posts to, then give the
    plugin its CA bundle (publish_receiver_ca)."""
    eventually(lambda: ready_condition(stack, namespace).get("status") == "True", timeout=300,
               what=f"the TelemetryReceiver in {namespace} to be Ready", interval=2)
    if namespace == PLUGIN_NAMESPACE:
        publish_receiver_ca(stack, namespace)


# Where the node stack's broker plugin posts (dev/stack/stack.py `_node_telemetry_endpoint`): only this
# namespace's receiver may put its CA into the plugin's trust file.
PLUGIN_NAMESPACE = "kct-telemetry"


def receiver_ca_bundle(stack: NodeStack, namespace: str, name: str = "telemetry") -> str:
    """The PEM bundle a TelemetryReceiver publishes for brokers (`status.tls.caBundleSecret`, `name/key`)."""
    status = stack.get("telemetryreceiver", name, "-n", namespace).get("status", {})
    where = (status.get("tls") or {}).get("caBundleSecret")
    assert where, f"TelemetryReceiver {namespace}/{name} publishes no CA bundle (status.tls): {status}"
    secret_name, _, key = where.partition("/")
    data = stack.get("secret", secret_name, "-n", namespace).get("data", {})
    assert key in data, f"Secret {namespace}/{secret_name} has no key {key!r}"
    return base64.b64decode(data[key]).decode()


def publish_receiver_ca(stack: NodeStack, namespace: str = PLUGIN_NAMESPACE) -> None:
    """Write the receiver's CA bundle into the file the broker plugin trusts (`kct.telemetry.tls.ca.file`), whole
    (a rename), so the plugin, which re-reads the file when it changes, never reads half of it."""
    bundle = receiver_ca_bundle(stack, namespace)
    staged = stack.receiver_ca_file.with_name(f".{stack.receiver_ca_file.name}.new")
    staged.write_text(bundle)
    os.replace(staged, stack.receiver_ca_file)


# Prepended to in-node scripts that call receiver pods or their Service by address: urllib's https then trusts
# the receiver's CA bundle (publish_receiver_ca wrote it; receivers serve TLS by default). The hostname is not
# checked: pod and cluster IPs are not among the certificate's names (its Service's DNS names).
RECEIVER_TLS = """
import os as _os, ssl as _ssl, urllib.request as _request
_context = _ssl.create_default_context(cafile=_os.environ["KCT_RECEIVER_CA_FILE"])
_context.check_hostname = False
_request.install_opener(_request.build_opener(_request.HTTPSHandler(context=_context)))
"""


def node_env(stack: NodeStack) -> dict[str, str]:
    """The environment of an in-node script: ours, plus where the receiver's CA bundle is (RECEIVER_TLS)."""
    return dict(os.environ, KCT_RECEIVER_CA_FILE=str(stack.receiver_ca_file))


def in_node(stack: NodeStack, script: str, *args: str, timeout: float = 60) -> str:
    proc = subprocess.run([*stack.node_exec, sys.executable, "-c", script, *args], capture_output=True, text=True,
                          timeout=timeout, check=False, env=node_env(stack))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout
