"""The node stack runs real pods: a Ready node, a Pod with its ServiceAccount token, ClusterIP Services,
cluster DNS, our runtime image, and the operator installed with Helm whose TelemetryReceiver gets real pods.

Runs against `dev/stack/stack.py node-up` (containerd, kubelet, kube-proxy, kube-scheduler, CoreDNS and their
own control plane, in namespaces of their own). The workload is the node's `probe` image (a static Go
program, dev/stack/node-images/probe): a server pod behind a Service, and check pods whose exit status (and
termination message) say whether a name resolved, a Service answered, the API server accepted the token.
The host's kubectl reaches the API server through the stack's loopback forwarder; the "host" side of a
ClusterIP check runs in the node's network namespace, where kube-proxy's rules are (the host's own network
is never changed). The fixtures `node_stack` and `operator_release` are in conftest.py.
"""

from __future__ import annotations

import calendar
import json
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from aggregation_support import create_topic
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
from helpers import REPO, eventually
from node_support import (
    CLIENTS_INTERVAL_SECONDS,
    NO_CLIENTS_WARNING_SECONDS,
    NODE_MIN_INSYNC_REPLICAS,
    NODE_REPLICATION,
    NodeStack,
    Release,
    java_image,
    telemetry_receiver,
    wait_ready,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from plugin_support import client_metrics_subscription
from preconditions import missing_precondition

sys.path.insert(0, str(REPO / "dev" / "demo"))
from client_pods import CLIENT_SOFTWARE, ClientPods, as_list, producer_name, render_client_pods

pytestmark = pytest.mark.e2e

SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass(frozen=True)
class Web:
    namespace: str
    pod: str
    service: str
    cluster_ip: str
    text: str   # what the server answers, unique per run


def _probe_pod(stack: NodeStack, namespace: str, name: str, args: list[str],
               labels: dict[str, str] | None = None, restart: str = "Never") -> None:
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {
            "restartPolicy": restart, "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "probe", "image": stack.probe_image, "imagePullPolicy": "Never",
                            "command": ["/probe", *args]}],
        },
    }
    stack.kubectl("apply", "-f", "-", stdin=json.dumps(pod))


@pytest.fixture(scope="module")
def web(node_stack: NodeStack) -> Iterator[Web]:
    """A namespace with a server pod and a ClusterIP Service in front of it; deleted afterwards."""
    namespace = f"node-e2e-{uuid.uuid4().hex[:8]}"
    text = f"hello-{uuid.uuid4().hex}"
    node_stack.kubectl("create", "namespace", namespace)
    try:
        _probe_pod(node_stack, namespace, "web", ["serve", ":8080", text], labels={"app": "web"}, restart="Always")
        service = {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": namespace},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
        }
        node_stack.kubectl("apply", "-f", "-", stdin=json.dumps(service))
        cluster_ip = node_stack.get("service", "web", "-n", namespace)["spec"]["clusterIP"]
        yield Web(namespace=namespace, pod="web", service="web", cluster_ip=cluster_ip, text=text)
    finally:
        node_stack.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def _run_check(stack: NodeStack, web: Web, args: list[str]) -> dict[str, Any]:
    """A pod running `probe` steps to completion; returns its final state (Succeeded or Failed)."""
    name = f"check-{uuid.uuid4().hex[:8]}"
    _probe_pod(stack, web.namespace, name, args)

    def finished() -> dict[str, Any] | None:
        pod: dict[str, Any] = stack.get("pod", name, "-n", web.namespace)
        return pod if pod["status"].get("phase") in {"Succeeded", "Failed"} else None

    pod: dict[str, Any] = eventually(finished, timeout=240, what=f"pod {name} to finish", interval=1)
    return pod


def _message(pod: dict[str, Any]) -> str:
    statuses = pod["status"].get("containerStatuses") or [{}]
    return str(statuses[0].get("state", {}).get("terminated", {}).get("message", ""))


def test_node_is_ready(node_stack: NodeStack) -> None:
    """Given the node stack is up
    When the host asks the API server (through the stack's forwarder) for the nodes
    Then there is exactly the stack's node, and it is Ready."""
    nodes = node_stack.get("nodes")["items"]

    assert [n["metadata"]["name"] for n in nodes] == [node_stack.node_name]
    conditions = {c["type"]: c["status"] for c in nodes[0]["status"]["conditions"]}
    assert conditions["Ready"] == "True"


