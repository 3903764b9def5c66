"""Reconciling a TelemetryReceiver against in-memory Kubernetes and Kafka: children, pruning, topic,
status, and every failure path, without a cluster."""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any

import pytest
from cryptography import x509

from kct.api.subscription import KafkaConnection
from kct.api.telemetry_receiver import TelemetryReceiverStatus
from kct.controller.children import InMemoryChildren
from kct.controller.kernel import Outcome
from kct.controller.telemetry_receiver import ReceiverResource, delete_receiver, reconcile_receiver
from kct.kafka.fake import InMemoryTopicAdmin
from kct.kafka.topics import TopicAdmin, TopicState

NOW = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.UTC)
AVAILABLE = {
    "observedGeneration": 1,
    "replicas": 2,
    "readyReplicas": 2,
    "availableReplicas": 2,
    "updatedReplicas": 2,
    "conditions": [{"type": "Available", "status": "True"}],
}
NOT_STARTED = {
    "observedGeneration": 1,
    "replicas": 2,
    "updatedReplicas": 2,
    "unavailableReplicas": 2,
    "conditions": [{"type": "Available", "status": "False"}],
}


class World:
    """A namespace with a fake API server and a fake Kafka cluster."""

    def __init__(self, deployment_status: dict[str, Any] | None = None) -> None:
        self.kube = InMemoryChildren(deployment_status=dict(deployment_status or AVAILABLE))
        self.kafka = InMemoryTopicAdmin()
        self.status: dict[str, Any] = {}
        self.connections: list[KafkaConnection | None] = []

    def admin_for(self, connection: KafkaConnection | None, namespace: str) -> TopicAdmin:
        self.connections.append(connection)
        return self.kafka

    def resource(self, spec: dict[str, Any], *, generation: int = 1, paused: bool = False) -> ReceiverResource:
        annotations = {"telemetry.kct.dev/paused": "true"} if paused else {}
        return ReceiverResource("ns", "tr", "uid-1", generation, spec, annotations, dict(self.status))

    def reconcile(self, spec: dict[str, Any], **kwargs: Any) -> Outcome:
        resource = self.resource(spec, generation=kwargs.pop("generation", 1), paused=kwargs.pop("paused", False))
        outcome = reconcile_receiver(
            resource,
            self.kube,
            self.admin_for,
            default_bootstrap="default:9092",
            now=kwargs.pop("now", NOW),
            new_token=lambda: "fresh-token",
            **kwargs,
        )
        # What the controller writes must fit the CRD's status schema (extra fields would be pruned silently).
        TelemetryReceiverStatus.model_validate(outcome.status)
        self.status.update(outcome.status)
        return outcome

    def condition(self, type_: str = "Ready") -> dict[str, Any]:
        return next((c for c in self.status.get("conditions", []) if c["type"] == type_), {})

    def kinds(self) -> set[str]:
        return {kind for kind, _, _ in self.kube.objects}


def test_ready_when_the_deployment_is_available_and_the_topic_exists() -> None:
    """Given a cluster whose Deployment controller reports all pods available, When a receiver is
    reconciled, Then every child exists, the topic is created with the requested partitions and retention,
    and Ready=True with the endpoint, replicas and topic in status."""
    world = World(AVAILABLE)
    world.reconcile({"topic": {"name": "raw", "partitions": 4, "retentionMs": 1000}, "aggregation": {}})
    assert world.kinds() == {
        "ConfigMap", "Secret", "ServiceAccount", "Role", "RoleBinding", "Deployment", "Service", "PodDisruptionBudget",
        "NetworkPolicy", "SparkApplication",
    }
    assert world.kafka.topics["raw"] == TopicState("raw", 4, 1, {"retention.ms": "1000", "min.insync.replicas": "1"})
    ready = world.condition()
    assert (ready["status"], ready["reason"], ready["observedGeneration"]) == ("True", "Reconciled", 1)
    assert world.status["endpoint"] == "https://tr-receiver.ns.svc:4318/v1/metrics"
    assert (world.status["replicas"], world.status["readyReplicas"]) == (2, 2)
    assert world.status["topic"] == {
        "name": "raw",
        "partitions": 4,
        "requestedPartitions": 4,
        "bootstrapServers": "default:9092",
        "replicationFactor": 1,
        "requestedReplicationFactor": 1,
        "minInsyncReplicas": 1,
        "brokers": 1,
    }
    assert world.status["tokenSecret"] == "tr-token/token"
    assert world.condition("TopicReady")["status"] == "True"


