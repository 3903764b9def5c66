"""dev/stack/kafka_cluster.py's pure parts: the quorum string, a node's server.properties, Metadata v4 parsing."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "dev" / "stack"))
import kafka_broker  # (dev/stack is not a package)
import kafka_cluster

NODES = tuple(kafka_cluster.Node(i, 30000 + i, 31000 + i) for i in (1, 2, 3))


def _properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_quorum_voters_list_every_node_controller_listener() -> None:
    """Given three nodes, Then the voters string names each node id at its controller port, in node order."""
    assert kafka_cluster.quorum_voters(NODES) == "1@127.0.0.1:31001,2@127.0.0.1:31002,3@127.0.0.1:31003"


def test_node_names_and_bootstrap_are_per_node(tmp_path: Path) -> None:
    """Given a cluster of three, Then each node has its own daemon name and log, and the bootstrap lists all."""
    cluster = kafka_cluster.Cluster(tmp_path, NODES, "http://e", "id")
    assert [n.name for n in cluster.nodes] == ["kafka-1", "kafka-2", "kafka-3"]
    assert cluster.log(2) == tmp_path / "logs" / "kafka-2.log"
    assert cluster.bootstrap == "127.0.0.1:30001,127.0.0.1:30002,127.0.0.1:30003"
    assert cluster.replication == 3


def test_server_properties_of_node_2_join_the_static_quorum_with_replication_3(tmp_path: Path) -> None:
    """Given node 2 of three, Then it is node.id 2 listening on its own ports, votes in a quorum of all three,
    and Kafka's internal topics get three replicas with two in sync required."""
    node = NODES[1]
    props = _properties(kafka_broker._server_properties(
        tmp_path, "http://e", node.port, node.controller_port, False, None, node_id=2,
        voters=kafka_cluster.quorum_voters(NODES), replication=3))
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == kafka_cluster.quorum_voters(NODES)
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:30002,CONTROLLER://127.0.0.1:31002"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:30002"
    assert props["offsets.topic.replication.factor"] == "3"
    assert props["transaction.state.log.min.isr"] == "2"
    assert (props["default.replication.factor"], props["min.insync.replicas"]) == ("3", "2")


def test_a_single_node_keeps_its_configuration(tmp_path: Path) -> None:
    """Given the defaults (the stack's one node), Then it is node 1 voting alone, replication 1, and no cluster
    setting appears (a changed server.properties would restart a running stack's broker)."""
    props = _properties(kafka_broker._server_properties(tmp_path, "http://e", 19092, 19093, False, None))
    assert (props["node.id"], props["controller.quorum.voters"]) == ("1", "1@127.0.0.1:19093")
    assert props["offsets.topic.replication.factor"] == "1"
    assert "min.insync.replicas" not in props and "default.replication.factor" not in props


def _string(value: str | None) -> bytes:
    if value is None:
        return struct.pack(">h", -1)
    return struct.pack(">h", len(value)) + value.encode()


def _int32s(values: tuple[int, ...]) -> bytes:
    return struct.pack(">i", len(values)) + b"".join(struct.pack(">i", v) for v in values)


def test_metadata_v4_gives_brokers_controller_and_under_replicated_partitions() -> None:
    """Given a Metadata v4 response with brokers 3, 1 and a topic whose partition 1 lacks broker 3 in its ISR,
    Then the parse lists brokers sorted, the controller, and exactly that partition as under-replicated."""
    brokers = b"".join(struct.pack(">i", i) + _string("127.0.0.1") + struct.pack(">i", 9000 + i) + _string(None)
                       for i in (3, 1))
    partitions = [(0, 1, (1, 3), (1, 3)), (1, 3, (3, 1), (1,))]
    topic = (struct.pack(">h", 0) + _string("t") + struct.pack(">b", 0) + struct.pack(">i", len(partitions))
             + b"".join(struct.pack(">hii", 0, index, leader) + _int32s(replicas) + _int32s(isr)
                        for index, leader, replicas, isr in partitions))
    body = (struct.pack(">i", 0) + struct.pack(">i", 2) + brokers + _string("cid") + struct.pack(">i", 3)
            + struct.pack(">i", 1) + topic)
    seen = kafka_cluster.parse_metadata_v4(body)
    assert (seen.brokers, seen.controller) == ((1, 3), 3)
    assert [(p.topic, p.partition, p.leader) for p in seen.partitions] == [("t", 0, 1), ("t", 1, 3)]
    assert seen.under_replicated() == (kafka_cluster.PartitionState("t", 1, 3, (3, 1), (1,)),)


def test_the_cluster_id_is_made_once_per_state_directory(tmp_path: Path) -> None:
    """Given a state directory, When its cluster id is asked for twice, Then it is the same Kafka Uuid (a node
    formatted again joins the same cluster), and another directory gets another one."""
    first = kafka_cluster.cluster_id(tmp_path / "a")
    assert kafka_cluster.cluster_id(tmp_path / "a") == first and len(first) == 22
    assert kafka_cluster.cluster_id(tmp_path / "b") != first


def test_a_cluster_without_secured_listeners_names_only_its_plaintext_bootstrap(tmp_path: Path) -> None:
    """Given the loopback test cluster (no secured listeners), Then its env is the bootstrap list alone."""
    assert kafka_cluster.Cluster(tmp_path, NODES, "http://e", "id").env() == {
        "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:30001,127.0.0.1:30002,127.0.0.1:30003"}