def test_pod_runs_with_its_service_account_token_mounted(node_stack: NodeStack, web: Web) -> None:
    """Given a server pod on the node
    When it has been scheduled and started
    Then it is Running and ready, with the ServiceAccount token volume mounted, and a pod presenting that
    token to https://kubernetes.default.svc is accepted by the API server."""
    def running() -> dict[str, Any] | None:
        pod: dict[str, Any] = node_stack.get("pod", web.pod, "-n", web.namespace)
        statuses = pod["status"].get("containerStatuses") or []
        return pod if pod["status"].get("phase") == "Running" and statuses and statuses[0]["ready"] else None

    pod = eventually(running, timeout=240, what="the web pod to run", interval=1)
    checked = _run_check(node_stack, web, ["api"])

    assert pod["spec"]["nodeName"] == node_stack.node_name
    mounts = {m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert SA_MOUNT in mounts
    assert checked["status"]["phase"] == "Succeeded", _message(checked)


def test_cluster_ip_service_answers_from_a_pod(node_stack: NodeStack, web: Web) -> None:
    """Given the web Service
    When a pod GETs its ClusterIP
    Then the server pod's text comes back."""
    checked = _run_check(node_stack, web, ["get", f"http://{web.cluster_ip}/", web.text])

    assert checked["status"]["phase"] == "Succeeded", _message(checked)


def test_cluster_ip_service_answers_from_the_node_host(node_stack: NodeStack, web: Web) -> None:
    """Given the web Service
    When a process in the node's host network namespace (outside any pod) GETs its ClusterIP
    Then the server pod's text comes back."""
    proc = subprocess.run([*node_stack.node_exec, str(node_stack.probe_binary), "get",
                           f"http://{web.cluster_ip}/", web.text],
                          capture_output=True, text=True, timeout=120, check=False)

    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_service_name_resolves_in_a_pod(node_stack: NodeStack, web: Web) -> None:
    """Given the web Service and the node's cluster DNS
    When a pod looks up `web.<namespace>.svc` and GETs it by that name
    Then the name resolves and the server pod's text comes back."""
    name = f"{web.service}.{web.namespace}.svc"
    checked = _run_check(node_stack, web, ["lookup", name, "--", "get", f"http://{name}/", web.text])

    assert checked["status"]["phase"] == "Succeeded", _message(checked)


RECEIVER_CONFIG = """\
listen: {host: 0.0.0.0, port: 4318}
auth: {bearerTokenFile: /etc/kct/token/token}
kafka: {bootstrapServers: "%s", topic: "%s"}
"""

# From the node's host namespace: /healthz, then a push without the token and one with a wrong token.
_RECEIVER_CALLS = """
import sys, urllib.request, urllib.error
base = sys.argv[1]
def status(request):
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
def push(headers):
    return urllib.request.Request(base + "/v1/metrics", data=b"", method="POST",
                                  headers={"Content-Type": "application/x-protobuf", **headers})
print(status(base + "/healthz")[0], status(base + "/readyz")[0], status(push({}))[0],
      status(push({"Authorization": "Bearer wrong"}))[0])
"""


def _receiver_objects(namespace: str, image: str, token: str, bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """A receiver pod as the operator renders one: non-root, read-only root filesystem, token from a Secret;
    `topic` must exist (the operator creates it; a receiver never does)."""
    return [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "receiver-token", "namespace": namespace},
         "stringData": {"token": token}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "receiver", "namespace": namespace},
         "data": {"receiver.yaml": RECEIVER_CONFIG % (bootstrap, topic)}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "receiver", "namespace": namespace},
         "spec": {
             "automountServiceAccountToken": False,
             "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001,
                                 "seccompProfile": {"type": "RuntimeDefault"}},
             "containers": [{
                 "name": "receiver", "image": image, "imagePullPolicy": "Never",
                 "command": ["kct"], "args": ["receiver", "--config", "/etc/kct/receiver/receiver.yaml"],
                 "ports": [{"name": "http-otlp", "containerPort": 4318}],
                 "startupProbe": {"httpGet": {"path": "/healthz", "port": "http-otlp"}, "periodSeconds": 2,
                                  "failureThreshold": 60},
                 "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http-otlp"}, "periodSeconds": 2},
                 "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                     "capabilities": {"drop": ["ALL"]}},
                 "volumeMounts": [{"name": "config", "mountPath": "/etc/kct/receiver", "readOnly": True},
                                  {"name": "tmp", "mountPath": "/tmp"},
                                  {"name": "token", "mountPath": "/etc/kct/token", "readOnly": True}],
             }],
             "volumes": [{"name": "config", "configMap": {"name": "receiver"}}, {"name": "tmp", "emptyDir": {}},
                         {"name": "token", "secret": {"secretName": "receiver-token", "defaultMode": 0o440}}],
         }},
    ]


