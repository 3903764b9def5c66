"""Day-2 operations on the node stack, with the operator installed by Helm and real pods: a Helm upgrade rolls
the operator while the TelemetryReceiver stays Ready; the leader operator pod killed right after a spec edit;
a receiver pod deleted; a config change rolling the receiver pods while a load generator pushes (every
acknowledged push must be in the topic); the generated token Secret rotated while the broker plugin pushes;
and at the end `helm uninstall`, which leaves the CRDs and the custom resources.

One node stack, one Helm release and one TelemetryReceiver (`telemetry` in `kct-telemetry`, the Service the
node stack's broker plugin posts to, with the operator's generated token) serve the whole module; the tests
run in file order and each leaves the receiver Ready for the next. Counts and durations are printed (run
with `-s` to see them), never asserted against a clock.
"""

from __future__ import annotations

import base64
import contextlib
import gc
import json
import os
import secrets
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from helpers import eventually
from node_support import (
    CHART,
    RECEIVER_TLS,
    NodeStack,
    Release,
    chart_values,
    in_node,
    node_env,
    ready_condition,
    telemetry_receiver,
    wait_ready,
)
from plugin_support import client_metrics_subscription

pytestmark = pytest.mark.e2e

NAMESPACE = "kct-telemetry"  # where the node stack's broker plugin posts: telemetry-receiver.kct-telemetry.svc
RECEIVER_LABEL = "app.kubernetes.io/component=receiver"
OK_COUNT = ('http_server_request_duration_seconds_count{http_request_method="POST",http_response_status_code="200",'
            'http_route="/v1/metrics"}')


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")


@dataclass
class TopicWatch:
    """A consumer on the host reading the receiver's topic from the start, in a thread, for the module."""

    stack: NodeStack
    topic: str
    records: list[tuple[str, dict[str, str], float]] = field(default_factory=list)  # key, headers, seen at
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        consumer = Consumer({"bootstrap.servers": self.stack.kafka_bootstrap, "group.id": f"ops-{uuid.uuid4().hex}",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False,
                             "enable.metrics.push": False, "topic.metadata.refresh.interval.ms": 1000})
        consumer.subscribe([self.topic])
        while not self.stop.is_set():
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            headers = {str(pair[0]): _text(pair[1]) for pair in message.headers() or []}
            with self.lock:
                self.records.append((_text(message.key()), headers, time.time()))
        consumer.close()

    def keys(self) -> set[str]:
        with self.lock:
            return {key for key, _, _ in self.records}

    def count(self) -> int:
        with self.lock:
            return len(self.records)

    def from_clients(self, prefix: str, since: float) -> list[str]:
        """Client ids (of the broker plugin's pushes) starting with `prefix` in records seen after `since`."""
        with self.lock:
            return [h.get("client_id", "") for _, h, seen in self.records
                    if seen > since and h.get("client_id", "").startswith(prefix)]


@dataclass(frozen=True)
class Receiver:
    namespace: str
    topic: str
    watch: TopicWatch

    def resource(self, stack: NodeStack) -> dict[str, Any]:
        found: dict[str, Any] = stack.get("telemetryreceiver", "telemetry", "-n", self.namespace)
        return found

    def pods(self, stack: NodeStack) -> list[dict[str, Any]]:
        pods: list[dict[str, Any]] = stack.get("pods", "-n", self.namespace, "-l", RECEIVER_LABEL)["items"]
        return pods

    def token(self, stack: NodeStack) -> str:
        secret = stack.get("secret", "telemetry-token", "-n", self.namespace)
        return base64.b64decode(secret["data"]["token"]).decode()


