"""A secured Kafka end to end on the loopback stack: every client of the cluster connects through the broker's
SASL_SSL listener (SCRAM-SHA-512, the stack's CA) from one per-resource Secret, and one through its mTLS listener.

- the operator's admin (kafka-python) reconciles a ClientMetricsSubscription and creates a TelemetryReceiver's
  topic through `spec.kafka` + `secretRef`; a describe over SASL_SSL sees both;
- the receiver runs as the operator rendered it (its ConfigMap and the Secret laid out as kubelet mounts it:
  one file per key), produces pushes through SASL_SSL, and a consumer with a client certificate reads them
  back through the mTLS listener;
- the aggregation job runs its rendered config in Spark local mode (as the other loopback aggregation tests),
  its Kafka source reading through SASL_SSL from the same mounted Secret, and writes the pushed clients' rows.

The listeners, CA and SCRAM user are the stack's (dev/stack/kafka_security.py, build/stack.env).
"""

from __future__ import annotations

import base64
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from aggregation_support import read_table, run_aggregation
from helpers import Kubectl, OperatorProcess, eventually, free_port, stop_process, unique
from preconditions import missing_precondition

from kct.aggregation.synthetic import PREFIX, SyntheticClient
from kct.otlp.labels import BROKER_LABELS

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[2]
STACK_ENV = REPO / "build" / "stack.env"  # what tests/conftest.py's `stack` reads, with the secured listeners
RESYNC_SECONDS = 3
API = "telemetry.kct.dev/v1alpha1"
S = 1_000_000_000


@dataclass(frozen=True)
class SecuredKafka:
    """The stack broker's secured listeners and the credentials build/stack.env names."""

    sasl_bootstrap: str
    mtls_bootstrap: str
    ca_file: Path
    username: str
    password: str
    client_cert: Path
    client_key: Path

    def secret_data(self) -> dict[str, str]:
        """A Kafka Secret as a platform team keeps one: one client property per key, the CA inline."""
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": self.username,
                "sasl.password": self.password, "ssl.ca.pem": self.ca_file.read_text()}

    def admin(self) -> Any:
        from kafka.admin import KafkaAdminClient

        from kct.kafka.properties import kafka_python_settings

        return KafkaAdminClient(bootstrap_servers=self.sasl_bootstrap, client_id="kct-e2e-sasl",
                                **kafka_python_settings(self.secret_data()))


@pytest.fixture(scope="module")
def secured(stack: Any) -> SecuredKafka:
    lines = STACK_ENV.read_text().splitlines() if stack.local and STACK_ENV.exists() else []
    values = dict(line.split("=", 1) for line in lines if "=" in line)
    if "KAFKA_SASL_SSL_BOOTSTRAP_SERVERS" not in values:
        missing_precondition("the broker has no SASL_SSL listener (only the local stack's has one: dev/stack)")
    return SecuredKafka(
        sasl_bootstrap=values["KAFKA_SASL_SSL_BOOTSTRAP_SERVERS"], mtls_bootstrap=values["KAFKA_SSL_BOOTSTRAP_SERVERS"],
        ca_file=Path(values["KCT_KAFKA_CA_FILE"]), username=values["KCT_KAFKA_SASL_USERNAME"],
        password=Path(values["KCT_KAFKA_SASL_PASSWORD_FILE"]).read_text().strip(),
        client_cert=Path(values["KCT_KAFKA_CLIENT_CERT_FILE"]), client_key=Path(values["KCT_KAFKA_CLIENT_KEY_FILE"]))


@pytest.fixture(scope="module")
def kubectl(stack: Any) -> Kubectl:
    tool = Kubectl(stack.kubeconfig)
    tool.run("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    tool.wait_established("crd/clientmetricssubscriptions.telemetry.kct.dev",
                          "crd/telemetryreceivers.telemetry.kct.dev")
    return tool


@pytest.fixture(scope="module")
def operator(stack: Any, kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    """The operator with the stack's PLAINTEXT cluster as its default: the resources here name the SASL_SSL one."""
    env = stack.env()
    env["KCT_RESYNC_SECONDS"] = str(RESYNC_SECONDS)
    env["KCT_BACKOFF_MAX_SECONDS"] = "5"
    process = OperatorProcess(env, tmp_path_factory.mktemp("sasl-operator") / "operator.log")
    process.start()
    try:
        yield process
    finally:
        process.stop()
        print(f"--- operator log tail ---\n{process.log_tail()}")


def kafka_secret(kubectl: Kubectl, namespace: str, secured: SecuredKafka) -> str:
    name = "kafka-client"
    kubectl.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
                   "stringData": secured.secret_data()})
    return name