def test_receiver_pod_runs_from_the_runtime_image(node_stack: NodeStack, web: Web) -> None:
    """Given our runtime image (built from the Dockerfile by `make images`) imported into the node
    When a receiver pod runs it as the operator renders one (uid 10001, read-only root filesystem), with the
    node stack's Kafka on the node's address as its sink
    and its topic, created first as the operator does
    Then the pod becomes Ready (its /readyz says Kafka answers), and from the node's host namespace /healthz
    and /readyz answer 200 while pushes without the token, or with a wrong one, are refused with 401."""
    if node_stack.kct_image is None:
        missing_precondition("the node stack has no runtime image: run `make images` before `make node-up`")
    token = uuid.uuid4().hex
    topic = create_topic(node_stack.kafka_bootstrap, partitions=1, prefix="kct-node-receiver",
                         replication=NODE_REPLICATION)
    node_stack.kubectl("apply", "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "List",
         "items": _receiver_objects(web.namespace, node_stack.kct_image, token, node_stack.kafka_pod_bootstrap,
                                    topic)}))

    def ready() -> dict[str, Any] | None:
        pod: dict[str, Any] = node_stack.get("pod", "receiver", "-n", web.namespace)
        statuses = pod["status"].get("containerStatuses") or []
        return pod if statuses and statuses[0].get("ready") else None

    pod = eventually(ready, timeout=240, what="the receiver pod to be Ready", interval=1)
    calls = subprocess.run([*node_stack.node_exec, sys.executable, "-c", _RECEIVER_CALLS,
                            f"http://{pod['status']['podIP']}:4318"],
                           capture_output=True, text=True, timeout=60, check=False)

    assert pod["status"]["containerStatuses"][0]["image"] == node_stack.kct_image
    assert calls.returncode == 0, calls.stderr
    assert calls.stdout.split() == ["200", "200", "401", "401"]


def test_kafka_answers_the_host_through_the_forwarder(node_stack: NodeStack) -> None:
    """Given the node stack's three brokers (inside its namespace)
    When a client on the host bootstraps from KAFKA_BOOTSTRAP_SERVERS
    Then it gets the cluster's metadata, whose brokers are the three host addresses of that list (the forwarder),
    one per broker id."""
    admin = AdminClient({"bootstrap.servers": node_stack.kafka_bootstrap})

    metadata = admin.list_topics(timeout=30)

    advertised = {broker_id: f"{b.host}:{b.port}" for broker_id, b in metadata.brokers.items()}
    assert sorted(advertised.values()) == sorted(node_stack.kafka_bootstrap.split(","))
    assert sorted(advertised) == [1, 2, 3]


def test_the_hosts_network_is_untouched(node_stack: NodeStack) -> None:
    """Given the node stack is up (its bridge, veth, routes and kube-proxy rules exist in its namespace)
    When the host's own network namespace is inspected
    Then none of them is there: no node device, no route to the pod, Service or node networks, no
    kube-proxy chain (the host reaches the stack only through the loopback forwarder)."""
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    routes = subprocess.run(["ip", "route"], capture_output=True, text=True, check=True).stdout
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True, check=False).stdout
    inside = subprocess.run([*node_stack.node_exec, "ip", "-o", "link"], capture_output=True, text=True,
                            check=True).stdout

    assert "kct-br0" in inside and "kct-node0" in inside  # what the host must not have
    assert "kct-br0" not in links and "kct-node0" not in links
    assert not [r for r in routes.splitlines() if r.startswith(("10.244.", "10.96.", "10.250."))]
    assert "KUBE-" not in rules


