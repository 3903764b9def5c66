"""Kafka clients as pods on the node stack: a producer Deployment on librdkafka and a consumer StatefulSet on the
Java client, so the receiver's attribution meets real pod addresses, owner chains (Pod -> ReplicaSet ->
Deployment; Pod -> StatefulSet) and more than one `client_software_name`.

One builder, `render_client_pods`, a pure function of `ClientPods`, shared by the demo (dev/demo/demo.py) and
the node e2e tests (tests/e2e/test_node_e2e.py, test_demo_e2e.py). The clients' code comes from a ConfigMap
(pod_clients/): the librdkafka one runs on our runtime image (Python and confluent-kafka), the Java one as a
single source file on the kct-spark image (Java and kafka-clients under /opt/spark/jars). Each client's
`client.id` is its pod's name (downward API): what the client says of itself, against which the attribution
the receiver makes from the source address can be checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CLIENT_SOFTWARE", "CONFIGMAP", "ClientPods", "as_list", "consumer_name", "producer_name",
           "render_client_pods", "selector"]

_SOURCES = Path(__file__).resolve().parent / "pod_clients"
_LIBRDKAFKA_SCRIPT = (_SOURCES / "librdkafka_client.py").read_text()
_JAVA_SOURCE = (_SOURCES / "Client.java").read_text()
_MOUNT = "/etc/kct-clients"
CONFIGMAP = "kct-client-sources"

# The `client_software_name` each workload's pushes carry (KIP-511, as the broker's plugin reports it).
CLIENT_SOFTWARE = {"producer": "confluent-kafka-python", "consumer": "apache-kafka-java"}


@dataclass(frozen=True)
class ClientPods:
    """The client workloads of one namespace."""

    namespace: str
    name: str               # prefix of the workloads' names: <name>-producer, <name>-consumer
    bootstrap: str          # Kafka as pods reach it
    topic: str              # the data topic producers write and consumers read
    librdkafka_image: str   # our runtime image
    java_image: str         # the kct-spark image
    producer_replicas: int = 2
    consumer_replicas: int = 1
    rate_per_s: float = 10.0  # per producer pod


def selector(name: str) -> str:
    """The label selector of every object `render_client_pods` makes for `ClientPods.name` (to list or delete)."""
    return f"app.kubernetes.io/part-of={name}"


def producer_name(pods: ClientPods) -> str:
    return f"{pods.name}-producer"


def consumer_name(pods: ClientPods) -> str:
    return f"{pods.name}-consumer"


def _labels(pods: ClientPods, workload: str) -> dict[str, str]:
    # app.kubernetes.io/name becomes the pushes' `service.name` (attribution's default label mapping).
    return {"app.kubernetes.io/name": workload, "app.kubernetes.io/part-of": pods.name}


def _pod_spec(image: str, command: list[str], run_as: int) -> dict[str, Any]:
    return {
        "terminationGracePeriodSeconds": 10, "automountServiceAccountToken": False, "enableServiceLinks": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": run_as, "runAsGroup": run_as,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "name": "client", "image": image, "imagePullPolicy": "Never", "command": command,
            "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            "resources": {"requests": {"cpu": "20m", "memory": "64Mi"}},
            "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]}},
            "volumeMounts": [{"name": "clients", "mountPath": _MOUNT, "readOnly": True},
                             {"name": "tmp", "mountPath": "/tmp"}],
        }],
        "volumes": [{"name": "clients", "configMap": {"name": CONFIGMAP}},
                    {"name": "tmp", "emptyDir": {}}],
    }


def render_client_pods(pods: ClientPods) -> list[dict[str, Any]]:
    """The ConfigMap with the clients' code, the producer Deployment, the consumer StatefulSet and the headless
    Service the StatefulSet names; apply them as one List."""
    producer, consumer = producer_name(pods), consumer_name(pods)
    # $(POD_NAME) is expanded by the kubelet from the container's env.
    producer_spec = _pod_spec(pods.librdkafka_image, [
        "python", f"{_MOUNT}/librdkafka_client.py", "producer", pods.bootstrap, pods.topic, "$(POD_NAME)",
        str(pods.rate_per_s)], run_as=10001)
    consumer_spec = _pod_spec(pods.java_image, [
        "java", "-Xmx96m", "-XX:TieredStopAtLevel=1", "-cp", "/opt/spark/jars/*", f"{_MOUNT}/Client.java",
        "consumer", pods.bootstrap, pods.topic, "$(POD_NAME)", consumer], run_as=185)
    meta = {"namespace": pods.namespace}
    return [
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": CONFIGMAP, "labels": {"app.kubernetes.io/part-of": pods.name}, **meta},
         "data": {"librdkafka_client.py": _LIBRDKAFKA_SCRIPT, "Client.java": _JAVA_SOURCE}},
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": producer, "labels": _labels(pods, producer), **meta},
         "spec": {"replicas": pods.producer_replicas,
                  "selector": {"matchLabels": _labels(pods, producer)},
                  "template": {"metadata": {"labels": _labels(pods, producer)}, "spec": producer_spec}}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": consumer, "labels": _labels(pods, consumer), **meta},
         "spec": {"clusterIP": "None", "selector": _labels(pods, consumer)}},
        {"apiVersion": "apps/v1", "kind": "StatefulSet",
         "metadata": {"name": consumer, "labels": _labels(pods, consumer), **meta},
         "spec": {"replicas": pods.consumer_replicas, "serviceName": consumer, "podManagementPolicy": "Parallel",
                  "selector": {"matchLabels": _labels(pods, consumer)},
                  "template": {"metadata": {"labels": _labels(pods, consumer)}, "spec": consumer_spec}}},
    ]


def as_list(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """`kubectl apply -f -` input for several objects."""
    return {"apiVersion": "v1", "kind": "List", "items": objects}