def test_pods_that_never_start_leave_ready_false_with_a_progressing_reason() -> None:
    """Given a cluster without nodes (pods never become available), When reconciled, Then Ready=False with
    reason RolloutInProgress (which Argo CD and kstatus read as progressing) and a message saying so."""
    world = World(NOT_STARTED)
    outcome = world.reconcile({})
    ready = world.condition()
    assert (ready["status"], ready["reason"]) == ("False", "RolloutInProgress")
    assert "0/2 pods available" in ready["message"]
    assert outcome.retry_after is None and world.status["readyReplicas"] == 0


def test_generated_token_is_kept_across_reconciles() -> None:
    """Given a generated token Secret, When reconciled again (e.g. after an operator restart), Then the
    token is not regenerated."""
    world = World()
    world.reconcile({})
    first = world.kube.objects[("Secret", "ns", "tr-token")]["data"]["token"]
    outcome = reconcile_receiver(
        world.resource({}), world.kube, world.admin_for, default_bootstrap="d:9092", new_token=lambda: "another"
    )
    assert world.kube.objects[("Secret", "ns", "tr-token")]["data"]["token"] == first
    assert outcome.error is None


def test_children_no_longer_desired_are_pruned_but_foreign_objects_are_not() -> None:
    """Given a receiver with an HPA and a token Secret, When autoscaling is disabled and a tokenSecretRef is
    set, Then the HPA and the generated Secret are deleted; an object with our labels but another owner
    stays."""
    world = World()
    world.reconcile({"autoscaling": {"minReplicas": 1, "maxReplicas": 3}})
    assert "HorizontalPodAutoscaler" in world.kinds()
    foreign = dict(world.kube.objects[("ConfigMap", "ns", "tr-receiver")])
    foreign["metadata"] = {**foreign["metadata"], "name": "not-mine", "ownerReferences": [{"uid": "other"}]}
    world.kube.objects[("ConfigMap", "ns", "not-mine")] = foreign
    outcome = world.reconcile(
        {"autoscaling": {"enabled": False}, "receiver": {"auth": {"tokenSecretRef": {"name": "mine"}}}}
    )
    assert ("HorizontalPodAutoscaler", "tr-receiver") in world.kube.deleted
    assert ("Secret", "tr-token") in world.kube.deleted
    assert ("ConfigMap", "ns", "not-mine") in world.kube.objects
    assert any(e.reason == "Pruned" for e in outcome.events)


def test_deleted_child_is_recreated_on_the_next_reconcile() -> None:
    """Given a reconciled receiver whose Service was deleted by hand, When reconciled (resync), Then the
    Service is back."""
    world = World()
    world.reconcile({})
    del world.kube.objects[("Service", "ns", "tr-receiver")]
    world.reconcile({})
    assert ("Service", "ns", "tr-receiver") in world.kube.objects


def test_partition_shrink_is_reported_not_attempted() -> None:
    """Given a topic with 6 partitions, When the spec asks for 3, Then the topic keeps 6, a
    PartitionsShrinkRefused condition and one Warning event name the field; When 8, Then it grows."""
    world = World()
    world.reconcile({"topic": {"partitions": 6}})
    outcome = world.reconcile({"topic": {"partitions": 3}}, generation=2)
    assert world.kafka.topics["client-telemetry"].partitions == 6
    shrink = world.condition("PartitionsShrinkRefused")
    assert shrink["status"] == "True" and "spec.topic.partitions: 3" in shrink["message"]
    assert [e.reason for e in outcome.events] == ["PartitionsShrinkRefused"]
    assert world.reconcile({"topic": {"partitions": 3}}, generation=2).events == ()  # no repeat on resync
    world.reconcile({"topic": {"partitions": 8}}, generation=3)
    assert world.kafka.topics["client-telemetry"].partitions == 8
    assert world.condition("PartitionsShrinkRefused")["status"] == "False"


