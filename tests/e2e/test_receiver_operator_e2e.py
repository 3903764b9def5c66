"""TelemetryReceiver end to end: real API server and controller manager, real broker, `kct operator` as a
subprocess, and the spark-operator's real CRDs (from its Go module: dev/stack/spark_operator.py).

Tried as a new user would: `kubectl apply -f examples/telemetryreceiver.yaml` makes the Deployment (and the
controller manager its ReplicaSet), Service, ConfigMap, Secret, PDB, HPA and SparkApplication, and the topic
on the broker; edits roll the pods, disabling autoscaling removes the HPA, hand-deleted children come back,
deleting the resource removes its children; the rendered config runs `kct receiver` locally; invalid specs
are refused by `kubectl apply` naming the field. No kubelet runs here, so pods never start: Ready stays
False with reason RolloutInProgress, which the tests check is what status says.
"""

from __future__ import annotations

import base64
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import KCT, REPO, Kubectl, OperatorProcess, eventually, free_port, unique
from preconditions import missing_precondition

pytestmark = pytest.mark.e2e

SPARK_OPERATOR = REPO / "dev" / "stack" / "spark_operator.py"
EXAMPLE = REPO / "examples" / "telemetryreceiver.yaml"
RESYNC_SECONDS = 3


def example_manifest(stack: Any, **spec_changes: Any) -> dict[str, Any]:
    """The example, pointed at this stack's broker, with top-level spec keys replaced."""
    document: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    document["spec"]["kafka"]["bootstrapServers"] = stack.kafka_bootstrap
    document["spec"].update(spec_changes)
    return document


def topic_partitions(bootstrap: str, topic: str) -> int | None:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    try:
        found = admin.describe_topics([topic])
    finally:
        admin.close()
    for entry in found:
        if entry["name"] == topic and not entry["error_code"]:
            return len(entry["partitions"])
    return None


