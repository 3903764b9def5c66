"""End to end on a real broker: the output topic's replication and min ISR, and the offsets retention takes
from the aggregation (issue 44, part 6).

One KRaft node of the newest release the plugin supports, a loopback process on free ports
(dev/stack/kafka_cluster.py; no shared stack). The operator's topic step runs with the real admin
(kct.kafka.kafka_python) against it; the aggregation job runs as `kct aggregate` in local mode, and the
broker's DeleteRecords (what retention does to a log's head) removes offsets between two of its runs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aggregation_support import produce, run_aggregation, write_config
from helpers import free_port
from kafka_cluster_support import QUICK_JVM, RELEASE, kafka_broker, kafka_cluster
from waiting import eventually

from kct.aggregation.synthetic import SyntheticClient
from kct.controller.children import InMemoryChildren
from kct.controller.telemetry_receiver import ReceiverResource, reconcile_receiver
from kct.kafka.kafka_python import KafkaPythonTopicAdmin

pytestmark = [pytest.mark.e2e]

S = 1_000_000_000


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One broker+controller node, up and listing itself."""
    workdir = tmp_path_factory.mktemp("durability")
    nodes = (kafka_cluster.Node(1, free_port(), free_port()),)
    cluster = kafka_cluster.Cluster(workdir, nodes, f"http://127.0.0.1:{free_port()}/v1/metrics",
                                    kafka_broker.new_cluster_id(), version=RELEASE.version, jvm=QUICK_JVM)
    try:
        kafka_cluster.start(cluster)
        eventually(lambda: kafka_cluster.rejoined(cluster), timeout=180, interval=0.5,
                   what=f"a Kafka {RELEASE.version} node up (logs: {workdir / 'logs'})")
        yield cluster.bootstrap
    finally:
        kafka_cluster.down(cluster)


def reconcile(admin: KafkaPythonTopicAdmin, spec: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    resource = ReceiverResource("ns", "tr", "uid-1", 1, spec, {}, status)
    outcome = reconcile_receiver(resource, InMemoryChildren(), lambda connection, namespace: admin,
                                 default_bootstrap=admin.bootstrap_servers, new_token=lambda: "token")
    return {**status, **outcome.status}


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == type_)


def test_the_topic_gets_the_replication_the_broker_count_allows_and_its_min_isr_back(bootstrap: str) -> None:
    """Given one broker, When a TelemetryReceiver asks for 2 replicas, Then no topic is made and Ready/TopicReady
    say ReplicationUnsatisfiable naming spec.topic.replicationFactor; When it asks for nothing, Then the topic
    is made with 1 replica and min.insync.replicas=1 as the broker describes it; When someone sets
    min.insync.replicas=2 on the broker, Then the next reconcile puts 1 back."""
    admin = KafkaPythonTopicAdmin(bootstrap)
    topic = f"kct-durability-{free_port()}"
    try:
        assert admin.broker_count() == 1
        status = reconcile(admin, {"topic": {"name": topic, "replicationFactor": 2}}, {})
        ready = condition(status, "Ready")
        assert (ready["status"], ready["reason"]) == ("False", "ReplicationUnsatisfiable")
        assert ready["message"].startswith("spec.topic.replicationFactor: 2 is above the cluster's 1 broker(s)")
        assert condition(status, "TopicReady")["status"] == "False" and admin.describe_topic(topic) is None

        status = reconcile(admin, {"topic": {"name": topic, "partitions": 2}}, status)
        described = admin.describe_topic(topic)
        assert described is not None and described.replication_factor == 1
        assert described.configs["min.insync.replicas"] == "1"
        assert (status["topic"]["replicationFactor"], status["topic"]["minInsyncReplicas"]) == (1, 1)

        def min_isr() -> str:
            return (admin.describe_topic(topic) or described).configs["min.insync.replicas"]

        # A config change reaches the broker's described configs a moment after the alter answers: wait for it.
        admin.alter_topic_configs(topic, {"min.insync.replicas": "2"})
        eventually(lambda: min_isr() == "2", timeout=30, interval=0.2, what="min.insync.replicas=2 on the broker")
        reconcile(admin, {"topic": {"name": topic, "partitions": 2}}, status)
        eventually(lambda: min_isr() == "1", timeout=30, interval=0.2, what="min.insync.replicas=1 put back")
    finally:
        admin.delete_topic(topic)
        admin.close()


@pytest.mark.spark
def test_the_aggregation_counts_the_offsets_retention_deleted_before_it_read_them(
        bootstrap: str, tmp_path: Path) -> None:
    """Given a one-partition topic the stream drained (offsets 0-19), When 10 more pushes land and the broker
    deletes the log up to offset 28 (as retention does) before the job runs again, Then that run reads on from
    28 and its driver logs at WARNING that 8 offsets were skipped, 8 since the checkpoint began."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"kct-retention-{free_port()}"
    confluent = AdminClient({"bootstrap.servers": bootstrap})
    confluent.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    client = SyntheticClient("p-0", started_ns=time.time_ns() - 600 * S, seed=1)
    begin = time.time_ns() - 300 * S
    produce(bootstrap, topic, [client.push(begin + k * S) for k in range(20)])
    config = write_config(tmp_path / "job.yaml", topic, tmp_path / "out", mode="stream")
    first = run_aggregation(bootstrap, config)
    assert "offsets skipped" not in first

    produce(bootstrap, topic, [client.push(begin + (20 + k) * S) for k in range(10)])
    deleted = confluent.delete_records([TopicPartition(topic, 0, 28)])
    next(iter(deleted.values())).result(timeout=30)
    second = run_aggregation(bootstrap, config)
    assert ("8 offsets skipped, deleted by the topic's retention before the job read them (partition 0: 8); "
            "8 since the checkpoint began") in second, second[-4000:]
    confluent.delete_topics([topic])[topic].result(timeout=30)