def test_a_default_topic_on_three_brokers_is_durable_and_its_min_isr_drift_is_put_back() -> None:
    """Given a 3-broker cluster and no replication in the spec, When reconciled, Then the topic has 3 replicas
    and min.insync.replicas=2, shown in status with ReplicationFactorDiffers=False; When someone lowers the
    min ISR to 1 on the broker, Then the next reconcile (resync) sets 2 again."""
    world = World()
    world.kafka.brokers = 3
    world.reconcile({"topic": {"name": "raw"}})
    topic = world.kafka.topics["raw"]
    assert (topic.replication_factor, topic.configs["min.insync.replicas"]) == (3, "2")
    assert {k: world.status["topic"][k] for k in ("replicationFactor", "minInsyncReplicas", "brokers")} == {
        "replicationFactor": 3, "minInsyncReplicas": 2, "brokers": 3}
    assert world.condition("ReplicationFactorDiffers")["status"] == "False"
    world.kafka.alter_topic_configs("raw", {"min.insync.replicas": "1"})
    world.reconcile({"topic": {"name": "raw"}})
    assert world.kafka.topics["raw"].configs["min.insync.replicas"] == "2"
    assert world.status["topic"]["minInsyncReplicas"] == 2


def test_more_replicas_than_brokers_is_a_condition_naming_the_field_not_a_crash() -> None:
    """Given one broker and replicationFactor 3, When reconciled, Then no topic is created, Ready and TopicReady
    are False with ReplicationUnsatisfiable naming spec.topic.replicationFactor and the rule, one Warning
    event (not repeated on resync), no quick retry, and the children are applied all the same."""
    world = World()
    spec = {"topic": {"name": "raw", "replicationFactor": 3}}
    outcome = world.reconcile(spec)
    assert world.kafka.topics == {} and "Deployment" in world.kinds()
    for type_ in ("Ready", "TopicReady"):
        condition = world.condition(type_)
        assert (condition["status"], condition["reason"]) == ("False", "ReplicationUnsatisfiable")
        assert condition["message"].startswith("spec.topic.replicationFactor: 3 is above the cluster's 1 broker(s);")
    # the first reconcile also issues the default TLS certificates (CA and serving)
    assert [e.reason for e in outcome.events] == ["CertificateIssued", "CertificateIssued", "ReplicationUnsatisfiable"]
    assert outcome.retry_after is None
    assert world.reconcile(spec).events == ()
    world.kafka.brokers = 3  # brokers added: the next resync creates it
    world.reconcile(spec)
    assert world.kafka.topics["raw"].replication_factor == 3 and world.condition()["status"] == "True"


def test_an_existing_topics_other_replication_is_reported_in_status_once() -> None:
    """Given a topic made with 1 replica on what is now a 3-broker cluster, When reconciled with the defaults,
    Then the topic keeps 1 replica and min ISR 1 (2 would block every write), Ready stays True, status.topic
    shows has 1 / asked 3, and ReplicationFactorDiffers=True names the field and the rule, warned once."""
    world = World()
    world.kafka.topics["raw"] = TopicState("raw", 6, 1, {})
    world.kafka.brokers = 3
    outcome = world.reconcile({"topic": {"name": "raw", "partitions": 6}})
    assert world.kafka.topics["raw"] == TopicState("raw", 6, 1, {"min.insync.replicas": "1"})
    assert world.condition()["status"] == "True"
    assert (world.status["topic"]["replicationFactor"], world.status["topic"]["requestedReplicationFactor"]) == (1, 3)
    differs = world.condition("ReplicationFactorDiffers")
    assert (differs["status"], differs["reason"]) == ("True", "ReplicationFactorDiffers")
    assert differs["message"].startswith("spec.topic.replicationFactor: topic 'raw' has 1 replicas per partition, "
                                         "the spec asks for 3 (the default: min(3, brokers))")
    assert "does not change an existing topic's replication by config" in differs["message"]
    assert [e.reason for e in outcome.events] == ["CertificateIssued", "CertificateIssued", "ReplicationFactorDiffers"]
    assert world.reconcile({"topic": {"name": "raw", "partitions": 6}}).events == ()


