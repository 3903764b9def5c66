"""A KRaft cluster of combined broker+controller nodes on loopback, each with our telemetry plugin.

kafka_broker.py runs one node; a platform team's brokers are several, and KIP-714 makes that matter:
clients push to whichever broker they talk to, subscriptions reach each broker through the metadata
log, and brokers restart one by one in every upgrade. This module starts `nodes` kafka_broker nodes that
share a cluster id and a static controller quorum (`controller.quorum.voters` lists every node, so a
quorum of 3 survives one node down), each with its own ports, directory and log, the plugin on each
pointed at the same telemetry endpoint. `stop_node` / `start_node` restart one node (SIGTERM: a
controlled shutdown; SIGKILL: a crash); `rejoined` says when the cluster is whole again: every node
lists every broker and no partition lacks a replica in its ISR.

Each node is `<state>/<name>-<id>/` with its log at `<state>/logs/<name>-<id>.log`. Standard library only,
like kafka_broker.py. Used by tests/e2e/test_kafka_cluster_e2e.py, and by the node stack (stack.py node-up),
whose nodes also listen for pods on the node's address and serve SASL_SSL and mTLS (`Node.pod_listener`,
`Node.secure`), with the plugin trusting the receivers' CA (`Cluster.plugin_tls`); `up` is its idempotent
start, `status` its lines.
"""

from __future__ import annotations

import os
import signal
import struct
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import _proc
import kafka_broker

__all__ = [
    "Cluster",
    "ClusterMetadata",
    "Node",
    "PartitionState",
    "cluster_id",
    "configuration",
    "down",
    "metadata",
    "parse_metadata_v4",
    "quorum_voters",
    "rejoined",
    "start",
    "start_node",
    "status",
    "stop_node",
    "up",
]

HOST = kafka_broker.HOST


@dataclass(frozen=True)
class Node:
    """One combined broker+controller: its node id and its two listeners' ports."""

    node_id: int
    port: int
    controller_port: int
    prefix: str = "kafka"
    pod_listener: str | None = None
    """`host:port` of a PLAINTEXT listener for a node stack's pods, advertised as such."""
    secure: kafka_broker.SecureListeners | None = None
    """This node's SASL_SSL and mTLS listeners on loopback (and SASL_SSL for pods), each on ports of its own."""

    @property
    def name(self) -> str:
        """The daemon's name under the state directory (pid file, log, data)."""
        return f"{self.prefix}-{self.node_id}"

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"


def quorum_voters(nodes: Sequence[Node]) -> str:
    """`controller.quorum.voters`: `id@host:port` of every node's controller listener."""
    return ",".join(f"{n.node_id}@{HOST}:{n.controller_port}" for n in nodes)


@dataclass(frozen=True)
class Cluster:
    """What `start` needs to start (and restart) every node; `cluster_id` is shared by all of them."""

    state: Path
    nodes: tuple[Node, ...]
    telemetry_endpoint: str
    cluster_id: str
    version: str = kafka_broker.KAFKA_VERSION
    token_file: Path | None = None
    jvm: tuple[str, ...] = tuple(kafka_broker.HEAP)
    plugin_tls: kafka_broker.PluginTls | None = None
    """The plugin's CA (and client certificate) toward an https receiver, the same on every broker."""

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    @property
    def replication(self) -> int:
        return min(3, len(self.nodes))

    def node(self, node_id: int) -> Node:
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise KeyError(f"no node {node_id} in {[n.node_id for n in self.nodes]}")

    def log(self, node_id: int) -> Path:
        return self.state / "logs" / f"{self.node(node_id).name}.log"

    def running(self, node_id: int) -> bool:
        return _proc.is_running(self.state, self.node(node_id).name)

    def env(self) -> dict[str, str]:
        """What a stack's env file says about the cluster: every node's address, by listener (the secured
        listeners' other variables, the CA and the credentials' files, are the same for every node)."""
        env = {"KAFKA_BOOTSTRAP_SERVERS": self.bootstrap}
        secured = [n.secure for n in self.nodes if n.secure is not None]
        if secured:
            env.update(secured[0].env())
            env["KAFKA_SASL_SSL_BOOTSTRAP_SERVERS"] = ",".join(f"{HOST}:{s.sasl_ssl_port}" for s in secured)
            env["KAFKA_SSL_BOOTSTRAP_SERVERS"] = ",".join(f"{HOST}:{s.ssl_port}" for s in secured)
        return env