def test_operator_installed_with_helm_runs_as_pods_with_the_charts_identity(node_stack: NodeStack,
                                                                              operator_release: Release) -> None:
    """Given the chart installed with our runtime image
    When its pods are looked at
    Then every operator pod is Running and ready on the node, under the chart's ServiceAccount (not the
    namespace's default), non-root, with a read-only root filesystem."""
    pods = node_stack.get("pods", "-n", operator_release.namespace)["items"]

    assert pods
    for pod in pods:
        container = pod["spec"]["containers"][0]
        assert pod["status"]["phase"] == "Running"
        assert all(s["ready"] for s in pod["status"]["containerStatuses"])
        assert pod["spec"]["nodeName"] == node_stack.node_name
        assert pod["spec"]["serviceAccountName"] not in {"", "default"}
        assert container["image"] == node_stack.kct_image
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert (pod["spec"].get("securityContext", {}).get("runAsNonRoot")
                or container["securityContext"].get("runAsNonRoot")) is True


def test_telemetry_receiver_becomes_ready_on_real_pods(node_stack: NodeStack, operator_release: Release) -> None:
    """Given the operator running as pods (installed with Helm)
    When a TelemetryReceiver with our image and the node stack's Kafka is applied
    Then its Deployment's pods become available on the node and the resource says Ready=True."""
    namespace = f"node-tr-{uuid.uuid4().hex[:8]}"
    assert node_stack.kct_image is not None  # operator_release checked it
    receiver = telemetry_receiver(namespace, node_stack.kct_image, node_stack.kafka_pod_bootstrap,
                                   f"telemetry-{namespace}")
    node_stack.kubectl("create", "namespace", namespace)
    try:
        node_stack.kubectl("apply", "-f", "-", stdin=json.dumps(receiver))

        wait_ready(node_stack, namespace)
        deployment = node_stack.get("deployment", "telemetry-receiver", "-n", namespace)
        pods = node_stack.get("pods", "-n", namespace, "-l", "app.kubernetes.io/component=receiver")["items"]

        assert deployment["status"].get("availableReplicas", 0) >= 1
        running = [p for p in pods if p["status"]["phase"] == "Running"]
        assert running and all(p["spec"]["nodeName"] == node_stack.node_name for p in running)
    finally:
        node_stack.kubectl("delete", "telemetryreceiver", "telemetry", "-n", namespace, "--wait=true",
                           "--timeout=120s", check=False)
        node_stack.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


@dataclass(frozen=True)
class Telemetry:
    namespace: str
    topic: str


@pytest.fixture(scope="module")
def telemetry(node_stack: NodeStack, operator_release: Release) -> Iterator[Telemetry]:
    """The TelemetryReceiver the node stack's broker plugin posts to (`telemetry` in `kct-telemetry`, holding the
    plugin's token), with two replicas behind its Service, Ready; removed with its namespace afterwards."""
    assert node_stack.kct_image is not None  # operator_release checked it
    namespace = "kct-telemetry"
    topic = f"client-telemetry-{uuid.uuid4().hex[:8]}"
    token = node_stack.receiver_token_file.read_text().strip()
    objects = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "broker-token", "namespace": namespace},
         "stringData": {"token": token}},
        telemetry_receiver(namespace, node_stack.kct_image, node_stack.kafka_pod_bootstrap, topic, "broker-token",
                           replicas=2),
    ]
    node_stack.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    try:
        wait_ready(node_stack, namespace)
        eventually(lambda: node_stack.get("deployment", "telemetry-receiver", "-n", namespace)["status"].get(
            "readyReplicas") == 2, timeout=240, what="two ready receiver replicas", interval=1)
        yield Telemetry(namespace=namespace, topic=topic)
    finally:
        node_stack.kubectl("delete", "telemetryreceiver", "telemetry", "-n", namespace, "--wait=true",
                           "--timeout=120s", check=False)
        node_stack.kubectl("delete", "namespace", namespace, "--timeout=120s", check=False)


def _apply_subscriptions(stack: NodeStack, namespace: str, run: str) -> None:
    """`mine-<run>` matches the test's producer, `billing-<run>` matches no client."""
    for name, client_id in (("mine", f"kct-node-{run}-.*"), ("billing", "billing-.*")):
        stack.kubectl("apply", "-f", "-", stdin=json.dumps({
            "apiVersion": "telemetry.kct.dev/v1alpha1", "kind": "ClientMetricsSubscription",
            "metadata": {"name": f"{name}-{run}", "namespace": namespace},
            "spec": {"metrics": ["org.apache.kafka.producer."], "intervalMs": 60000, "match": {"clientId": client_id}},
        }))


def _condition(resource: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in resource.get("status", {}).get("conditions", []) if c["type"] == type_), {})