def test_kafka_unreachable_retries_with_a_condition_after_applying_the_children() -> None:
    """Given Kafka down, When reconciled, Then the children are still applied, Ready=False/KafkaUnreachable
    names the cluster, and a retry is asked with backoff; When Kafka is back, Then Ready follows."""
    world = World()
    world.kafka.unreachable = True
    outcome = world.reconcile({}, retry=2)
    assert "Deployment" in world.kinds()
    assert world.condition()["reason"] == "KafkaUnreachable" and "default:9092" in world.condition()["message"]
    assert outcome.retry_after == 8.0
    world.kafka.unreachable = False
    assert world.reconcile({}).retry_after is None
    assert world.condition()["status"] == "True"


def test_invalid_spec_is_flagged_in_status_with_the_field_and_nothing_applied() -> None:
    """Given a spec the API server would have refused (e.g. applied before the CRD had its rules), When
    reconciled, Then Ready=False/InvalidSpec names the field, nothing is applied and no retry is asked."""
    world = World()
    outcome = world.reconcile({"autoscaling": {"minReplicas": 4, "maxReplicas": 2}})
    assert world.condition()["reason"] == "InvalidSpec"
    assert "spec.autoscaling" in world.condition()["message"]
    assert world.kube.objects == {} and outcome.retry_after is None
    assert [e.reason for e in outcome.events] == ["InvalidSpec"]
    assert world.reconcile({"autoscaling": {"minReplicas": 4, "maxReplicas": 2}}).events == ()


def test_paused_resource_is_left_alone() -> None:
    """Given the pause annotation, When reconciled, Then nothing is applied, ReconciliationPaused=True and
    observedGeneration is not advanced; unpausing removes the condition."""
    world = World()
    outcome = world.reconcile({}, paused=True)
    assert world.kube.objects == {} and world.kafka.topics == {}
    assert world.condition("ReconciliationPaused")["status"] == "True"
    assert "observedGeneration" not in outcome.status
    world.reconcile({})
    assert world.condition("ReconciliationPaused") == {}


def test_missing_spark_operator_is_reported_without_blocking_ready() -> None:
    """Given no sparkoperator.k8s.io CRDs, When a receiver with aggregation is reconciled, Then
    AggregationReady=False/SparkOperatorMissing and Ready still follows the Deployment and topic."""
    world = World()
    world.kube.missing_kinds = {"SparkApplication", "ScheduledSparkApplication"}
    world.reconcile({"aggregation": {}})
    assert world.condition("AggregationReady")["reason"] == "SparkOperatorMissing"
    assert world.condition()["status"] == "True"


def test_the_spark_applications_state_is_reported_and_a_failure_clears_aggregation_ready() -> None:
    """Given a receiver with aggregation, When the spark-operator reports its SparkApplication RUNNING, Then
    the next reconcile shows that state in status.aggregation and AggregationReady=True; When it reports
    FAILED with a message, Then AggregationReady=False/SparkApplicationFailed with that message, while Ready
    still follows the Deployment and topic."""
    world = World()
    outcome = world.reconcile({"aggregation": {}})
    ((_, namespace, name),) = [key for key in world.kube.objects if key[0] == "SparkApplication"]
    assert outcome.status["aggregation"] == {"application": f"SparkApplication/{name}"}
    assert "not yet seen by the spark-operator" in world.condition("AggregationReady")["message"]
    api = "sparkoperator.k8s.io/v1beta2"
    world.kube.patch_status(api, "SparkApplication", namespace, name, {"applicationState": {"state": "RUNNING"}})
    outcome = world.reconcile({"aggregation": {}})
    assert outcome.status["aggregation"] == {"application": f"SparkApplication/{name}", "state": "RUNNING"}
    assert world.condition("AggregationReady")["status"] == "True"
    assert world.condition("AggregationReady")["message"].endswith("RUNNING")
    failed = {"applicationState": {"state": "FAILED", "errorMessage": "driver container failed with ExitCode: 1"}}
    world.kube.patch_status(api, "SparkApplication", namespace, name, failed)
    outcome = world.reconcile({"aggregation": {}})
    assert outcome.status["aggregation"]["state"] == "FAILED"
    condition = world.condition("AggregationReady")
    assert (condition["status"], condition["reason"]) == ("False", "SparkApplicationFailed")
    assert "ExitCode: 1" in condition["message"]
    assert world.condition()["status"] == "True"


