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

import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from aggregation_support import create_topic
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from helpers import REPO, eventually
from node_support import (
    CLIENTS_INTERVAL_SECONDS,
    NO_CLIENTS_WARNING_SECONDS,
    NodeStack,
    Release,
    telemetry_receiver,
    wait_ready,
)
from plugin_support import client_metrics_subscription
from preconditions import missing_precondition

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
    topic = create_topic(node_stack.kafka_bootstrap, partitions=1, prefix="kct-node-receiver")
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
    """Given the node stack's broker (inside its namespace)
    When a client on the host bootstraps from KAFKA_BOOTSTRAP_SERVERS
    Then it gets the cluster's metadata, whose one broker is that same host address (the forwarder)."""
    admin = AdminClient({"bootstrap.servers": node_stack.kafka_bootstrap})

    metadata = admin.list_topics(timeout=30)

    assert [f"{b.host}:{b.port}" for b in metadata.brokers.values()] == [node_stack.kafka_bootstrap]


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


def test_client_telemetry_reaches_the_topic_through_receiver_pods(node_stack: NodeStack,
                                                                  operator_release: Release) -> None:
    """Given the operator (Helm) and the TelemetryReceiver the node stack's broker plugin posts to
    (`telemetry` in `kct-telemetry`, holding the plugin's token)
    When a confluent-kafka producer on the host, matched by a client-metrics subscription, produces
    Then its pushes travel broker plugin -> the receiver's Service -> receiver pods -> the receiver's topic,
    where a consumer on the host reads them."""
    assert node_stack.kct_image is not None  # operator_release checked it
    namespace, run = "kct-telemetry", uuid.uuid4().hex[:8]
    topic = f"client-telemetry-{run}"
    token = node_stack.receiver_token_file.read_text().strip()
    objects = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "broker-token", "namespace": namespace},
         "stringData": {"token": token}},
        telemetry_receiver(namespace, node_stack.kct_image, node_stack.kafka_pod_bootstrap, topic, "broker-token"),
    ]
    node_stack.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    try:
        wait_ready(node_stack, namespace)
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
                if message is not None and message.error() is None:
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