def _write_atomically(path: Path, text: str) -> None:
    """As the plugin's token file is meant to be replaced: a rename, never a half-written file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.chmod(0o600)
    os.replace(tmp, path)


def _remove(stack: NodeStack, namespace: str) -> None:
    """Delete the TelemetryReceiver and its namespace; without an operator (after the uninstall test) nobody
    removes its finalizer, so this does."""
    stack.kubectl("delete", "telemetryreceiver", "telemetry", "-n", namespace, "--wait=true", "--timeout=40s",
                  check=False)
    stack.kubectl("patch", "telemetryreceiver", "telemetry", "-n", namespace, "--type=merge",
                  "-p", '{"metadata":{"finalizers":null}}', check=False)
    stack.kubectl("delete", "namespace", namespace, "--timeout=50s", check=False)


@pytest.fixture(scope="module")
def receiver(node_stack: NodeStack, operator_release: Release) -> Iterator[Receiver]:
    """The TelemetryReceiver the broker plugin posts to, with the operator's generated token, which the
    plugin's token file is set to (and restored afterwards)."""
    assert node_stack.kct_image is not None  # operator_release checked it
    # A namespace of that name still terminating (an earlier run's) would take the new resource with it.
    eventually(lambda: not node_stack.kubectl("get", "namespace", NAMESPACE, "--ignore-not-found", "-o", "name"),
               timeout=180, what=f"an earlier {NAMESPACE} namespace to be gone", interval=2)
    topic = f"client-telemetry-ops-{uuid.uuid4().hex[:8]}"
    resource = telemetry_receiver(NAMESPACE, node_stack.kct_image, node_stack.kafka_pod_bootstrap, topic)
    node_stack.kubectl("apply", "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "List",
         "items": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}, resource]}))
    original_token = node_stack.receiver_token_file.read_text()
    watch = TopicWatch(node_stack, topic)
    thread = threading.Thread(target=watch.run, daemon=True)
    try:
        wait_ready(node_stack, NAMESPACE)
        found = Receiver(NAMESPACE, topic, watch)
        _write_atomically(node_stack.receiver_token_file, found.token(node_stack) + "\n")
        thread.start()
        yield found
    finally:
        watch.stop.set()
        thread.join(10)
        _write_atomically(node_stack.receiver_token_file, original_token)
        _remove(node_stack, NAMESPACE)


@contextlib.contextmanager
def plugin_clients(stack: NodeStack, prefix: str, count: int = 3) -> Iterator[list[str]]:
    """confluent-kafka producers on the host, matched by a client-metrics subscription (push every second),
    producing while the block runs; at its end they are destroyed (their last push sent) and the subscription
    removed."""
    ids = [f"{prefix}-{i}" for i in range(count)]
    subscription = {"metrics": "org.apache.kafka.producer.", "interval.ms": "1000", "match": f"client_id={prefix}-.*"}
    stop = threading.Event()
    with client_metrics_subscription(stack.kafka_bootstrap, prefix, subscription):
        producers = [Producer({"bootstrap.servers": stack.kafka_bootstrap, "client.id": i}) for i in ids]

        def produce() -> None:
            while not stop.is_set():
                for producer in producers:
                    producer.produce(f"{prefix}-data", b"x")
                    producer.poll(0)
                time.sleep(0.25)  # duration: the clients' produce rate (four rounds a second)

        thread = threading.Thread(target=produce, daemon=True)
        thread.start()
        try:
            yield ids
        finally:
            stop.set()
            thread.join(10)
            for producer in producers:
                producer.flush(10)
            producers.clear()
            gc.collect()  # destroys the librdkafka handles: their terminating pushes go now, not at exit


# Runs in the node's network namespace: every pod's Prometheus counters of accepted (200) and unauthenticated
# (401) pushes, as JSON {pod ip: [ok, unauthenticated]}.
_SCRAPE = RECEIVER_TLS + """
import json, sys, urllib.request
ok_name = sys.argv[1]
out = {}
for ip in sys.argv[2:]:
    ok = unauth = 0.0
    for line in urllib.request.urlopen(f"https://{ip}:4318/metrics", timeout=5).read().decode().splitlines():
        if line.startswith(ok_name + " "):
            ok += float(line.rsplit(" ", 1)[1])
        elif line.startswith("kct_receiver_rejections_total{") and 'reason="unauthenticated"' in line:
            unauth += float(line.rsplit(" ", 1)[1])
    out[ip] = [ok, unauth]
print(json.dumps(out))
"""