def _subscriptions_count_their_clients(stack: NodeStack, namespace: str, run: str, pushing: Callable[[], None]) -> None:
    """The operator (Helm, clients read every CLIENTS_INTERVAL_SECONDS) reads the receiver pods' registries: on
    `mine`, status.clients.matched is the number of clients `kubectl kct clients --subscription` lists (the
    same matching rule; here our one producer) and its CLIENTS column shows it; `billing`, matching nothing,
    gets ClientsMatched=False/NoMatchingClients and a Warning event after NO_CLIENTS_WARNING_SECONDS, while
    both keep the Ready the broker configs gave them."""
    mine, billing = f"mine-{run}", f"billing-{run}"

    def counted() -> dict[str, Any] | None:
        pushing()
        resource: dict[str, Any] = stack.get("clientmetricssubscription", mine, "-n", namespace)
        ready = _condition(resource, "Ready").get("status") == "True"  # kubectl wait still means the broker's configs
        return resource if ready and resource.get("status", {}).get("clients", {}).get("matched") else None

    resource = eventually(counted, timeout=4 * CLIENTS_INTERVAL_SECONDS + 30, interval=1,
                          what=f"status.clients.matched on {namespace}/{mine}")
    listed = _kubectl_kct(stack, "clients", "-n", namespace, "--subscription", mine, "-o", "json")
    assert listed.returncode == 0, listed.stderr
    clients, rows = resource["status"]["clients"], json.loads(listed.stdout)
    assert clients["matched"] == len(rows) == 1, (clients, listed.stdout)
    labels = rows[0]["labels"]
    assert clients["bySoftware"] == [{"name": labels["client_software_name"],
                                      "version": labels["client_software_version"], "count": 1}]
    assert clients["lastPushTime"]
    assert _condition(resource, "ClientsMatched")["status"] == "True"
    column = stack.kubectl("get", "clientmetricssubscription", mine, "-n", namespace, "-o",
                           "custom-columns=CLIENTS:.status.clients.matched", "--no-headers")
    assert column.strip() == "1"

    def warned() -> dict[str, Any] | None:
        pushing()
        resource: dict[str, Any] = stack.get("clientmetricssubscription", billing, "-n", namespace)
        # Matching nothing is not a failure to apply the subscription: Ready stays what the broker made it.
        ready = _condition(resource, "Ready").get("status") == "True"
        return resource if ready and _condition(resource, "ClientsMatched").get("reason") == "NoMatchingClients" \
            else None

    resource = eventually(warned, timeout=NO_CLIENTS_WARNING_SECONDS + 4 * CLIENTS_INTERVAL_SECONDS + 30,
                          interval=1, what=f"Ready=True and ClientsMatched=False/NoMatchingClients on {billing}")
    assert _condition(resource, "ClientsMatched")["status"] == "False"
    assert resource["status"]["clients"]["matched"] == 0

    def warning_event() -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = stack.get(
            "events", "-n", namespace, "--field-selector",
            f"involvedObject.name={billing},reason=NoMatchingClients,type=Warning")["items"]
        return events

    eventually(warning_event, timeout=30, interval=1, what=f"a NoMatchingClients Warning event on {billing}")


def test_client_telemetry_reaches_the_topic_through_receiver_pods(node_stack: NodeStack,
                                                                  telemetry: Telemetry) -> None:
    """Given the operator (Helm) and the TelemetryReceiver the node stack's broker plugin posts to
    When a confluent-kafka producer on the host, matched by a client-metrics subscription, produces
    Then its pushes travel broker plugin -> the receiver's Service -> receiver pods -> the receiver's topic,
    where a consumer on the host reads them; `kubectl kct` finds the client; and the operator counts it on the
    subscription that matches it, while one that matches nothing gets its warning."""
    namespace, topic, run = telemetry.namespace, telemetry.topic, uuid.uuid4().hex[:8]
    subscription = {"metrics": "org.apache.kafka.producer.", "interval.ms": "1000",
                    "match": f"client_id=kct-node-{run}-.*"}
    consumer = Consumer({"bootstrap.servers": node_stack.kafka_bootstrap, "group.id": f"kct-node-{run}",
                         "auto.offset.reset": "earliest", "enable.metrics.push": False})
    consumer.subscribe([topic])
    records = []
    with client_metrics_subscription(node_stack.kafka_bootstrap, f"kct-node-{run}", subscription):
        producer = Producer({"bootstrap.servers": node_stack.kafka_bootstrap,
                             "client.id": f"kct-node-{run}-producer"})

        def landed() -> bool:
            producer.produce(f"node-data-{run}", b"x")
            producer.poll(0)
            message = consumer.poll(0.5)
            if (message is not None and message.error() is None
                    and _header(message, "client_id") == f"kct-node-{run}-producer"):
                records.append(message)
            return bool(records)

        eventually(landed, timeout=120, what=f"a telemetry record in {topic}", interval=0.5)
        _apply_subscriptions(node_stack, namespace, run)

        def pushing() -> None:  # keep the client live while the operator counts it
            producer.produce(f"node-data-{run}", b"x")
            producer.poll(0)

        _subscriptions_count_their_clients(node_stack, namespace, run, pushing)
        producer.flush(10)
    consumer.close()

    assert records[0].value()
    _kubectl_kct_sees_the_client(node_stack, namespace, run, records[0].key().decode())