def cluster_id(state: Path, prefix: str = "kafka") -> str:
    """The cluster id of the nodes `<prefix>-<id>` in `state`, made once and kept in `<state>/<prefix>-cluster-id`:
    a node whose storage is formatted again (its directory removed) must join the same cluster."""
    path = state / f"{prefix}-cluster-id"
    if not path.exists():
        state.mkdir(parents=True, exist_ok=True)
        path.write_text(kafka_broker.new_cluster_id() + "\n")
    return path.read_text().strip()


class _BrokerArguments(TypedDict):
    """The arguments kafka_broker.configuration and kafka_broker.start share: what decides a node's file."""

    token_file: Path | None
    name: str
    port: int
    controller_port: int
    pod_listener: str | None
    version: str
    node_id: int
    voters: str
    replication: int
    secure: kafka_broker.SecureListeners | None
    plugin_tls: kafka_broker.PluginTls | None


def _broker_arguments(cluster: Cluster, node: Node) -> _BrokerArguments:
    """What kafka_broker.configuration and kafka_broker.start take for `node` (the configuration's part)."""
    return {"token_file": cluster.token_file, "name": node.name, "port": node.port,
            "controller_port": node.controller_port, "pod_listener": node.pod_listener, "version": cluster.version,
            "node_id": node.node_id, "voters": quorum_voters(cluster.nodes), "replication": cluster.replication,
            "secure": node.secure, "plugin_tls": cluster.plugin_tls}


def start_node(cluster: Cluster, node_id: int) -> Path:
    """Start one node (formatting its storage with the cluster id when new) without waiting; its log."""
    node = cluster.node(node_id)
    return kafka_broker.start(cluster.state, cluster.telemetry_endpoint, jvm=cluster.jvm,
                              cluster_id=cluster.cluster_id, **_broker_arguments(cluster, node))


def configuration(cluster: Cluster, node_id: int) -> str:
    """The server.properties node `node_id` starts with (kafka_broker.configuration)."""
    node = cluster.node(node_id)
    return kafka_broker.configuration(cluster.state, cluster.telemetry_endpoint, **_broker_arguments(cluster, node))


def _configured(cluster: Cluster, node: Node) -> bool:
    """Whether the running `node` was started with the configuration (and plugin jar) it would get now."""
    config = cluster.state / node.name / "server.properties"
    return config.exists() and config.read_text() == configuration(cluster, node.node_id)


def start(cluster: Cluster) -> None:
    """Start every node at once (a static quorum elects a leader only once a majority runs). The nodes
    format their storage in parallel: each format is a JVM start of its own, seconds on a busy machine."""
    kafka_broker.install(cluster.version)
    _each(cluster.nodes, lambda n: start_node(cluster, n.node_id))


def up(cluster: Cluster, *, timeout: float = 300.0) -> None:
    """Make the cluster run as configured and wait until it is whole (`rejoined`), each node's SCRAM user in
    place. Idempotent: a running node with the same configuration is left alone, one whose configuration or
    plugin jar changed is restarted. The nodes to start start together (a static quorum elects a leader only
    once a majority runs, so waiting for each node in turn would wait for ever on the first)."""
    kafka_broker.install(cluster.version)
    changed = [n for n in cluster.nodes if cluster.running(n.node_id) and not _configured(cluster, n)]
    if changed:
        with _proc.step(f"restart {', '.join(n.name for n in changed)} (configuration or plugin jar changed)"):
            _each(changed, lambda n: _proc.stop_daemon(cluster.state, n.name, timeout=30))
    stopped = [n for n in cluster.nodes if not cluster.running(n.node_id)]
    if stopped:
        with _proc.step(f"start Kafka {cluster.version} {', '.join(n.name for n in stopped)} ({cluster.bootstrap})"):
            _each(stopped, lambda n: start_node(cluster, n.node_id))
    first = stopped[0] if stopped else cluster.nodes[0]
    _proc.wait_until(lambda: rejoined(cluster), timeout=timeout, what=f"Kafka cluster {cluster.bootstrap}",
                     log=cluster.log(first.node_id),
                     alive=lambda: all(cluster.running(n.node_id) for n in cluster.nodes))
    for node in cluster.nodes:
        kafka_broker.ensure_scram_user(cluster.state, node.name, node.port, node.secure, cluster.version)


def _each(nodes: Sequence[Node], action: Callable[[Node], object]) -> None:
    """`action` on every node at once (each a JVM start or stop: seconds), raising the first failure."""
    with ThreadPoolExecutor(max_workers=len(nodes), thread_name_prefix="kafka-cluster") as pool:
        for done in [pool.submit(action, n) for n in nodes]:
            done.result()