def test_a_subscription_is_reconciled_through_sasl_ssl(
    kubectl: Kubectl, secured: SecuredKafka, operator: OperatorProcess, namespace: str
) -> None:
    """Given a Kafka Secret (SCRAM-SHA-512, the CA inline) and the SASL_SSL bootstrap in spec.kafka,
    When a ClientMetricsSubscription is applied,
    Then a describe over SASL_SSL shows its CLIENT_METRICS configs, and the resource is Ready."""
    from kafka.admin import ConfigResource, ConfigResourceType

    secret = kafka_secret(kubectl, namespace, secured)
    name = unique("sasl-sub")
    kubectl.apply({"apiVersion": API, "kind": "ClientMetricsSubscription",
                   "metadata": {"name": name, "namespace": namespace},
                   "spec": {"metrics": [PREFIX + "producer."], "intervalMs": 60000,
                            "kafka": {"bootstrapServers": secured.sasl_bootstrap, "secretRef": {"name": secret}}}})
    admin = secured.admin()
    try:
        def configs() -> dict[str, Any]:
            found = admin.describe_configs([ConfigResource(ConfigResourceType.CLIENT_METRICS, name)])
            return {key: entry.get("value") for key, entry in found.get("client_metrics", {}).get(name, {}).items()}

        eventually(lambda: configs().get("interval.ms") == "60000", timeout=60,
                   what=f"CLIENT_METRICS {name} described over SASL_SSL")
        assert configs()["metrics"] == PREFIX + "producer."
        eventually(lambda: kubectl.condition("clientmetricssubscription", name, namespace).get("status") == "True",
                   timeout=60, what="the subscription Ready")
        # Deleted through SASL_SSL too (and no subscription is left to make other tests' clients push).
        kubectl.run("delete", "clientmetricssubscription", name, "-n", namespace, "--wait=true", "--timeout=60s")
        eventually(lambda: not configs().get("metrics"), timeout=60, what=f"CLIENT_METRICS {name} removed")
    finally:
        kubectl.run("delete", "clientmetricssubscription", name, "-n", namespace, "--ignore-not-found",
                    "--wait=true", "--timeout=60s", check=False)
        admin.close()


def _lay_out_secret(secret: dict[str, Any], directory: Path) -> None:
    """A Secret as kubelet mounts one: a file per key (and its own dot-entries, which readers must skip)."""
    directory.mkdir()
    (directory / "..data").mkdir()
    for key, value in secret["data"].items():
        (directory / key).write_bytes(base64.b64decode(value))


def _push(port: int, token: str, client: SyntheticClient, now_ns: int) -> int:
    """One push as the broker plugin sends it: the OTLP body, the broker's labels as headers, the token."""
    record = client.push(now_ns)
    labels = {label.name: label.http_header for label in BROKER_LABELS}
    headers = {labels[name]: value.decode() for name, value in record.headers if name in labels}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/metrics", data=record.value, method="POST",
                                     headers={"Content-Type": "application/x-protobuf",
                                              "Authorization": f"Bearer {token}", **headers})
    with urllib.request.urlopen(request, timeout=30) as response:
        return int(response.status)


def _consume_over_mtls(secured: SecuredKafka, topic: str, expected: int, timeout: float = 60) -> list[bytes]:
    """The topic's record keys, read by a consumer that authenticates with the stack's client certificate."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": secured.mtls_bootstrap, "security.protocol": "SSL",
                         "ssl.ca.location": str(secured.ca_file), "ssl.certificate.location": str(secured.client_cert),
                         "ssl.key.location": str(secured.client_key), "group.id": f"kct-e2e-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.metrics.push": False})
    consumer.subscribe([topic])
    keys: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(keys) < expected and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                keys.append(message.key())
    finally:
        consumer.close()
    return keys


@pytest.fixture(scope="module")
def spark_crds(kubectl: Kubectl) -> None:
    """The spark-operator's CRDs (fetched from its Go module; cached by stack-up), so the operator can apply the
    aggregation's application (no spark-operator runs: the job runs here in local mode)."""
    found = subprocess.run([sys.executable, str(REPO / "dev" / "stack" / "spark_operator.py"), "path"],
                           capture_output=True, text=True, check=False)
    if found.returncode != 0:
        missing_precondition(f"the spark-operator's CRDs cannot be fetched: {found.stderr.strip()[-2000:]}")
    kubectl.run("apply", "--server-side", "--force-conflicts", "-f", found.stdout.strip())
    kubectl.wait_established("crd/scheduledsparkapplications.sparkoperator.k8s.io")