# Runs in the node's network namespace: a push with the token in argv[2] to each pod address in argv[3:];
# prints their HTTP statuses.
_PROBE = RECEIVER_TLS + """
import sys, urllib.request, urllib.error
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
request = ExportMetricsServiceRequest()
metric = request.resource_metrics.add().scope_metrics.add().metrics.add()
metric.name = "kct.e2e.ops.probe"
metric.gauge.data_points.add().as_int = 1
statuses = []
for ip in sys.argv[3:]:
    req = urllib.request.Request(f"https://{ip}:4318/v1/metrics", data=request.SerializeToString(), method="POST",
                                 headers={"Content-Type": "application/x-protobuf",
                                          "Authorization": "Bearer " + sys.argv[2],
                                          "kct-client-instance-id": sys.argv[1] + "-" + ip})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            statuses.append(resp.status)
    except urllib.error.HTTPError as exc:
        statuses.append(exc.code)
print(" ".join(map(str, statuses)))
"""

# Runs in the node's network namespace: THREADS loops posting OTLP pushes to the Service URL in argv[1] with
# the token in argv[2], each push with its own client instance id (the record's key); one line per push,
# "<status> <id>" (status 0: no HTTP answer), until stdin closes.
_LOAD = RECEIVER_TLS + """
import sys, threading, time, urllib.request, urllib.error
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
url, token, run = sys.argv[1], sys.argv[2], sys.argv[3]
request = ExportMetricsServiceRequest()
metric = request.resource_metrics.add().scope_metrics.add().metrics.add()
metric.name = "kct.e2e.ops.load"
metric.gauge.data_points.add().as_int = 1
body = request.SerializeToString()
stop, out = threading.Event(), threading.Lock()
def loop(n):
    i = 0
    while not stop.is_set():
        i += 1
        push_id = f"{run}-{n}-{i}"
        req = urllib.request.Request(url, data=body, method="POST", headers={
            "Content-Type": "application/x-protobuf", "Authorization": "Bearer " + token,
            "kct-client-instance-id": push_id, "kct-client-id": run})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                status = resp.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        except OSError:
            status = 0
        with out:
            print(status, push_id, flush=True)
        time.sleep(0.05)
threads = [threading.Thread(target=loop, args=(n,)) for n in range(4)]
for t in threads:
    t.start()
sys.stdin.read()
stop.set()
for t in threads:
    t.join()
"""