@pytest.fixture(scope="module")
def kubectl(stack: Any) -> Kubectl:
    tool = Kubectl(stack.kubeconfig)
    tool.run("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    tool.wait_established("crd/telemetryreceivers.telemetry.kct.dev")
    return tool


def test_credentials_in_plain_producer_properties_are_refused_at_apply_time(stack: Any, kubectl: Kubectl) -> None:
    """Given the CRDs on a real API server, When a TelemetryReceiver puts `sasl.password` in producerProperties,
    Then the apply is refused naming the field; the same spec with the credential from a Secret is accepted."""
    leaked = example_manifest(stack, receiver={"producerProperties": {"sasl.password": "hunter2"}})
    leaked["metadata"]["name"] = unique("leaked")
    refused = kubectl.run("apply", "--dry-run=server", "-n", "default", "-f", "-", stdin=yaml.safe_dump(leaked),
                          check=False)
    assert refused.returncode != 0, refused.stdout
    assert "spec.receiver.producerProperties" in refused.stderr and "must not hold credentials" in refused.stderr
    fixed = example_manifest(stack, receiver={
        "producerPropertiesFromSecrets": {"sasl.password": {"name": "kafka-user", "key": "password"}}})
    fixed["metadata"]["name"] = leaked["metadata"]["name"]
    accepted = kubectl.run("apply", "--dry-run=server", "-n", "default", "-f", "-", stdin=yaml.safe_dump(fixed),
                           check=False)
    assert accepted.returncode == 0, accepted.stderr


@pytest.fixture(scope="module")
def spark_crds(kubectl: Kubectl) -> None:
    """The spark-operator's CRDs, installed into the cluster (fetched from its Go module; cached by stack-up)."""
    found = subprocess.run([sys.executable, str(SPARK_OPERATOR), "path"], capture_output=True, text=True, check=False)
    if found.returncode != 0:
        missing_precondition(f"the spark-operator's CRDs cannot be fetched: {found.stderr.strip()[-2000:]}")
    kubectl.run("apply", "--server-side", "--force-conflicts", "-f", found.stdout.strip())
    kubectl.wait_established(
        "crd/sparkapplications.sparkoperator.k8s.io", "crd/scheduledsparkapplications.sparkoperator.k8s.io"
    )


@pytest.fixture(scope="module")
def operator(stack: Any, kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    env = stack.env()
    env["KCT_RESYNC_SECONDS"] = str(RESYNC_SECONDS)
    env["KCT_BACKOFF_MAX_SECONDS"] = "5"
    process = OperatorProcess(env, tmp_path_factory.mktemp("receiver-operator") / "operator.log",
                              "--metrics-address", f"127.0.0.1:{free_port()}")
    process.start()
    try:
        yield process
    finally:
        process.stop()
        print(f"--- operator log tail ---\n{process.log_tail()}")


def children_of(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any]:
    base = f"{name}-receiver"
    return {
        kind: kubectl.get_json(kind, child, namespace)
        for kind, child in [
            ("deployment", base),
            ("service", base),
            ("configmap", base),
            ("poddisruptionbudget", base),
            ("horizontalpodautoscaler", base),
            ("networkpolicy", base),
            ("secret", f"{name}-token"),
        ]
    }


def test_example_creates_every_child_and_the_topic(
    kubectl: Kubectl, stack: Any, operator: OperatorProcess, spark_crds: None, namespace: str
) -> None:
    """Given the operator and the spark-operator CRDs, When `kubectl apply -f examples/telemetryreceiver.yaml`,
    Then the Deployment (and the controller manager's ReplicaSet), Service, ConfigMap, token Secret, PDB, HPA,
    NetworkPolicy and a SparkApplication the API server accepted exist; the topic exists with the requested partitions;
    status has the endpoint, observedGeneration and an honest Ready=False/RolloutInProgress (no kubelet)."""
    manifest = example_manifest(stack)
    if stack.kafka_bootstrap == "127.0.0.1:19092":
        kubectl.run("apply", "-n", namespace, "-f", str(EXAMPLE))  # literally what a user types
    else:
        kubectl.apply(manifest, "-n", namespace)
    name = manifest["metadata"]["name"]
    eventually(lambda: all(children_of(kubectl, namespace, name).values()), timeout=60, what="the children")
    eventually(
        lambda: kubectl.run(
            "get", "replicaset", "-n", namespace, "-l", f"app.kubernetes.io/instance={name}", "-o", "name"
        ).stdout.strip(),
        timeout=60,
        what="the Deployment's ReplicaSet",
    )
    eventually(
        lambda: kubectl.exists("sparkapplication", f"{name}-aggregation", namespace),
        timeout=60,
        what="the SparkApplication",
    )
    eventually(lambda: kubectl.exists("configmap", f"{name}-aggregation", namespace), what="the job's ConfigMap")

    topic = manifest["spec"]["topic"]["name"]
    status = eventually(
        lambda: (
            (kubectl.get_json("telemetryreceiver", name, namespace) or {}).get("status", {}).get("topic")
            and kubectl.get_json("telemetryreceiver", name, namespace)["status"]
        ),
        what="status.topic",
    )
    partitions = topic_partitions(stack.kafka_bootstrap, topic)
    assert partitions == status["topic"]["partitions"]
    # The example asks for 6; a topic of that name kept from elsewhere with more is reported, not shrunk.
    shrink = kubectl.condition("telemetryreceiver", name, namespace, "PartitionsShrinkRefused")
    assert partitions == 6 or (partitions is not None and partitions > 6 and shrink["status"] == "True")

    assert status["endpoint"] == f"https://{name}-receiver.{namespace}.svc:4318/v1/metrics"
    assert status["observedGeneration"] == 1
    # Right after the Deployment is applied its controller has not observed it yet; once it has, the
    # condition reports the pods (none ever become available here: no kubelet).
    ready = eventually(
        lambda: (c := kubectl.condition("telemetryreceiver", name, namespace)) and "pods available" in c["message"]
        and c,
        what="Ready reporting the pods",
    )
    assert (ready["status"], ready["reason"]) == ("False", "RolloutInProgress"), ready
    assert "pods available" in ready["message"]
    assert kubectl.condition("telemetryreceiver", name, namespace, "AggregationReady")["status"] == "True"
    printed = kubectl.run("get", "tr", name, "-n", namespace).stdout
    assert "ENDPOINT" in printed and status["endpoint"] in printed
    reconciles = operator_samples(operator, "kct_operator_reconciles_total", kind="TelemetryReceiver")
    assert sum(reconciles.values()) >= 1 and ("ok", "RolloutInProgress") in reconciles, reconciles
    (timed,) = operator_samples(operator, "kct_operator_reconcile_duration_seconds_count",
                                kind="TelemetryReceiver").values()
    assert timed >= sum(reconciles.values())


def operator_samples(operator: OperatorProcess, name: str, **labels: str) -> dict[tuple[str, ...], float]:
    """The operator's /metrics samples `name` matching `labels`, by their other labels' values."""
    from prometheus_client.parser import text_string_to_metric_families

    address = operator.args[operator.args.index("--metrics-address") + 1]
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {tuple(v for k, v in sorted(s.labels.items()) if k not in labels): s.value
            for family in text_string_to_metric_families(text) for s in family.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())}


def test_edits_roll_pods_and_disabling_autoscaling_removes_the_hpa(
    kubectl: Kubectl, stack: Any, operator: OperatorProcess, namespace: str
) -> None:
    """Given a receiver, When a receiver setting is edited, Then the ConfigMap and the pod template's
    config hash change and the controller manager makes a new ReplicaSet; When autoscaling is disabled,
    Then the HPA is removed and the Deployment gets spec.replicas."""
    topic = unique("kct-tr-e2e")
    manifest = example_manifest(
        stack, topic={"name": topic, "partitions": 2, "replicationFactor": 1}, aggregation={"enabled": False}
    )
    manifest["metadata"]["name"] = "edits"
    kubectl.apply(manifest, "-n", namespace)
    eventually(lambda: kubectl.exists("horizontalpodautoscaler", "edits-receiver", namespace), what="the HPA")
    eventually(lambda: topic_partitions(stack.kafka_bootstrap, topic) == 2, what="the topic with 2 partitions")

    def template_hash() -> str:
        deployment = kubectl.get_json("deployment", "edits-receiver", namespace) or {}
        annotations = deployment.get("spec", {}).get("template", {}).get("metadata", {}).get("annotations", {})
        return str(annotations.get("telemetry.kct.dev/config-hash", ""))

    before_hash = eventually(template_hash, what="the config hash")
    before_config = (kubectl.get_json("configmap", "edits-receiver", namespace) or {})["data"]["receiver.yaml"]
    manifest["spec"]["receiver"]["limits"]["maxCompressedBytes"] = 262144
    kubectl.apply(manifest, "-n", namespace)
    eventually(
        lambda: (
            "maxCompressedBytes: 262144"
            in (kubectl.get_json("configmap", "edits-receiver", namespace) or {})["data"]["receiver.yaml"]
        ),
        what="the new config in the ConfigMap",
    )
    after_config = (kubectl.get_json("configmap", "edits-receiver", namespace) or {})["data"]["receiver.yaml"]
    assert after_config != before_config
    eventually(lambda: template_hash() not in ("", before_hash), what="a new config hash on the pod template")

    def replica_set_hashes() -> set[str]:
        out = kubectl.run(
            "get",
            "replicaset",
            "-n",
            namespace,
            "-l",
            "app.kubernetes.io/instance=edits",
            "-o",
            "jsonpath={.items[*].metadata.labels.pod-template-hash}",
        ).stdout
        return set(out.split())

    eventually(lambda: len(replica_set_hashes()) >= 2, what="a second ReplicaSet (new pod-template-hash)")

    manifest["spec"]["autoscaling"]["enabled"] = False
    manifest["spec"]["replicas"] = 3
    kubectl.apply(manifest, "-n", namespace)
    eventually(
        lambda: not kubectl.exists("horizontalpodautoscaler", "edits-receiver", namespace), what="the HPA to be pruned"
    )
    eventually(
        lambda: (kubectl.get_json("deployment", "edits-receiver", namespace) or {})["spec"].get("replicas") == 3,
        what="Deployment replicas 3",
    )

    manifest["spec"]["topic"]["partitions"] = 4
    kubectl.apply(manifest, "-n", namespace)
    eventually(lambda: topic_partitions(stack.kafka_bootstrap, topic) == 4, what="the topic grown to 4 partitions")


def test_hand_deleted_children_come_back_and_deleting_the_resource_removes_them(
    kubectl: Kubectl, stack: Any, operator: OperatorProcess, namespace: str
) -> None:
    """Given a receiver, When its Service is deleted and its ConfigMap edited by hand, Then both are
    restored; When the resource is deleted, Then its children go and the topic (deleteOnRemoval false)
    stays; a second receiver with deleteOnRemoval true takes its topic with it."""
    topic = unique("kct-tr-e2e")
    manifest = example_manifest(stack, topic={"name": topic, "partitions": 1}, aggregation={"enabled": False})
    manifest["metadata"]["name"] = "drift"
    kubectl.apply(manifest, "-n", namespace)
    eventually(lambda: all(children_of(kubectl, namespace, "drift").values()), what="the children")
    kubectl.run("delete", "service", "drift-receiver", "-n", namespace)
    kubectl.run(
        "patch",
        "configmap",
        "drift-receiver",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"data":{"receiver.yaml":"edited by hand"}}',
    )
    eventually(
        lambda: kubectl.exists("service", "drift-receiver", namespace), timeout=30, what="the Service to come back"
    )
    eventually(
        lambda: (
            "listen:"
            in (kubectl.get_json("configmap", "drift-receiver", namespace) or {})
            .get("data", {})
            .get("receiver.yaml", "")
        ),
        timeout=30,
        what="the ConfigMap to be restored",
    )

    kubectl.run("delete", "telemetryreceiver", "drift", "-n", namespace, "--wait=true", "--timeout=60s")
    eventually(
        lambda: not any(children_of(kubectl, namespace, "drift").values()),
        timeout=60,
        what="the children to be garbage-collected",
    )
    assert topic_partitions(stack.kafka_bootstrap, topic) == 1

    doomed = unique("kct-tr-e2e")
    manifest = example_manifest(
        stack, topic={"name": doomed, "partitions": 1, "deleteOnRemoval": True}, aggregation={"enabled": False}
    )
    manifest["metadata"]["name"] = "doomed"
    kubectl.apply(manifest, "-n", namespace)
    eventually(lambda: topic_partitions(stack.kafka_bootstrap, doomed) == 1, what="the second topic")
    kubectl.run("delete", "telemetryreceiver", "doomed", "-n", namespace, "--wait=true", "--timeout=60s")
    eventually(
        lambda: topic_partitions(stack.kafka_bootstrap, doomed) is None,
        timeout=30,
        what="the topic to be deleted with its resource",
    )


