"""The steps of a TelemetryReceiver reconcile, each alone: the pure plan, apply, prune, topic.

`test_receiver_reconcile.py` drives the whole reconcile; these pin what each step decides, so a change
to one step shows up in its own test."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from kct.api.subscription import KafkaConnection
from kct.controller.children import InMemoryChildren
from kct.controller.conditions import Reason
from kct.controller.kernel import NO_DEFAULT_CLUSTER, SecretMissing
from kct.controller.telemetry_receiver import (
    ReceiverResource,
    StopReconcile,
    apply_children,
    parse_spec,
    plan_receiver,
    prune_children,
    resolve_kafka_secret_version,
    resolve_token,
    sync_topic,
)
from kct.kafka.errors import InvalidClientMetricsConfigError
from kct.kafka.fake import InMemoryTopicAdmin
from kct.kafka.topics import TopicAdmin
from kct.render.names import CONFIG_HASH_ANNOTATION


def resource(spec: dict[str, Any], uid: str = "uid-1") -> ReceiverResource:
    return ReceiverResource("ns", "tr", uid, 3, spec, {}, {})


def plan_for(spec: dict[str, Any], token: str | None = "t0k3n") -> Any:
    res = resource(spec)
    parsed, bootstrap = parse_spec(res, "default:9092")
    return plan_receiver(res, parsed, bootstrap, token)


def test_the_plan_is_built_without_io_and_carries_the_renderers_decisions() -> None:
    """Given a spec with a fixed replica count, When the plan is built (no client at all), Then it holds
    every child once, the Deployment's replicas, and the config hash the pods carry."""
    plan = plan_for({"replicas": 3, "topic": {"name": "raw"}})
    kinds = [m["kind"] for m in plan.children]
    assert len(kinds) == len(set(kinds)) and "Deployment" in kinds and "ConfigMap" in kinds
    assert plan.wanted_replicas == 3
    annotations = plan.manifest("Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert plan.config_hash == annotations[CONFIG_HASH_ANNOTATION] != ""
    assert plan.bootstrap == "default:9092"
    assert ("Deployment", "tr-receiver") in plan.wanted


def test_an_autoscaled_plan_leaves_the_replica_count_to_the_hpa() -> None:
    """Given autoscaling, Then the plan wants no fixed replicas (the HPA owns the count) and has an HPA."""
    plan = plan_for({"autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 5}})
    assert plan.wanted_replicas is None
    assert plan.manifest("HorizontalPodAutoscaler")


def test_parse_spec_names_the_field_and_stops_without_retry() -> None:
    """Given a spec with a wrong type, Then parsing stops with InvalidSpec naming the field, no retry."""
    with pytest.raises(StopReconcile) as stopped:
        parse_spec(resource({"replicas": "two"}), "default:9092")
    assert stopped.value.reason is Reason.INVALID_SPEC
    assert "spec.replicas" in stopped.value.message and stopped.value.retry_scale is None


def test_parse_spec_without_any_cluster_is_a_connection_problem() -> None:
    with pytest.raises(StopReconcile) as stopped:
        parse_spec(resource({}), None)
    assert stopped.value.reason is Reason.KAFKA_CONNECTION_INVALID
    # Worded and retried as the subscription controller's (its admin pool raises the same ConnectionProblem).
    assert stopped.value.message == f"spec.kafka: {NO_DEFAULT_CLUSTER}" and stopped.value.retry_scale == 5.0


def test_the_generated_token_is_read_back_and_only_made_when_missing() -> None:
    """Given auth with a generated Secret, Then the token is made once and later read from the Secret;
    Given the user's own Secret, Then no token is generated."""
    kube = InMemoryChildren()
    res = resource({})
    spec, _ = parse_spec(res, "default:9092")
    assert resolve_token(res, spec, kube, lambda: "first") == "first"
    apply_children(plan_receiver(res, spec, "default:9092", "first"), kube)
    assert resolve_token(res, spec, kube, lambda: "second") == "first"
    own = {"receiver": {"auth": {"enabled": True, "tokenSecretRef": {"name": "mine", "key": "t"}}}}
    spec_own, _ = parse_spec(resource(own), "default:9092")
    assert resolve_token(resource(own), spec_own, kube, lambda: "never") is None


def test_apply_skips_only_the_spark_objects_when_the_spark_operator_is_missing() -> None:
    """Given no spark-operator CRDs, Then every other child is applied and the Spark gap is reported."""
    kube = InMemoryChildren(missing_kinds={"SparkApplication", "ScheduledSparkApplication"})
    applied = apply_children(plan_for({"aggregation": {}}), kube)
    assert applied.spark_missing and "SparkApplication" not in applied.bodies
    assert "Deployment" in applied.bodies


def test_apply_stops_with_a_retry_when_the_api_server_refuses_a_child() -> None:
    kube = InMemoryChildren(refuse_kinds={"Service": "port 4318 is taken"})
    with pytest.raises(StopReconcile) as stopped:
        apply_children(plan_for({}), kube)
    assert stopped.value.reason is Reason.APPLY_FAILED and stopped.value.retry_scale == 1.0
    assert "port 4318 is taken" in stopped.value.message


def test_prune_deletes_only_our_children_that_the_plan_no_longer_wants() -> None:
    """Given children of an autoscaled receiver and a foreign object with our labels, When autoscaling
    is turned off, Then the HPA is pruned (with an event) and the foreign object is kept."""
    kube = InMemoryChildren()
    res = resource({})
    apply_children(plan_for({"autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 2}}), kube)
    foreign = dict(plan_for({}).manifest("ConfigMap"))
    foreign["metadata"] = {**foreign["metadata"], "name": "someone-elses", "ownerReferences": []}
    kube.apply(foreign)
    events = prune_children(res, plan_for({}), kube)
    assert kube.deleted == [("HorizontalPodAutoscaler", "tr-receiver")]
    assert [e.reason for e in events] == ["Pruned"]
    assert ("ConfigMap", "ns", "someone-elses") in kube.objects


def admin_of(kafka: InMemoryTopicAdmin) -> Any:
    def admin_for(connection: KafkaConnection | None, namespace: str) -> TopicAdmin:
        return kafka

    return admin_for


def test_sync_topic_creates_then_grows_but_never_shrinks() -> None:
    kafka = InMemoryTopicAdmin()
    created = sync_topic(plan_for({"topic": {"name": "raw", "partitions": 2}}), admin_of(kafka), "ns")
    assert created.partitions == 2 and [e.reason for e in created.events] == ["TopicCreated"]
    grown = sync_topic(plan_for({"topic": {"name": "raw", "partitions": 4}}), admin_of(kafka), "ns")
    assert grown.partitions == 4 and [e.reason for e in grown.events] == ["PartitionsAdded"]
    kept = sync_topic(plan_for({"topic": {"name": "raw", "partitions": 1}}), admin_of(kafka), "ns")
    assert kept.partitions == 4 and kept.plan.shrink_refused == (4, 1) and kept.events == ()
    assert kafka.topics["raw"].partitions == 4


def test_sync_topic_stops_without_a_warning_while_kafka_is_unreachable() -> None:
    """Given a broker that cannot be reached, Then the step stops with KafkaUnreachable, TopicReady=False,
    a retry, and no Warning event (an outage is retried, not announced on every try)."""
    kafka = InMemoryTopicAdmin()
    kafka.unreachable = True
    with pytest.raises(StopReconcile) as stopped:
        sync_topic(plan_for({"topic": {"name": "raw"}}), admin_of(kafka), "ns")
    assert stopped.value.reason is Reason.KAFKA_UNREACHABLE
    assert stopped.value.also == "TopicReady" and not stopped.value.warn and stopped.value.retry_scale == 1.0
    assert kafka.topics == {}


class RefusingTopicAdmin(InMemoryTopicAdmin):
    """A broker whose topic policy refuses the topic (a PolicyViolation, as kafka-python reports it)."""

    def create_topic(
        self, name: str, partitions: int, replication_factor: int | None, configs: Mapping[str, str]
    ) -> None:
        raise InvalidClientMetricsConfigError(f"[Error 44] PolicyViolationError: topic {name} refused")


def test_sync_topic_stops_a_refused_topic_with_a_warning_and_no_retry() -> None:
    """Given a broker refusing the topic, Then KafkaRejected naming spec.topic, TopicReady=False, a Warning, and
    no retry: the spec (or the broker's policy) must change first, and the periodic resync looks again."""
    with pytest.raises(StopReconcile) as stopped:
        sync_topic(plan_for({"topic": {"name": "raw"}}), admin_of(RefusingTopicAdmin()), "ns")
    assert stopped.value.reason is Reason.KAFKA_REJECTED and stopped.value.message.startswith("spec.topic: ")
    assert stopped.value.also == "TopicReady" and stopped.value.warn and stopped.value.retry_scale is None


def test_sync_topic_stops_a_missing_connection_secret_with_a_warning_and_a_slow_retry() -> None:
    """Given spec.kafka's Secret missing, Then KafkaConnectionInvalid naming spec.kafka, TopicReady=False (the
    topic could not be checked), a Warning (a human must act), and a slow retry."""

    def admin_for(connection: KafkaConnection | None, namespace: str) -> TopicAdmin:
        raise SecretMissing("secretRef: Secret ns/kafka not found")

    with pytest.raises(StopReconcile) as stopped:
        sync_topic(plan_for({"topic": {"name": "raw"}}), admin_for, "ns")
    assert stopped.value.reason is Reason.KAFKA_CONNECTION_INVALID
    assert stopped.value.message == "spec.kafka: secretRef: Secret ns/kafka not found"
    assert stopped.value.also == "TopicReady" and stopped.value.warn and stopped.value.retry_scale == 5.0


def test_sync_topic_creates_with_the_spec_replication_and_min_isr_and_says_so() -> None:
    """Given 3 brokers and replicationFactor 3 / minInsyncReplicas 3, When synced, Then the topic is created
    with them, and the TopicCreated event says how durable it is."""
    kafka = InMemoryTopicAdmin(brokers=3)
    spec = {"topic": {"name": "raw", "replicationFactor": 3, "minInsyncReplicas": 3}}
    created = sync_topic(plan_for(spec), admin_of(kafka), "ns")
    assert kafka.topics["raw"].replication_factor == 3 and kafka.topics["raw"].configs["min.insync.replicas"] == "3"
    assert "3 replicas each and min.insync.replicas=3" in created.events[0].message


def test_sync_topic_stops_a_topic_the_brokers_cannot_hold_before_asking_the_broker() -> None:
    """Given 2 brokers and minInsyncReplicas 3 without replicationFactor (the default is then 2), Then the step
    stops with ReplicationUnsatisfiable naming spec.topic.minInsyncReplicas, TopicReady=False, a Warning, no
    retry, and nothing was sent to create it."""
    kafka = InMemoryTopicAdmin(brokers=2)
    with pytest.raises(StopReconcile) as stopped:
        sync_topic(plan_for({"topic": {"name": "raw", "minInsyncReplicas": 3}}), admin_of(kafka), "ns")
    assert stopped.value.reason is Reason.REPLICATION_UNSATISFIABLE
    assert stopped.value.message.startswith("spec.topic.minInsyncReplicas: 3 is above the replication factor 2")
    assert stopped.value.also == "TopicReady" and stopped.value.warn and stopped.value.retry_scale is None
    assert kafka.calls == []


def test_a_changed_kafka_secret_rolls_the_pods_that_read_it_at_start() -> None:
    """Given spec.kafka.secretRef and that Secret in the namespace, When its resourceVersion changes, Then the
    receiver pods' and the Spark driver's config hashes change (they read the Secret once, at start); a
    receiver without a Secret resolves no version, and its hash ignores one."""
    spec = {"kafka": {"bootstrapServers": "k:9093", "secretRef": {"name": "kafka-client"}},
            "aggregation": {"enabled": True}}
    res = resource(spec)
    parsed, bootstrap = parse_spec(res, None)
    children = InMemoryChildren()
    assert resolve_kafka_secret_version(res, parsed, children) is None  # not there yet: the topic step says so
    hashes = []
    for version in ("100", "101"):
        children.objects[("Secret", "ns", "kafka-client")] = {"metadata": {"name": "kafka-client",
                                                                          "resourceVersion": version}}
        resolved = resolve_kafka_secret_version(res, parsed, children)
        assert resolved == version
        plan = plan_receiver(res, parsed, bootstrap, "t0k3n", kafka_secret_version=resolved)
        pod = plan.manifest("Deployment")["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH_ANNOTATION]
        driver = plan.manifest("SparkApplication")["spec"]["driver"]["annotations"][CONFIG_HASH_ANNOTATION]
        hashes.append((pod, driver))
    assert hashes[0][0] != hashes[1][0] and hashes[0][1] != hashes[1][1]
    plain = resource({"topic": {"name": "raw"}})
    plain_spec, plain_bootstrap = parse_spec(plain, "default:9092")
    assert resolve_kafka_secret_version(plain, plain_spec, children) is None
    assert plan_receiver(plain, plain_spec, plain_bootstrap, "t0k3n", kafka_secret_version="100").config_hash == \
        plan_for({"topic": {"name": "raw"}}).config_hash  # a version without a Secret named changes nothing