@dataclass
class LoadGenerator:
    """`_LOAD` in the node's network namespace; `answers` collects its "<status> <id>" lines as they come."""

    proc: subprocess.Popen[str]
    answers: list[tuple[int, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            status, push_id = line.split()
            with self.lock:
                self.answers.append((int(status), push_id))

    def acknowledged(self) -> list[str]:
        with self.lock:
            return [push_id for status, push_id in self.answers if status == 200]

    def statuses(self) -> dict[int, int]:
        with self.lock:
            counts: dict[int, int] = {}
            for status, _ in self.answers:
                counts[status] = counts.get(status, 0) + 1
            return counts


@contextlib.contextmanager
def load_generator(stack: NodeStack, url: str, token: str, run: str) -> Iterator[LoadGenerator]:
    proc = subprocess.Popen([*stack.node_exec, sys.executable, "-c", _LOAD, url, token, run], env=node_env(stack),
                            stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    load = LoadGenerator(proc)
    reader = threading.Thread(target=load.read, daemon=True)
    reader.start()
    try:
        yield load
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        reader.join(10)
        assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""


def _pod_ips(pods: list[dict[str, Any]]) -> list[str]:
    return [p["status"]["podIP"] for p in pods]


def _rolled_out(stack: NodeStack, receiver: Receiver, old_pods: set[str], config_hash: str) -> bool:
    """The receiver's Deployment runs only new pods, all ready and carrying `config_hash`, the old ones gone."""
    deployment = stack.get("deployment", "telemetry-receiver", "-n", receiver.namespace)
    status, wanted = deployment["status"], deployment["spec"]["replicas"]
    pods = receiver.pods(stack)
    return bool(status.get("observedGeneration") == deployment["metadata"]["generation"]
                and status.get("updatedReplicas") == wanted and status.get("readyReplicas") == wanted
                and len(pods) == wanted and not old_pods & {p["metadata"]["name"] for p in pods}
                and all(p["metadata"]["annotations"].get("telemetry.kct.dev/config-hash") == config_hash
                        and all(s["ready"] for s in p["status"].get("containerStatuses", [{"ready": False}]))
                        for p in pods))


def _converged(stack: NodeStack, receiver: Receiver) -> str | None:
    """The config hash the receiver's status reports once it observed its current generation and is Ready."""
    resource = receiver.resource(stack)
    status = resource.get("status", {})
    ready = {c["type"]: c["status"] for c in status.get("conditions", [])}.get("Ready")
    if status.get("observedGeneration") != resource["metadata"]["generation"] or ready != "True":
        return None
    config_hash: str = status["configHash"]
    return config_hash


def _edit_producer_properties(stack: NodeStack, receiver: Receiver, linger_ms: int) -> None:
    """A spec change that changes the receivers' config file (so the pods' config hash)."""
    stack.kubectl("patch", "telemetryreceiver", "telemetry", "-n", receiver.namespace, "--type=merge", "-p",
                  json.dumps({"spec": {"receiver": {"producerProperties": {"linger.ms": str(linger_ms)}}}}))


def _operator_pods(stack: NodeStack, release: Release) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = stack.get("pods", "-n", release.namespace, "-l",
                                           f"app.kubernetes.io/instance={release.name}")["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def _lease_holder(stack: NodeStack, release: Release) -> str:
    leases = stack.get("leases", "-n", release.namespace)["items"]
    assert len(leases) == 1, leases
    holder: str = leases[0]["spec"].get("holderIdentity") or ""
    return holder


def test_helm_upgrade_rolls_the_operator_and_the_receiver_stays_ready(
        node_stack: NodeStack, operator_release: Release, receiver: Receiver) -> None:
    """Given the release and a Ready TelemetryReceiver on real pods
    When `helm upgrade` changes a value (the operator's log level: debug)
    Then every operator pod is replaced by one running with `--verbose`, the TelemetryReceiver is Ready=True
    at every look during the upgrade, and its receiver pods are not touched (the new operator's reconcile
    renders the same children)."""
    before = {p["metadata"]["name"] for p in _operator_pods(node_stack, operator_release)}
    receiver_pods = {p["metadata"]["name"] for p in receiver.pods(node_stack)}
    seen: list[str] = []
    done = threading.Event()

    def watch_ready() -> None:
        while not done.is_set():
            seen.append(str(ready_condition(node_stack, receiver.namespace).get("status")))
            time.sleep(1)  # duration: one look at Ready a second for as long as the upgrade lasts

    watcher = threading.Thread(target=watch_ready, daemon=True)
    watcher.start()
    started = time.monotonic()
    try:
        operator_release.run("upgrade", operator_release.name, str(CHART), *chart_values(node_stack),
                             "--set", "operator.logLevel=debug", "--wait", "--timeout", "240s")
        rollout_s = time.monotonic() - started
        eventually(lambda: {p["metadata"]["name"] for p in _operator_pods(node_stack, operator_release)}
                   .isdisjoint(before), timeout=120, what="the old operator pods to be gone")
        # The new leader's first reconcile of the receiver (kopf resumes every resource when it starts), which
        # must leave it Ready: seen in that pod's log, then one more look at Ready after it.
        leader = eventually(lambda: (h := _lease_holder(node_stack, operator_release)) in {
            p["metadata"]["name"] for p in _operator_pods(node_stack, operator_release)} and h, timeout=120,
            what="one of the new operator pods to hold the Lease", interval=1)
        resumed = f"[{receiver.namespace}/telemetry] Resuming is processed"
        eventually(lambda: resumed in node_stack.kubectl("logs", leader, "-n", operator_release.namespace,
                                                         check=False),
                   timeout=120, what=f"the new leader {leader} to resume the TelemetryReceiver", interval=1)
        looks = len(seen)
        eventually(lambda: len(seen) > looks, timeout=30, what="a look at Ready after the new leader's reconcile")
    finally:
        done.set()
        watcher.join(10)
    after = _operator_pods(node_stack, operator_release)

    print(f"\nhelm upgrade: operator rolled in {rollout_s:.1f}s; Ready seen {len(seen)} times: {set(seen)}")
    assert after and all("--verbose" in p["spec"]["containers"][0]["args"] for p in after)
    assert all(s["ready"] for p in after for s in p["status"]["containerStatuses"])
    assert seen and set(seen) == {"True"}, seen
    assert {p["metadata"]["name"] for p in receiver.pods(node_stack)} == receiver_pods


def test_leader_killed_right_after_a_spec_edit_converges(
        node_stack: NodeStack, operator_release: Release, receiver: Receiver) -> None:
    """Given the release's operator pods, one holding the Lease
    When the TelemetryReceiver's spec is edited (a producer property, so the receiver config) and the leader
    pod is force-deleted at once
    Then another pod takes the Lease, the resource's status observes the new generation with a new config
    hash, Ready=True, and the receiver's Deployment rolls to pods carrying that hash. (The killed pod's
    process may still finish the reconcile it started: a forced delete removes the Pod object at once, the
    kubelet stops the container afterwards; either way nothing may be left half done.)"""
    # A pod replaced just before (the upgrade test) may still name the Lease until it expires: wait for one of
    # the release's running pods to hold it, so the pod killed below is the leader.
    leader = eventually(lambda: (h := _lease_holder(node_stack, operator_release)) in {
        p["metadata"]["name"] for p in _operator_pods(node_stack, operator_release)} and h, timeout=120,
        what="one of the release's operator pods to hold the Lease", interval=1)
    old_hash = receiver.resource(node_stack)["status"]["configHash"]
    old_pods = {p["metadata"]["name"] for p in receiver.pods(node_stack)}

    _edit_producer_properties(node_stack, receiver, 7)
    started = time.monotonic()
    node_stack.kubectl("delete", "pod", leader, "-n", operator_release.namespace, "--grace-period=0", "--force")
    new_hash = eventually(lambda: (h := _converged(node_stack, receiver)) != old_hash and h, timeout=180,
                          what="the TelemetryReceiver to observe the edit", interval=1)
    converged_s = time.monotonic() - started
    eventually(lambda: _rolled_out(node_stack, receiver, old_pods, new_hash), timeout=240,
               what="the receiver pods to roll to the new config", interval=1)
    rolled_s = time.monotonic() - started
    holder = eventually(lambda: (h := _lease_holder(node_stack, operator_release)) != leader and h, timeout=120,
                        what="another operator pod to take the Lease", interval=1)
    taken_s = time.monotonic() - started

    print(f"\nleader {leader} killed: status converged after {converged_s:.1f}s, receiver pods rolled after "
          f"{rolled_s:.1f}s; Lease taken by {holder} after {taken_s:.1f}s")
    assert holder in {p["metadata"]["name"] for p in _operator_pods(node_stack, operator_release)}
    assert _converged(node_stack, receiver) == new_hash
    deployment = node_stack.get("deployment", "telemetry-receiver", "-n", receiver.namespace)
    template = deployment["spec"]["template"]["metadata"]["annotations"]
    assert template["telemetry.kct.dev/config-hash"] == new_hash
    config_map = node_stack.get("configmap", "telemetry-receiver", "-n", receiver.namespace)
    assert "linger.ms" in "".join(config_map["data"].values())


def test_a_deleted_receiver_pod_is_replaced_and_pushes_resume(node_stack: NodeStack, receiver: Receiver) -> None:
    """Given broker-plugin clients pushing through the receiver's only pod
    When that pod is deleted
    Then the Deployment replaces it with a new ready pod, and the clients' pushes land in the topic again after
    the new pod is ready (each client's)."""
    prefix = f"ops-del-{uuid.uuid4().hex[:6]}"
    with plugin_clients(node_stack, prefix) as clients:
        eventually(lambda: set(receiver.watch.from_clients(prefix, 0)) == set(clients), timeout=120,
                   what="every client's pushes in the topic")
        (old,) = receiver.pods(node_stack)
        started = time.monotonic()
        node_stack.kubectl("delete", "pod", old["metadata"]["name"], "-n", receiver.namespace)

        def replaced() -> bool:
            pods = receiver.pods(node_stack)
            return bool(len(pods) == 1 and pods[0]["metadata"]["name"] != old["metadata"]["name"]
                        and all(s["ready"] for s in pods[0]["status"].get("containerStatuses", [{"ready": False}])))

        eventually(replaced, timeout=180, what="a new ready receiver pod", interval=1)
        replaced_at, replaced_s = time.time(), time.monotonic() - started
        eventually(lambda: set(receiver.watch.from_clients(prefix, replaced_at)) == set(clients), timeout=120,
                   what="every client's pushes after the replacement")
        resumed_s = time.monotonic() - started

    print(f"\nreceiver pod deleted: replaced and ready after {replaced_s:.1f}s, every client's pushes in the topic "
          f"again after {resumed_s:.1f}s")


def test_a_config_change_rolls_the_receivers_without_losing_acknowledged_pushes(
        node_stack: NodeStack, receiver: Receiver) -> None:
    """Given a load generator in the node posting OTLP pushes to the receiver's Service (each with its own client
    instance id, the record's key), and broker-plugin clients pushing too
    When a spec change gives the receivers a new config hash and the Deployment rolls its pods
    Then the rollout completes while pushes go on, every push gets an HTTP answer, and every push a receiver
    answered 200 is a record in the topic (zero acknowledged pushes lost)."""
    service = node_stack.get("service", "telemetry-receiver", "-n", receiver.namespace)
    url = f"https://{service['spec']['clusterIP']}:4318/v1/metrics"
    run = f"ops-roll-{uuid.uuid4().hex[:6]}"
    old_hash = receiver.resource(node_stack)["status"]["configHash"]
    old_pods = {p["metadata"]["name"] for p in receiver.pods(node_stack)}
    with plugin_clients(node_stack, run + "-plugin"), \
            load_generator(node_stack, url, receiver.token(node_stack), run) as load:
        eventually(lambda: len(load.acknowledged()) >= 20, timeout=60, what="pushes acknowledged before the change")
        acked_before = len(load.acknowledged())
        _edit_producer_properties(node_stack, receiver, 9)
        started = time.monotonic()
        new_hash = eventually(lambda: (h := _converged(node_stack, receiver)) != old_hash and h, timeout=120,
                              what="the TelemetryReceiver to observe the edit", interval=1)
        eventually(lambda: _rolled_out(node_stack, receiver, old_pods, new_hash), timeout=240,
                   what="the receiver pods to roll to the new config", interval=1)
        rollout_s = time.monotonic() - started
        acked_rolled = len(load.acknowledged())
        eventually(lambda: len(load.acknowledged()) >= acked_rolled + 20, timeout=60,
                   what="pushes acknowledged by the new pods")
    acknowledged = load.acknowledged()
    eventually(lambda: set(acknowledged) <= receiver.watch.keys(), timeout=60,
               what="every acknowledged push in the topic")
    records = receiver.watch.keys() & {push_id for _, push_id in load.answers}

    print(f"\nrollout with a new config hash: {rollout_s:.1f}s; pushes answered {load.statuses()} "
          f"({acked_before} acknowledged before the change, {acked_rolled - acked_before} during the rollout); "
          f"acknowledged {len(acknowledged)}, their records in the topic {len(set(acknowledged) & records)}, "
          f"records of this run {len(records)}")
    assert acked_rolled > acked_before
    assert len(set(acknowledged)) == len(acknowledged)
    assert not set(acknowledged) - records
    # Every push got an HTTP answer: the old pods keep serving through their preStop pause, until kube-proxy
    # stopped sending them new connections (without it 11-16 pushes per rollout met a closed listener).
    assert load.statuses().get(0, 0) == 0, load.statuses()


def _scrape(stack: NodeStack, receiver: Receiver) -> dict[str, list[float]]:
    counts: dict[str, list[float]] = json.loads(
        in_node(stack, _SCRAPE, OK_COUNT, *_pod_ips(receiver.pods(stack))))
    return counts


def _quiet(stack: NodeStack, receiver: Receiver) -> tuple[float, int]:
    """(200s summed over the pods, records in the topic), read once neither has moved for 3 s."""
    seen: list[tuple[float, int]] = []

    def settled() -> tuple[float, int] | None:
        seen.append((sum(ok for ok, _ in _scrape(stack, receiver).values()), receiver.watch.count()))
        return seen[-1] if len(seen) > 1 and seen[-1] == seen[-2] else None

    counts: tuple[float, int] = eventually(settled, timeout=90, what="pushes and records to settle", interval=3)
    return counts


def test_the_rotated_token_secret_reaches_receivers_and_plugin_without_lost_pushes(
        node_stack: NodeStack, receiver: Receiver) -> None:
    """Given broker-plugin clients pushing with the generated token
    When the generated Secret gets a new token, and (once every receiver pod accepts it: kubelet updated the
    mounted file) the plugin's token file too
    Then no push is refused (no new 401 on any pod), every client's pushes reach the topic after the plugin
    switched, the pods are the same ones (no restart), and every 200 the pods answered during the test is a
    record in the topic."""
    pods = {p["metadata"]["name"]: p["status"]["containerStatuses"][0]["restartCount"]
            for p in receiver.pods(node_stack)}
    ips = _pod_ips(receiver.pods(node_stack))
    ok_before, records_before = _quiet(node_stack, receiver)
    unauth_before = sum(u for _, u in _scrape(node_stack, receiver).values())
    new_token = secrets.token_urlsafe(32)
    prefix = f"ops-rot-{uuid.uuid4().hex[:6]}"
    with plugin_clients(node_stack, prefix) as clients:
        eventually(lambda: set(receiver.watch.from_clients(prefix, 0)) == set(clients), timeout=120,
                   what="every client's pushes in the topic")
        started = time.monotonic()
        node_stack.kubectl("patch", "secret", "telemetry-token", "-n", receiver.namespace, "--type=merge", "-p",
                           json.dumps({"stringData": {"token": new_token}}))
        probes: list[str] = []  # the statuses of our direct pushes with the new token: 401 until kubelet updates

        def accepted() -> bool:
            statuses = in_node(node_stack, _PROBE, prefix, new_token, *ips).split()
            probes.extend(statuses)
            return set(statuses) == {"200"}

        eventually(accepted, timeout=240, what="every receiver pod to accept the new token", interval=2)
        accepted_s = time.monotonic() - started
        _write_atomically(node_stack.receiver_token_file, new_token + "\n")
        switched = time.time()
        eventually(lambda: set(receiver.watch.from_clients(prefix, switched + 3)) == set(clients), timeout=120,
                   what="every client's pushes after the plugin switched tokens")
    ok_after, records_after = _quiet(node_stack, receiver)
    unauth_after = sum(u for _, u in _scrape(node_stack, receiver).values())
    operator_token = eventually(lambda: receiver.token(node_stack), what="the Secret's token")

    print(f"\ntoken rotation: receivers accepted the new token after {accepted_s:.1f}s; 200s during the test "
          f"{ok_after - ok_before:.0f}, records {records_after - records_before}, new 401s "
          f"{unauth_after - unauth_before:.0f} (our probes before kubelet updated the file: {probes.count('401')})")
    assert unauth_after - unauth_before == probes.count("401")  # none from the plugin
    assert ok_after - ok_before == records_after - records_before > 0
    assert {p["metadata"]["name"]: p["status"]["containerStatuses"][0]["restartCount"]
            for p in receiver.pods(node_stack)} == pods
    assert operator_token == new_token  # the operator keeps a token it did not make


def test_helm_uninstall_removes_the_operator_and_keeps_crds_and_resources(
        node_stack: NodeStack, operator_release: Release, receiver: Receiver) -> None:
    """Given the release (last in this module: the operator is gone afterwards)
    When it is uninstalled
    Then its Deployment, ServiceAccount, ClusterRoles and bindings are gone, while the CRDs and the
    TelemetryReceiver stay (the chart's README: Helm's crds/ are never deleted)."""
    instance = f"app.kubernetes.io/instance={operator_release.name}"
    assert node_stack.get("clusterroles", "-l", instance)["items"]

    operator_release.run("uninstall", operator_release.name, "--wait", "--timeout", "120s")

    for kind in ("deployments", "serviceaccounts", "roles", "rolebindings"):
        assert not node_stack.get(kind, "-n", operator_release.namespace, "-l", instance)["items"], kind
    for kind in ("clusterroles", "clusterrolebindings"):
        assert not node_stack.get(kind, "-l", instance)["items"], kind
    eventually(lambda: not _operator_pods(node_stack, operator_release), timeout=60, what="the operator pods to go")
    crds = {c["metadata"]["name"] for c in node_stack.get("crds")["items"]}
    assert {"telemetryreceivers.telemetry.kct.dev", "clientmetricssubscriptions.telemetry.kct.dev"} <= crds
    assert receiver.resource(node_stack)["metadata"]["name"] == "telemetry"