def test_a_receivers_topic_pushes_and_aggregates_go_through_sasl_ssl(
    kubectl: Kubectl, stack: Any, secured: SecuredKafka, operator: OperatorProcess, spark_crds: None, namespace: str,
    tmp_path: Path,
) -> None:
    """Given a Kafka Secret and a TelemetryReceiver with aggregation whose spec.kafka names the SASL_SSL listener,
    When the operator reconciles it,
    Then the topic exists (described over SASL_SSL) and no rendered ConfigMap holds the password;
    When its rendered receiver runs with the Secret mounted as kubelet would and 3 clients push twice,
    Then every push is stored (200), a consumer with a client certificate reads them through the mTLS listener,
    and the rendered aggregation job (local mode, its source reading the same mounted Secret through SASL_SSL)
    writes client_metrics rows for exactly those clients."""
    secret = kafka_secret(kubectl, namespace, secured)
    topic = unique("kct-sasl-e2e")
    metadata = {"name": "secured", "namespace": namespace}
    kubectl.apply({"apiVersion": API, "kind": "TelemetryReceiver", "metadata": metadata,
                   "spec": {"replicas": 1, "kafka": {"bootstrapServers": secured.sasl_bootstrap,
                                                     "secretRef": {"name": secret}},
                            "topic": {"name": topic, "partitions": 2, "deleteOnRemoval": True},
                            "networkPolicy": {"enabled": False},
                            "aggregation": {"enabled": True, "mode": "scheduled", "schedule": "0 0 1 1 *"}}})
    try:
        _receiver_topic_pushes_and_aggregates(kubectl, stack, secured, namespace, tmp_path, secret, topic)
    finally:
        # The finalizer deletes the topic through SASL_SSL while the operator still runs.
        kubectl.run("delete", "telemetryreceiver", "secured", "-n", namespace, "--ignore-not-found", "--wait=true",
                    "--timeout=60s", check=False)


def _receiver_topic_pushes_and_aggregates(kubectl: Kubectl, stack: Any, secured: SecuredKafka, namespace: str,
                                          tmp_path: Path, secret: str, topic: str) -> None:
    admin = secured.admin()
    try:
        eventually(lambda: topic in admin.list_topics(), timeout=60, what=f"topic {topic} listed over SASL_SSL")
    finally:
        admin.close()
    receiver_map = eventually(lambda: kubectl.get_json("configmap", "secured-receiver", namespace), what="ConfigMap")
    job_map = eventually(lambda: kubectl.get_json("configmap", "secured-aggregation", namespace), what="job ConfigMap")
    for rendered in (receiver_map, job_map):
        assert secured.password not in yaml.safe_dump(rendered)
    token_secret = eventually(lambda: kubectl.get_json("secret", "secured-token", namespace), what="token Secret")
    token = base64.b64decode(token_secret["data"]["token"]).decode()
    mounted = tmp_path / "kafka-client"
    _lay_out_secret(kubectl.get("secret", secret, namespace), mounted)

    config = yaml.safe_load(receiver_map["data"]["receiver.yaml"])
    port = free_port()
    config["listen"] = {"host": "127.0.0.1", "port": port}
    config["auth"]["bearerTokenFile"] = str(tmp_path / "token")
    (tmp_path / "token").write_text(token)
    assert config["kafka"]["bootstrapServers"] == secured.sasl_bootstrap
    config["kafka"]["clientPropertiesDir"] = str(mounted)
    config["attribution"] = {"enabled": False}
    (tmp_path / "receiver.yaml").write_text(yaml.safe_dump(config))
    start = (time.time_ns() // (60 * S)) * 60 * S - 5 * 60 * S
    clients = [SyntheticClient(f"sasl-{i}", started_ns=start - 3 * S, seed=i + 1) for i in range(3)]
    with (tmp_path / "receiver.log").open("w") as log:
        process = subprocess.Popen([sys.executable, "-m", "kct.cli", "receiver", "--config",
                                    str(tmp_path / "receiver.yaml")],
                                   env={**stack.env(), "PYTHONPATH": str(REPO / "operator")}, stdout=log,
                                   stderr=subprocess.STDOUT)
    try:
        def ready() -> bool:
            assert process.poll() is None, (tmp_path / "receiver.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
                    return int(response.status) == 200
            except OSError:
                return False

        eventually(ready, timeout=90, what="the rendered receiver ready (its producer connected over SASL_SSL)")
        codes = [_push(port, token, c, start + k * 60 * S) for k in range(2) for c in clients]
    finally:
        stop_process(process)
    assert codes == [200] * 6
    keys = _consume_over_mtls(secured, topic, 6)
    assert sorted(keys) == sorted(c.instance_id.encode() for c in clients for _ in range(2))

    job = yaml.safe_load(job_map["data"]["aggregation.yaml"])
    assert job["source"]["bootstrapServers"] == secured.sasl_bootstrap
    job["source"]["clientPropertiesDir"] = str(mounted)
    out = tmp_path / "aggregates"
    job["parquet"] = {"path": str(out)}
    job["export"] = None
    job["run"] = {"mode": "batch", "untilDrained": True, "checkpointPath": str(out / "_checkpoints")}
    job["spark"] = {"master": "local[2]", "shufflePartitions": 2,
                    "conf": {"spark.ui.enabled": "false", "spark.driver.memory": "1g"}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    run_aggregation(stack.kafka_bootstrap, tmp_path / "job.yaml")
    rows = read_table(out, "client_metrics")
    assert {r["client_instance_id"] for r in rows} == {c.instance_id for c in clients}
    assert any(r["metric"] == PREFIX + "producer.record.sent.total" for r in rows)