def test_a_scheduled_applications_schedule_state_and_last_run_are_reported() -> None:
    """Given scheduled aggregation, When the spark-operator reports the schedule and its last run, Then
    status.aggregation carries both."""
    world = World()
    spec = {"aggregation": {"mode": "scheduled", "schedule": "0 * * * *"}}
    world.reconcile(spec)
    ((_, namespace, name),) = [key for key in world.kube.objects if key[0] == "ScheduledSparkApplication"]
    world.kube.patch_status("sparkoperator.k8s.io/v1beta2", "ScheduledSparkApplication", namespace, name,
                            {"scheduleState": "Scheduled", "lastRunName": f"{name}-1764158400"})
    outcome = world.reconcile(spec)
    assert outcome.status["aggregation"] == {"application": f"ScheduledSparkApplication/{name}",
                                             "state": "Scheduled", "lastRun": f"{name}-1764158400"}


def test_refused_child_is_retried_with_the_servers_message() -> None:
    """Given the API server refusing the PodDisruptionBudget, Then Ready=False/ApplyFailed with its message
    and a retry."""
    world = World()
    world.kube.refuse_kinds = {"PodDisruptionBudget": "spec.maxUnavailable: Invalid value"}
    outcome = world.reconcile({})
    assert world.condition()["reason"] == "ApplyFailed" and "maxUnavailable" in world.condition()["message"]
    assert outcome.retry_after is not None


