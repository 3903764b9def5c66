"""`kubectl kct` end to end on the loopback stack: a real API server proxies the plugin's request to a real
`kct receiver` process (with the stack's Kafka) that stored a broker-forwarded push.

No kubelet runs here, so the receiver is not a pod: it runs as a local process on this host's own address
(not loopback, which the API server may refuse to proxy to), and the test gives its TelemetryReceiver the
Service and Endpoints the operator and the endpoints controller would give a real one. What is under test
is the rest: the plugin's kubeconfig, RBAC-checked reads, the service proxy path, the receiver's token
travelling in X-Kct-Read-Token (the API server consumes Authorization), matching with the broker's rule.
"""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import REPO, Kubectl, free_port, receiver_process, unique
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

pytestmark = pytest.mark.e2e

PLUGIN = REPO / ".venv" / "bin" / "kubectl-kct"
EXAMPLE = REPO / "examples" / "telemetryreceiver.yaml"
TOKEN = "e2e-kubectl-kct-token"
OTLP_PORT = 4318


def _host_address() -> str:
    """This host's address on its default route (no packet is sent by a UDP connect)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))
        return str(probe.getsockname()[0])


@pytest.fixture(scope="module")
def kubectl(stack: Any) -> Kubectl:
    tool = Kubectl(stack.kubeconfig)
    tool.run("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    tool.wait_established("crd/telemetryreceivers.telemetry.kct.dev",
                          "crd/clientmetricssubscriptions.telemetry.kct.dev")
    return tool


@pytest.fixture
def receiver(stack: Any, tmp_path: Path) -> Iterator[tuple[str, int]]:
    address = _host_address()
    if address.startswith("127."):
        pytest.skip("this host has no address besides loopback for the API server's proxy to dial")
    topic = f"kct-e2e-kubectl-{uuid.uuid4().hex[:8]}"
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": stack.kafka_bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).values():
        future.result(timeout=30)
    port = free_port()
    config = {
        "listen": {"host": address, "port": port},
        "auth": {"bearerTokenEnv": "KCT_RECEIVER_TOKEN"},
        "kafka": {"bootstrapServersEnv": "KAFKA_BOOTSTRAP_SERVERS", "topic": topic, "deliveryTimeoutMs": 5000},
        "attribution": {"enabled": False},
        "logging": {"level": "INFO", "format": "json"},
    }
    with receiver_process(config, tmp_path, dict(stack.env(), KCT_RECEIVER_TOKEN=TOKEN)):
        yield address, port


def _push(address: str, port: int, instance_id: str) -> None:
    request = ExportMetricsServiceRequest()
    metric = request.resource_metrics.add().scope_metrics.add().metrics.add()
    metric.name = "org.apache.kafka.producer.record.queue.time.max"
    point = metric.gauge.data_points.add()
    point.time_unix_nano, point.as_double = 1_700_000_000_000_000_000, 42.0
    headers = {"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {TOKEN}",
               "kct-client-instance-id": instance_id, "kct-client-id": "checkout-producer-1",
               "kct-client-software-name": "apache-kafka-java", "kct-client-software-version": "3.9.0",
               "kct-client-source-address": "10.1.0.5", "kct-client-source-port": "40000",
               "kct-principal": "User:checkout", "kct-broker-id": "1"}
    post = urllib.request.Request(f"http://{address}:{port}/v1/metrics", data=request.SerializeToString(),
                                  headers=headers, method="POST")
    with urllib.request.urlopen(post, timeout=10) as resp:
        assert resp.status == 200


def _plugin(stack: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PLUGIN), *args, "--kubeconfig", str(stack.kubeconfig)],
                          capture_output=True, text=True, timeout=60, check=False)


def test_clients_why_and_top_through_the_api_server_proxy(stack: Any, kubectl: Kubectl,
                                                          receiver: tuple[str, int]) -> None:
    """Given a receiver that stored a Java producer's push, its TelemetryReceiver, token Secret, Service and
    Endpoints, and two subscriptions (one matching that client, one not), When `kubectl kct` asks, Then it
    lists the client with the matching subscription, explains both selector by selector, and shows its
    queue time; a namespace without a receiver is a clear error."""
    address, port = receiver
    namespace = unique("kct-plugin")
    kubectl.run("create", "namespace", namespace)
    instance_id = str(uuid.uuid4())
    _push(address, port, instance_id)
    spec = yaml.safe_load(EXAMPLE.read_text())
    spec["metadata"] = {"name": "telemetry", "namespace": namespace}
    spec["spec"]["kafka"]["bootstrapServers"] = stack.kafka_bootstrap
    kubectl.apply(spec)
    kubectl.run("create", "secret", "generic", "telemetry-token", "-n", namespace, f"--from-literal=token={TOKEN}")
    service = {"name": "telemetry-receiver", "namespace": namespace}
    kubectl.apply({"apiVersion": "v1", "kind": "Service", "metadata": service,
                   "spec": {"ports": [{"port": OTLP_PORT, "targetPort": port, "protocol": "TCP"}]}})
    kubectl.apply({"apiVersion": "v1", "kind": "Endpoints", "metadata": service,
                   "subsets": [{"addresses": [{"ip": address}], "ports": [{"port": port, "protocol": "TCP"}]}]})
    subscriptions = (("java", {"clientSoftwareName": "apache-kafka-java"}), ("billing", {"clientId": "billing-.*"}))
    for name, match in subscriptions:
        kubectl.apply({"apiVersion": "telemetry.kct.dev/v1alpha1", "kind": "ClientMetricsSubscription",
                       "metadata": {"name": name, "namespace": namespace},
                       "spec": {"metrics": ["org.apache.kafka.producer."], "match": match}})

    listed = _plugin(stack, "clients", "-n", namespace, "-o", "json")
    assert listed.returncode == 0, listed.stderr
    (client,) = json.loads(listed.stdout)
    assert client["client_instance_id"] == instance_id
    assert client["labels"]["client_id"] == "checkout-producer-1" and client["pushes"] == 1
    assert client["subscriptions"] == [f"{namespace}/java"]

    why = _plugin(stack, "why", instance_id, "-n", namespace)
    assert why.returncode == 0, why.stderr
    assert f"{namespace}/billing: does not match" in why.stdout
    assert "FAIL client_id = 'checkout-producer-1' against ^(?:billing-.*)$" in why.stdout
    assert f"{namespace}/java: MATCHES" in why.stdout

    top = _plugin(stack, "top", "-n", namespace, "--by", "client")
    assert top.returncode == 0, top.stderr
    assert top.stdout.splitlines()[1].split()[7] == "42.0"  # QUEUE MAX(ms)

    empty = unique("kct-none")
    kubectl.run("create", "namespace", empty)
    missing = _plugin(stack, "clients", "-n", empty)
    assert missing.returncode == 1 and f"no TelemetryReceiver in namespace '{empty}'" in missing.stderr