def test_rendered_config_runs_kct_receiver_locally(
    kubectl: Kubectl, stack: Any, operator: OperatorProcess, namespace: str, tmp_path: Path
) -> None:
    """Given the ConfigMap and token Secret the operator rendered, When the Deployment's own command runs as
    a local process (config path, token file and port swapped for local ones, the token file holding the
    Secret's key as the mounted volume would), Then
    it serves /healthz, and a push without the token is refused (401) while the right token is not."""
    topic = unique("kct-tr-e2e")
    manifest = example_manifest(stack, topic={"name": topic, "partitions": 1}, aggregation={"enabled": False})
    manifest["metadata"]["name"] = "local"
    kubectl.apply(manifest, "-n", namespace)
    config_map = eventually(lambda: kubectl.get_json("configmap", "local-receiver", namespace), what="ConfigMap")
    secret = eventually(lambda: kubectl.get_json("secret", "local-token", namespace), what="token Secret")
    deployment = eventually(lambda: kubectl.get_json("deployment", "local-receiver", namespace), what="Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "config")
    # The token Secret is mounted as a file (re-read when it changes): lay it out locally as kubelet would.
    token_mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "token")
    token_volume = next(v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "token")
    assert token_volume["secret"]["secretName"] == "local-token"
    item = token_volume["secret"]["items"][0]
    token = base64.b64decode(secret["data"][item["key"]]).decode()
    local_token_dir = tmp_path / "token"
    local_token_dir.mkdir()
    (local_token_dir / item["path"]).write_text(token)

    config = yaml.safe_load(config_map["data"]["receiver.yaml"])
    port = free_port()
    config["listen"]["host"], config["listen"]["port"] = "127.0.0.1", port
    assert config["auth"]["bearerTokenFile"].startswith(token_mount + "/")
    config["auth"]["bearerTokenFile"] = config["auth"]["bearerTokenFile"].replace(token_mount, str(local_token_dir))
    path = tmp_path / "receiver.yaml"
    path.write_text(yaml.safe_dump(config))
    command = [part.replace(mount, str(tmp_path)) for part in container["command"] + container["args"]]
    assert command[0] == "kct"
    env = stack.env()
    with (tmp_path / "receiver.log").open("w") as log:
        proc = subprocess.Popen([str(KCT), *command[1:]], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:

        def healthz() -> bool:
            assert proc.poll() is None, (tmp_path / "receiver.log").read_text()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
                    return bool(response.status == 200)
            except OSError:
                return False

        eventually(healthz, timeout=60, what="/healthz of the locally run receiver")
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/metrics",
            data=b"",
            method="POST",
            headers={"Content-Type": "application/x-protobuf"},
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        assert refused.value.code == 401
        request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=15) as response:
                code = response.status
        except urllib.error.HTTPError as error:
            code = error.code
        assert code != 401
    finally:
        proc.terminate()
        proc.wait(timeout=30)