def _kubectl_kct(stack: NodeStack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(REPO / ".venv" / "bin" / "kubectl-kct"), *args, "--kubeconfig", str(stack.kubeconfig)],
                          capture_output=True, text=True, timeout=60, check=False)


def _kubectl_kct_sees_the_client(stack: NodeStack, namespace: str, run: str, instance_id: str) -> None:
    """`kubectl kct` through the API server's proxy to the receiver pod: the client that pushed is listed with
    the subscription matching it, `why` explains both subscriptions selector by selector, `top` shows it."""
    listed = _kubectl_kct(stack, "clients", "-n", namespace, "-o", "json")
    assert listed.returncode == 0, listed.stderr
    clients = {c["client_instance_id"]: c for c in json.loads(listed.stdout)}
    assert instance_id in clients, listed.stdout
    assert clients[instance_id]["labels"]["client_id"] == f"kct-node-{run}-producer"
    assert clients[instance_id]["subscriptions"] == [f"{namespace}/mine-{run}"]
    why = _kubectl_kct(stack, "why", instance_id, "-n", namespace)
    assert why.returncode == 0, why.stderr
    assert f"{namespace}/mine-{run}: MATCHES" in why.stdout, why.stdout
    assert f"{namespace}/billing-{run}: does not match" in why.stdout, why.stdout
    top = _kubectl_kct(stack, "top", "-n", namespace, "--by", "client")
    assert top.returncode == 0, top.stderr
    assert f"kct-node-{run}-producer/{instance_id[:8]}" in top.stdout, top.stdout


def _header(message: Any, name: str) -> str | None:
    """A record header's value (the broker's KIP-714 labels travel as headers: receiver README)."""
    values = [value for key, value in message.headers() or [] if key == name]
    return values[0].decode() if values else None


@dataclass(frozen=True)
class Push:
    client_id: str
    software: str
    received_ms: int
    resource: dict[str, str]   # the record's resource attributes, attribution's among them


def _push(message: Any) -> Push:
    request = ExportMetricsServiceRequest.FromString(message.value())
    resource = {a.key: a.value.string_value for rm in request.resource_metrics for a in rm.resource.attributes}
    return Push(client_id=_header(message, "client_id") or "", software=_header(message, "client_software_name") or "",
                received_ms=int(_header(message, "kct.received_ms") or 0), resource=resource)


@dataclass(frozen=True)
class ClientPod:
    name: str
    uid: str
    workload: str      # its app.kubernetes.io/name: the Deployment's or StatefulSet's name
    created_ms: int    # creationTimestamp (whole seconds)