def status(cluster: Cluster) -> list[str]:
    """One line per node (kafka_broker.status: running, its port, the plugin's endpoint, APIs 71/72)."""
    return [line for n in cluster.nodes for line in kafka_broker.status(cluster.state, name=n.name, port=n.port)]


def stop_node(cluster: Cluster, node_id: int, sig: signal.Signals = signal.SIGTERM, *,
              timeout: float = 60.0) -> float:
    """Send `sig` to the node's process group and wait until it is gone; the seconds that took.

    SIGTERM is a controlled shutdown (leadership moves away first), SIGKILL a crash. A node still running
    after `timeout` is killed, and that is an error: a controlled shutdown that hangs is a finding.
    """
    name = cluster.node(node_id).name
    pid = _proc.read_pid(cluster.state, name)
    if pid is None or not _proc.is_running(cluster.state, name):
        raise RuntimeError(f"{name} is not running")
    started = time.monotonic()
    os.killpg(pid, sig)
    node = cluster.node(node_id)
    # The pid's main thread is gone before the JVM's other threads and its sockets: wait for the ports too,
    # or a restart right after SIGKILL finds them taken.
    while _proc.is_running(cluster.state, name) or any(_proc.port_open(HOST, p, timeout=0.2)
                                                       for p in (node.port, node.controller_port)):
        if time.monotonic() - started > timeout:
            _proc.stop_daemon(cluster.state, name, timeout=1)
            raise RuntimeError(f"{name} still ran {timeout:.0f}s after {sig.name}; killed")
        time.sleep(0.1)  # the poll interval while the JVM exits
    return time.monotonic() - started


def down(cluster: Cluster) -> None:
    """Stop every node this cluster started (SIGTERM, then SIGKILL after 30 s), all at once: one after the
    other, the last node's broker waits for a controller quorum that is gone, for the whole 30 s."""
    _each(cluster.nodes, lambda n: _proc.stop_daemon(cluster.state, n.name, timeout=30))


# --- what a node says about the cluster: Metadata v4 for every topic ---

@dataclass(frozen=True)
class PartitionState:
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class ClusterMetadata:
    """One node's view: the brokers it lists (KRaft lists registered, unfenced brokers) and the partitions."""

    brokers: tuple[int, ...]
    controller: int
    partitions: tuple[PartitionState, ...]

    def under_replicated(self) -> tuple[PartitionState, ...]:
        return tuple(p for p in self.partitions if set(p.isr) != set(p.replicas))


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def number(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return int(value)

    def string(self) -> str | None:
        size = self.number(">h")
        if size < 0:
            return None
        value = self.data[self.at:self.at + size].decode()
        self.at += size
        return value

    def int32s(self) -> tuple[int, ...]:
        return tuple(self.number(">i") for _ in range(self.number(">i")))


def parse_metadata_v4(body: bytes) -> ClusterMetadata:
    """Metadata response v4 (non-flexible): brokers, cluster id, controller, topics with their partitions."""
    r = _Reader(body)
    r.number(">i")  # throttle_time_ms
    brokers = []
    for _ in range(r.number(">i")):
        brokers.append(r.number(">i"))
        r.string()  # host
        r.number(">i")  # port
        r.string()  # rack
    r.string()  # cluster id
    controller = r.number(">i")
    partitions = []
    for _ in range(r.number(">i")):
        r.number(">h")  # topic error code
        topic = r.string() or ""
        r.number(">b")  # is_internal
        for _ in range(r.number(">i")):
            r.number(">h")  # partition error code
            index, leader = r.number(">i"), r.number(">i")
            partitions.append(PartitionState(topic, index, leader, r.int32s(), r.int32s()))
    return ClusterMetadata(tuple(sorted(brokers)), controller, tuple(partitions))


def metadata(node: Node) -> ClusterMetadata:
    """What `node` answers to Metadata v4 for every topic (no auto-creation)."""
    return parse_metadata_v4(kafka_broker.request(HOST, node.port, 3, 4, struct.pack(">ib", -1, 0)))


def rejoined(cluster: Cluster) -> bool:
    """Whether the cluster is whole: every node answers, lists every broker, and no partition is
    under-replicated (a rolling restart's next step waits for this, or it may take a partition's
    last in-sync replica but one away)."""
    wanted = tuple(sorted(n.node_id for n in cluster.nodes))
    for node in cluster.nodes:
        try:
            seen = metadata(node)
        except (OSError, struct.error):
            return False
        if seen.brokers != wanted or seen.under_replicated():
            return False
    return True