INVALID = [
    ({"replicas": -1}, "spec.replicas"),
    ({"autoscaling": {"minReplicas": 5, "maxReplicas": 2}}, "spec.autoscaling.minReplicas"),
    ({"receiver": {"quotas": {"overrides": [{"consumerGroup": "g", "byteRate": 10}]}}}, "consumerGroup"),
    ({"receiver": {"quotas": {"overrides": [{"byteRate": 10}]}}}, "spec.receiver.quotas.overrides"),
    ({"aggregation": {"mode": "scheduled"}}, "spec.aggregation.schedule"),
]


@pytest.mark.parametrize(("spec", "field"), INVALID, ids=[f for _, f in INVALID])
def test_invalid_specs_are_refused_by_apply(kubectl: Kubectl, namespace: str, spec: dict[str, Any], field: str) -> None:
    """Given an invalid spec (negative replicas, min above max, an unknown quota entity...), When applied with
    kubectl, Then the API server refuses it naming the field."""
    manifest = {
        "apiVersion": "telemetry.kct.dev/v1alpha1",
        "kind": "TelemetryReceiver",
        "metadata": {"name": unique("bad"), "namespace": namespace},
        "spec": spec,
    }
    proc = kubectl.apply(manifest, check=False)
    assert proc.returncode != 0
    assert field in proc.stderr, proc.stderr