def _running_client_pods(stack: NodeStack, pods: ClientPods) -> dict[str, ClientPod]:
    listed = stack.get("pods", "-n", pods.namespace, "-l", f"app.kubernetes.io/part-of={pods.name}")["items"]
    return {p["metadata"]["name"]: ClientPod(
        name=p["metadata"]["name"], uid=p["metadata"]["uid"],
        workload=p["metadata"]["labels"]["app.kubernetes.io/name"],
        created_ms=calendar.timegm(time.strptime(p["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ")) * 1000)
        for p in listed if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")}


def _expected_attributes(pods: ClientPods, pod: ClientPod) -> dict[str, str]:
    owner = ("k8s.deployment.name" if pod.workload == producer_name(pods) else "k8s.statefulset.name")
    return {"k8s.namespace.name": pods.namespace, "k8s.pod.name": pod.name, "k8s.pod.uid": pod.uid,
            owner: pod.workload, "service.name": pod.workload}


def test_client_pods_are_attributed_to_their_own_pod_and_workload(node_stack: NodeStack, telemetry: Telemetry) -> None:
    """Given the receiver's two replicas, and client pods beside them (dev/demo/client_pods.py): a producer
    Deployment of two librdkafka pods and a consumer StatefulSet of a Java pod, each with its pod's name as
    `client.id`, matched by a client-metrics subscription
    When they push, and then a producer pod is deleted and its ReplicaSet replaces it
    Then every push on the receiver's topic carries, as resource attributes, the namespace, name and uid of the
    pod whose name the client gave as its client id, and that pod's Deployment or StatefulSet; both software
    names push; the replacement's pushes are attributed to the new pod (its own name and uid)."""
    assert node_stack.kct_image is not None  # operator_release checked it
    run = uuid.uuid4().hex[:6]
    pods = ClientPods(namespace=telemetry.namespace, name=f"shop-{run}", bootstrap=node_stack.kafka_pod_bootstrap,
                      topic=create_topic(node_stack.kafka_bootstrap, partitions=1, prefix="kct-node-clients",
                                         replication=NODE_REPLICATION),
                      librdkafka_image=node_stack.kct_image, java_image=java_image(node_stack))
    reader = Consumer({"bootstrap.servers": node_stack.kafka_bootstrap, "group.id": f"kct-node-pods-{run}",
                       "auto.offset.reset": "earliest", "enable.metrics.push": False})
    reader.subscribe([telemetry.topic])
    pushes: dict[str, list[Push]] = defaultdict(list)

    def read() -> None:
        for message in reader.consume(num_messages=500, timeout=0.5):
            if message.error() is None and (_header(message, "client_id") or "").startswith(pods.name):
                push = _push(message)
                pushes[push.client_id].append(push)

    def pushed(expected: int, exclude: frozenset[str] = frozenset()) -> dict[str, ClientPod] | None:
        read()
        running = {n: p for n, p in _running_client_pods(node_stack, pods).items() if n not in exclude}
        return running if len(running) == expected and all(pushes.get(n) for n in running) else None

    subscription = {"metrics": "org.apache.kafka.", "interval.ms": "1000", "match": f"client_id={pods.name}-.*"}
    objects = as_list(render_client_pods(pods))
    try:
        with client_metrics_subscription(node_stack.kafka_bootstrap, f"kct-node-pods-{run}", subscription):
            node_stack.kubectl("apply", "-f", "-", stdin=json.dumps(objects))
            first: dict[str, ClientPod] = eventually(
                lambda: pushed(pods.producer_replicas + pods.consumer_replicas), timeout=300, interval=1,
                what="every client pod running and its pushes on the topic")
            victim = next(p for p in first.values() if p.workload == producer_name(pods))
            node_stack.kubectl("delete", "pod", victim.name, "-n", pods.namespace, "--wait=false")
            after: dict[str, ClientPod] = eventually(
                lambda: pushed(len(first), exclude=frozenset({victim.name})), timeout=300, interval=1,
                what=f"the replacement of {victim.name} running and its pushes on the topic")
    finally:
        node_stack.kubectl("delete", "-f", "-", "--wait=false", stdin=json.dumps(objects), check=False)
        reader.close()

    replacement = next(p for p in after.values() if p.name not in first)
    assert replacement.workload == victim.workload and replacement.uid != victim.uid
    for pod in [*first.values(), replacement]:
        expected = _expected_attributes(pods, pod)
        for push in pushes[pod.name]:
            assert {k: push.resource.get(k) for k in expected} == expected, (pod.name, push.resource)
    assert {p.software for ps in pushes.values() for p in ps} == set(CLIENT_SOFTWARE.values())
    assert {k: v for k, v in pushes.items() if k not in {*first, *after}} == {}  # no push from another pod
    for pod in [*first.values(), replacement]:  # the attribution-lag figure (creationTimestamp is whole seconds)
        lag = (min(p.received_ms for p in pushes[pod.name]) - pod.created_ms) / 1000
        print(f"attribution lag {pod.workload} {pod.name}: pod created -> first push attributed {lag:.1f} s "
              f"({len(pushes[pod.name])} pushes, all attributed)")



def test_the_receivers_topic_has_three_replicas_in_sync_and_pods_push_through_every_pod_listener(
        node_stack: NodeStack, telemetry: Telemetry) -> None:
    """Given the node stack's three brokers, each with the plugin, and the TelemetryReceiver the plugins post to,
    asking for replicationFactor 3 and minInsyncReplicas 2
    When its topic is described, and a librdkafka producer pod per broker, bootstrapped from that broker's pod
    address alone, pushes
    Then the topic's partition has a replica on each broker, all three in sync, min.insync.replicas 2 on the
    broker and in the resource's status; and every pod's pushes reach the topic, each record naming one of the
    three brokers as the one whose plugin forwarded it (broker_id). Which broker a librdkafka client pushes
    through is its own choice: eight pods given the list of all three all chose one, and these three pods chose
    one broker in one run and two in another, so the test does not require several."""
    assert node_stack.kct_image is not None  # operator_release checked it
    admin = AdminClient({"bootstrap.servers": node_stack.kafka_bootstrap})

    def in_sync() -> Any:
        partitions = admin.list_topics(topic=telemetry.topic, timeout=30).topics[telemetry.topic].partitions
        return partitions if all(sorted(p.isrs) == [1, 2, 3] for p in partitions.values()) else None

    partitions = eventually(in_sync, timeout=60, interval=1, what=f"every replica of {telemetry.topic} in sync")
    resource = ConfigResource(ResourceType.TOPIC, telemetry.topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    status = node_stack.get("telemetryreceiver", "telemetry", "-n", telemetry.namespace)["status"]["topic"]

    assert [sorted(p.replicas) for p in partitions.values()] == [[1, 2, 3]]
    assert configs["min.insync.replicas"].value == str(NODE_MIN_INSYNC_REPLICAS)
    assert (status["replicationFactor"], status["minInsyncReplicas"], status["brokers"]) == (
        NODE_REPLICATION, NODE_MIN_INSYNC_REPLICAS, 3)

    run = uuid.uuid4().hex[:6]
    topic = create_topic(node_stack.kafka_bootstrap, partitions=3, prefix="kct-node-spread",
                         replication=NODE_REPLICATION)
    # Producers only: no consumer pod runs, so the Java image is never started.
    groups = [ClientPods(namespace=telemetry.namespace, name=f"spread-{run}-{i}", bootstrap=address, topic=topic,
                         librdkafka_image=node_stack.kct_image, java_image=node_stack.kct_image,
                         producer_replicas=1, consumer_replicas=0, rate_per_s=2.0)
              for i, address in enumerate(node_stack.kafka_pod_bootstrap.split(","))]
    reader = Consumer({"bootstrap.servers": node_stack.kafka_bootstrap, "group.id": f"kct-node-spread-{run}",
                       "auto.offset.reset": "earliest", "enable.metrics.push": False})
    reader.subscribe([telemetry.topic])
    brokers_of: dict[str, set[str]] = defaultdict(set)  # client id (the pod's name) -> broker ids it pushed through

    def every_pod_pushed() -> set[str] | None:
        for message in reader.consume(num_messages=500, timeout=0.5):
            if message.error() is None and (_header(message, "client_id") or "").startswith(f"spread-{run}-"):
                brokers_of[_header(message, "client_id") or ""].add(_header(message, "broker_id") or "")
        pushed = {client.split("-producer-")[0] for client in brokers_of}
        return {broker for through in brokers_of.values() for broker in through} \
            if pushed == {group.name for group in groups} else None

    subscription = {"metrics": "org.apache.kafka.producer.", "interval.ms": "1000",
                    "match": f"client_id=spread-{run}-.*"}
    # One ConfigMap of the clients' code for the three groups (each renders the same one).
    objects = render_client_pods(groups[0]) + [o for g in groups[1:] for o in render_client_pods(g)
                                               if o["kind"] != "ConfigMap"]
    try:
        with client_metrics_subscription(node_stack.kafka_bootstrap, f"kct-node-spread-{run}", subscription):
            node_stack.kubectl("apply", "-f", "-", stdin=json.dumps(as_list(objects)))
            brokers = eventually(every_pod_pushed, timeout=240, interval=1,
                                 what=f"pushes of each of spread-{run}'s pods on the topic")
    finally:
        node_stack.kubectl("delete", "-f", "-", "--wait=false", stdin=json.dumps(as_list(objects)), check=False)
        reader.close()

    assert brokers <= {"1", "2", "3"}, brokers
    chosen = {client: sorted(through) for client, through in sorted(brokers_of.items())}
    print(f"brokers the producer pods pushed through: {chosen}")