def test_no_cluster_configured_is_a_connection_problem() -> None:
    """Given neither spec.kafka nor an operator default, Then Ready=False/KafkaConnectionInvalid naming spec.kafka."""
    world = World()
    outcome = reconcile_receiver(world.resource({}), world.kube, world.admin_for)
    ready = next(c for c in outcome.status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "KafkaConnectionInvalid" and ready["message"].startswith("spec.kafka")


@pytest.mark.parametrize(
    ("delete_on_removal", "paused", "kept"), [(False, False, True), (True, False, False), (True, True, True)]
)
def test_topic_is_deleted_only_when_the_spec_says_so(delete_on_removal: bool, paused: bool, kept: bool) -> None:
    """Given a reconciled receiver, When it is deleted, Then the topic is kept unless
    spec.topic.deleteOnRemoval is true (and the resource is not paused)."""
    world = World()
    spec = {"topic": {"deleteOnRemoval": delete_on_removal}}
    world.reconcile(spec)
    delete_receiver(world.resource(spec, paused=paused), world.admin_for)
    assert ("client-telemetry" in world.kafka.topics) is kept


def test_topic_deletion_retries_while_kafka_is_down() -> None:
    """Given deleteOnRemoval and Kafka down, When deleted, Then a retry is asked (the finalizer stays)."""
    world = World()
    spec = {"topic": {"deleteOnRemoval": True}}
    world.reconcile(spec)
    world.kafka.unreachable = True
    assert delete_receiver(world.resource(spec), world.admin_for).retry_after is not None


def _secret_text(world: World, name: str, key: str) -> str:
    found = world.kube.objects[("Secret", "ns", name)]
    return base64.b64decode(found["data"][key]).decode()


def test_tls_by_default_issues_a_ca_and_a_serving_certificate_once_and_renews_on_a_later_resync() -> None:
    """Given a spec without tls, When reconciled, Then the operator's CA, the serving certificate
    (kubernetes.io/tls) and the CA bundle are owned children, status names the bundle, and the endpoint is
    https; reconciled again at once nothing is re-issued; reconciled once the certificate is within
    renewBeforeHours, a new serving certificate from the same CA replaces it, announced by an event."""
    world = World(AVAILABLE)
    first = world.reconcile({})
    issued = [e for e in first.events if e.reason == "CertificateIssued"]
    assert len(issued) == 2
    assert world.status["endpoint"].startswith("https://")
    assert world.status["tls"]["caBundleSecret"] == "tr-ca-bundle/ca.crt"
    assert world.status["tls"]["servingSecret"] == "tr-tls"
    assert world.kube.objects[("Secret", "ns", "tr-tls")]["type"] == "kubernetes.io/tls"
    for name in ("tr-ca", "tr-tls", "tr-ca-bundle"):
        labels = world.kube.objects[("Secret", "ns", name)]["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "kct-operator"
    ca = _secret_text(world, "tr-ca", "ca.crt")
    serving = _secret_text(world, "tr-tls", "tls.crt")
    assert _secret_text(world, "tr-ca-bundle", "ca.crt") == ca
    assert "PRIVATE KEY" not in _secret_text(world, "tr-ca-bundle", "ca.crt")

    again = world.reconcile({})
    assert not [e for e in again.events if e.reason == "CertificateIssued"]
    assert _secret_text(world, "tr-tls", "tls.crt") == serving

    later = NOW + dt.timedelta(days=61)  # 29 days left of 90, below the 30 days of renewBeforeHours
    renewed = world.reconcile({}, now=later)
    assert [e.message for e in renewed.events if e.reason == "CertificateIssued"] == [
        "issued a serving certificate: it expires at 2027-02-19T12:00:00+00:00, within renewBeforeHours"]
    assert _secret_text(world, "tr-tls", "tls.crt") != serving
    assert _secret_text(world, "tr-ca", "ca.crt") == ca


def test_tls_disabled_or_from_a_secret_issues_nothing() -> None:
    """Given `tls.mode: disabled`, Then plain http and no certificate Secrets; given `mode: secret`, Then https
    from the user's Secret, whose ca.crt status names for the brokers."""
    world = World(AVAILABLE)
    world.reconcile({"receiver": {"tls": {"mode": "disabled"}}})
    assert world.status["endpoint"].startswith("http://") and "tls" not in world.status
    assert ("Secret", "ns", "tr-tls") not in world.kube.objects
    world.reconcile({"receiver": {"tls": {"mode": "secret", "secretName": "mine"}}})
    assert world.status["endpoint"].startswith("https://")
    assert world.status["tls"] == {"mode": "secret", "caBundleSecret": "mine/ca.crt", "servingSecret": "mine"}
    assert ("Secret", "ns", "tr-ca") not in world.kube.objects


def test_a_renewed_ca_joins_the_published_bundle_beside_the_old_one() -> None:
    """Given issued certificates, When reconciled once the CA is within caRenewBeforeHours, Then the bundle the
    brokers read holds the new CA and the old one (the overlap), the serving certificate stays signed by the old
    CA until the new one propagated, and after caPropagationMinutes a new one is signed by the new CA."""
    world = World(AVAILABLE)
    world.reconcile({})
    old_ca = _secret_text(world, "tr-ca", "ca.crt")
    renewal = NOW + dt.timedelta(days=4 * 365 + 1)  # under a year left of the CA's 5
    world.reconcile({}, now=renewal)
    bundle = _secret_text(world, "tr-ca-bundle", "ca.crt")
    new_ca = _secret_text(world, "tr-ca", "ca.crt")
    assert new_ca != old_ca and bundle == new_ca + old_ca
    assert _secret_text(world, "tr-tls", "ca.crt") == bundle
    assert _secret_text(world, "tr-ca", "previous-ca.crt") == old_ca
    serving = x509.load_pem_x509_certificate(_secret_text(world, "tr-tls", "tls.crt").encode())
    serving.verify_directly_issued_by(x509.load_pem_x509_certificate(old_ca.encode()))

    world.reconcile({}, now=renewal + dt.timedelta(minutes=11))
    serving = x509.load_pem_x509_certificate(_secret_text(world, "tr-tls", "tls.crt").encode())
    serving.verify_directly_issued_by(x509.load_pem_x509_certificate(new_ca.encode()))
    assert _secret_text(world, "tr-ca-bundle", "ca.crt") == bundle