def test_scheduled_aggregation_replaces_the_streaming_application(
    kubectl: Kubectl, stack: Any, operator: OperatorProcess, spark_crds: None, namespace: str
) -> None:
    """Given a streaming aggregation, When the mode becomes scheduled, Then the SparkApplication is pruned and
    a ScheduledSparkApplication (accepted by the spark-operator's CRD) takes its place; When aggregation is
    disabled, Then both are gone."""
    topic = unique("kct-tr-e2e")
    manifest = example_manifest(stack, topic={"name": topic, "partitions": 1})
    manifest["metadata"]["name"] = "spark"
    kubectl.apply(manifest, "-n", namespace)
    eventually(lambda: kubectl.exists("sparkapplication", "spark-aggregation", namespace), what="SparkApplication")
    manifest["spec"]["aggregation"].update(mode="scheduled", schedule="*/15 * * * *")
    kubectl.apply(manifest, "-n", namespace)
    eventually(
        lambda: kubectl.exists("scheduledsparkapplication", "spark-aggregation", namespace),
        what="the ScheduledSparkApplication",
    )
    eventually(
        lambda: not kubectl.exists("sparkapplication", "spark-aggregation", namespace),
        what="the SparkApplication to be pruned",
    )
    manifest["spec"]["aggregation"]["enabled"] = False
    kubectl.apply(manifest, "-n", namespace)
    eventually(
        lambda: not kubectl.exists("scheduledsparkapplication", "spark-aggregation", namespace),
        what="the ScheduledSparkApplication to be pruned",
    )


def test_operator_restart_converges_and_pause_is_honoured(
    kubectl: Kubectl, stack: Any, operator: OperatorProcess, namespace: str
) -> None:
    """Given a receiver, When the operator is stopped, the spec edited and the operator started again, Then
    the change is applied (observedGeneration catches up); When paused, Then a hand-deleted child stays
    deleted, a spec edit is seen (ReconciliationPaused observes the new generation) but neither applied nor
    sent to the broker; When unpaused, Then the child comes back and the topic grows."""
    topic = unique("kct-tr-e2e")
    manifest = example_manifest(stack, topic={"name": topic, "partitions": 1}, aggregation={"enabled": False})
    manifest["metadata"]["name"] = "restart"
    kubectl.apply(manifest, "-n", namespace)
    eventually(lambda: kubectl.exists("poddisruptionbudget", "restart-receiver", namespace), what="the PDB")
    operator.stop()
    try:
        manifest["spec"]["podDisruptionBudget"] = {"enabled": True, "maxUnavailable": 2}
        kubectl.apply(manifest, "-n", namespace)
    finally:
        operator.start()
    eventually(
        lambda: (
            (kubectl.get_json("poddisruptionbudget", "restart-receiver", namespace) or {})
            .get("spec", {})
            .get("maxUnavailable")
            == 2
        ),
        what="the edit made while the operator was down",
    )
    eventually(
        lambda: (
            (kubectl.get_json("telemetryreceiver", "restart", namespace) or {})
            .get("status", {})
            .get("observedGeneration")
            == 2
        ),
        what="observedGeneration 2",
    )

    kubectl.run("annotate", "telemetryreceiver", "restart", "-n", namespace, "telemetry.kct.dev/paused=true")
    eventually(
        lambda: (
            kubectl.condition("telemetryreceiver", "restart", namespace, "ReconciliationPaused").get("status") == "True"
        ),
        what="ReconciliationPaused",
    )
    # While paused: a child deleted by hand and the topic's partitions raised in the spec (generation 3).
    kubectl.run("delete", "service", "restart-receiver", "-n", namespace)
    manifest["spec"]["topic"] = {"name": topic, "partitions": 2}
    kubectl.apply(manifest, "-n", namespace)
    eventually(
        lambda: kubectl.condition("telemetryreceiver", "restart", namespace, "ReconciliationPaused").get(
            "observedGeneration"
        )
        == 3,
        what="the operator to see generation 3 while paused",
    )
    operator.wait_for_resync(namespace, "restart", timeout=RESYNC_SECONDS * 4 + 30)  # still hands off
    assert not kubectl.exists("service", "restart-receiver", namespace)
    assert topic_partitions(stack.kafka_bootstrap, topic) == 1
    assert (kubectl.get_json("telemetryreceiver", "restart", namespace) or {})["status"]["observedGeneration"] == 2
    kubectl.run("annotate", "telemetryreceiver", "restart", "-n", namespace, "telemetry.kct.dev/paused-")
    eventually(lambda: kubectl.exists("service", "restart-receiver", namespace), what="the Service after unpausing")
    eventually(lambda: topic_partitions(stack.kafka_bootstrap, topic) == 2, what="the topic grown after unpausing")
