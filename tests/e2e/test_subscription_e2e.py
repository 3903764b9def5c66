"""ClientMetricsSubscription end to end: real API server, real broker, `kct operator` as a subprocess.

What a new user would try: the CRDs apply; invalid resources are refused by `kubectl apply` naming the
field; a valid resource becomes the broker's CLIENT_METRICS config (read back with kafka-python's own
admin client, not the operator's wrapper) and `kubectl wait --for=condition=Ready` succeeds; edits,
drift, deletion, a bad regex, a conflict and a Kafka outage behave as the README says; and a
subscription matching one real client by clientId makes that client push and another not.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
import yaml
from helpers import KCT, REPO, Kubectl, OperatorProcess, eventually, kubectl_with_crds, unique
from preconditions import missing_precondition

pytestmark = pytest.mark.e2e

RESYNC_SECONDS = 3
CMS = "clientmetricssubscription"


def manifest(namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "telemetry.kct.dev/v1alpha1",
        "kind": "ClientMetricsSubscription",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


class Broker:
    """Reads and writes CLIENT_METRICS configs with kafka-python's KafkaAdminClient directly."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self._client: Any = None

    def _admin(self) -> Any:
        from kafka.admin import KafkaAdminClient

        if self._client is None:
            self._client = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=10000)
        return self._client

    def configs(self, name: str) -> dict[str, str]:
        from kafka.admin import ConfigResource, ConfigResourceType

        try:
            result = self._admin().describe_configs([ConfigResource(ConfigResourceType.CLIENT_METRICS, name)])
        except Exception:
            self.close()
            raise
        found = result.get("client_metrics", {}).get(name, {})
        return {key: entry["value"] for key, entry in found.items() if entry.get("value") is not None}

    def set(self, name: str, configs: dict[str, str]) -> None:
        from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType

        ops = {key: (AlterConfigOp.SET, value) for key, value in configs.items()}
        resource = ConfigResource(ConfigResourceType.CLIENT_METRICS, name, configs=ops)
        result = self._admin().alter_configs([resource], raise_on_unknown=False, incremental=True)
        assert result["client_metrics"][name] == "OK", result

    def names(self) -> list[str]:
        from kafka.admin import ConfigResourceType

        found = self._admin().list_config_resources([ConfigResourceType.CLIENT_METRICS])
        return list(found.get("client_metrics", []))

    def may_match(self, name: str, client_id: str) -> bool:
        """Whether subscription `name` could select a client with this client.id (conservatively)."""
        import re2

        configs = self.configs(name)
        if not configs.get("metrics"):
            return False
        selectors = dict(item.split("=", 1) for item in configs.get("match", "").split(",") if "=" in item)
        if "client_id" not in selectors:
            return True
        return re2.fullmatch(selectors["client_id"], client_id) is not None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


@pytest.fixture(scope="module")
def kubectl(stack: Any) -> Kubectl:
    return kubectl_with_crds(stack.kubeconfig)


@pytest.fixture(scope="module")
def broker(stack: Any) -> Iterator[Broker]:
    client = Broker(stack.kafka_bootstrap)
    yield client
    client.close()


@pytest.fixture(scope="module")
def operator_process(stack: Any, kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory
                     ) -> Iterator[OperatorProcess]:
    log_path = tmp_path_factory.mktemp("operator") / "operator.log"
    env = stack.env()
    env["KCT_RESYNC_SECONDS"] = str(RESYNC_SECONDS)
    env["KCT_BACKOFF_MAX_SECONDS"] = "5"
    operator = OperatorProcess(env, log_path)
    try:
        operator.start(timeout=60)
        yield operator
    finally:
        operator.stop()
        sys.stderr.write(f"--- operator log ({log_path}) tail ---\n{operator.log_tail()}\n")


def _no_match() -> dict[str, str]:
    # Every subscription here selects a client id no real client has, so none but the last test's
    # subscription makes any client push.
    return {"clientId": unique("kct-e2e-nobody")}


INVALID = [
    ({"metrics": ["*"], "intervalMs": 50}, "spec.intervalMs"),
    ({"metrics": ["*"], "intervalMs": 4_000_000}, "spec.intervalMs"),
    ({"metrics": ["*"], "match": {"clientHost": "x"}}, "clientHost"),
    ({"metrics": [""]}, "spec.metrics[0]"),
    ({"metrics": ["a,b"]}, "spec.metrics[0]"),
    ({"metrics": ["*", "org."]}, "spec.metrics"),
]


@pytest.mark.parametrize(("spec", "field"), INVALID, ids=[f for _, f in INVALID])
def test_invalid_resources_refused_by_apply(kubectl: Kubectl, namespace: str, spec: dict[str, Any],
                                            field: str) -> None:
    """Given an invalid spec, When applied with kubectl, Then the API server refuses it naming the field."""
    proc = kubectl.apply(manifest(namespace, unique("bad"), **spec), check=False)
    assert proc.returncode != 0
    assert field in proc.stderr, proc.stderr


def test_subscription_name_is_immutable(kubectl: Kubectl, namespace: str) -> None:
    """Given a resource, When its subscriptionName is changed, added or removed, Then apply refuses;
    adding one equal to metadata.name (the effective name does not change) is accepted."""
    name = unique("immutable")
    kubectl.apply(manifest(namespace, name, metrics=["*"], match=_no_match(), subscriptionName="first"))
    changed = kubectl.apply(manifest(namespace, name, metrics=["*"], subscriptionName="second"), check=False)
    assert changed.returncode != 0 and "spec.subscriptionName" in changed.stderr, changed.stderr
    removed = kubectl.run("patch", "cms", name, "-n", namespace, "--type=json",
                          "-p", '[{"op":"remove","path":"/spec/subscriptionName"}]', check=False)
    assert removed.returncode != 0 and "spec.subscriptionName" in removed.stderr, removed.stderr
    other = unique("defaulted")
    # Every apply keeps a match no client has: without one the subscription matches every client, and an
    # operator running for another test would put it on the broker, where it makes other tests' clients push.
    no_match = _no_match()
    kubectl.apply(manifest(namespace, other, metrics=["*"], match=no_match))
    assert kubectl.apply(manifest(namespace, other, metrics=["*"], match=no_match, subscriptionName="renamed"),
                         check=False).returncode != 0
    kubectl.apply(manifest(namespace, other, metrics=["*"], match=no_match, subscriptionName=other))


def test_examples_apply_cleanly(kubectl: Kubectl, namespace: str) -> None:
    """Given the README's example files, When applied (server-side dry run), Then they are accepted."""
    for path in sorted((REPO / "examples" / "subscriptions").glob("*.yaml")):
        proc = kubectl.run("apply", "--dry-run=server", "-n", namespace, "-f", str(path), check=False)
        assert proc.returncode == 0, f"{path.name}: {proc.stderr}"


def test_lifecycle_apply_edit_drift_delete(kubectl: Kubectl, broker: Broker, operator_process: OperatorProcess,
                                         namespace: str) -> None:
    """Given the operator, When a resource is applied, edited, drifted behind its back and deleted,
    Then the broker follows each step and kubectl wait sees Ready."""
    name = unique("lifecycle")
    match = _no_match()
    kubectl.apply(manifest(namespace, name, metrics=["org.apache.kafka.producer."], intervalMs=60000, match=match))
    kubectl.run("wait", f"cms/{name}", "-n", namespace, "--for=condition=Ready", "--timeout=60s")
    assert broker.configs(name) == {
        "metrics": "org.apache.kafka.producer.",
        "interval.ms": "60000",
        "match": f"client_id={match['clientId']}",
    }
    status = kubectl.get(CMS, name, namespace)["status"]
    assert status["observedGeneration"] == 1 and status["subscriptionName"] == name

    # Edit: the broker follows.
    kubectl.apply(manifest(namespace, name, metrics=["*"], intervalMs=5000, match=match))
    eventually(lambda: broker.configs(name).get("interval.ms") == "5000" and broker.configs(name)["metrics"] == "*",
               timeout=30, what="the edit to reach the broker")

    # Drift: changed with the Admin API behind the operator's back, reverted within one resync.
    eventually(lambda: kubectl.get(CMS, name, namespace)["status"].get("observedGeneration") == 2,
               timeout=30, what="generation 2 to be reconciled")
    broker.set(name, {"interval.ms": "123456"})
    eventually(lambda: broker.configs(name).get("interval.ms") == "5000",
               timeout=RESYNC_SECONDS * 2 + 10, what="drift to be reverted")
    eventually(lambda: kubectl.get(CMS, name, namespace)["status"].get("driftReverted", 0) >= 1,
               timeout=15, what="status.driftReverted")

    # Delete: the subscription goes, the finalizer lets the resource go.
    kubectl.run("delete", "cms", name, "-n", namespace, "--timeout=60s")
    eventually(lambda: broker.configs(name) == {}, timeout=30, what="the subscription to be deleted")


def test_pause_annotation(kubectl: Kubectl, broker: Broker, operator_process: OperatorProcess, namespace: str) -> None:
    """Given a Ready resource, When paused, its config changed on the broker and its spec edited, Then the
    operator sees the edit (ReconciliationPaused observes generation 2) yet leaves the broker alone, across a
    resync too, and status.observedGeneration stays 1; When unpaused, Then the edit reaches the broker."""
    name = unique("paused")
    kubectl.apply(manifest(namespace, name, metrics=["a."], intervalMs=60000, match=_no_match()))
    kubectl.run("wait", f"cms/{name}", "-n", namespace, "--for=condition=Ready", "--timeout=60s")
    kubectl.run("annotate", "cms", name, "-n", namespace, "telemetry.kct.dev/paused=true")
    kubectl.run("wait", f"cms/{name}", "-n", namespace, "--for=condition=ReconciliationPaused", "--timeout=30s")
    broker.set(name, {"interval.ms": "7777"})
    kubectl.apply(manifest(namespace, name, metrics=["a."], intervalMs=30000, match=_no_match()))
    eventually(lambda: kubectl.condition(CMS, name, namespace, "ReconciliationPaused").get("observedGeneration") == 2,
               timeout=30, what="the operator to see generation 2 while paused")
    operator_process.wait_for_resync(namespace, name, timeout=RESYNC_SECONDS * 4 + 30)  # still hands off
    assert broker.configs(name)["interval.ms"] == "7777"
    assert kubectl.get(CMS, name, namespace)["status"]["observedGeneration"] == 1
    kubectl.run("annotate", "cms", name, "-n", namespace, "telemetry.kct.dev/paused-")
    eventually(lambda: broker.configs(name).get("interval.ms") == "30000", timeout=RESYNC_SECONDS * 2 + 10,
               what="the edit made while paused to reach the broker after unpausing")
    eventually(lambda: kubectl.get(CMS, name, namespace)["status"].get("observedGeneration") == 2,
               timeout=30, what="observedGeneration 2 after unpausing")


def test_client_metrics_cli_marks_unmanaged(stack: Any, kubectl: Kubectl, broker: Broker,
                                             operator_process: OperatorProcess, namespace: str) -> None:
    """Given one subscription managed by a resource and one made with the Admin API, When
    `kct client-metrics --list` runs, Then the second is marked UNMANAGED; `--describe` prints a resource
    that, applied, makes the operator adopt it without changing the broker."""
    managed = unique("managed")
    kubectl.apply(manifest(namespace, managed, metrics=["a."], match=_no_match()))
    kubectl.run("wait", f"cms/{managed}", "-n", namespace, "--for=condition=Ready", "--timeout=60s")
    legacy = f"Legacy_{uuid.uuid4().hex[:6]}"
    broker.set(legacy, {"metrics": "org.apache.kafka.consumer.", "interval.ms": "30000",
                        "match": f"client_id=kct-e2e-nobody-{legacy}"})
    env = stack.env()
    listing = subprocess.run([str(KCT), "client-metrics", "--bootstrap-server", stack.kafka_bootstrap, "--list"],
                             env=env, capture_output=True, text=True, timeout=60, check=True).stdout
    lines = dict(line.split("\t", 1) for line in listing.splitlines())
    assert lines[managed] == f"managed by ClientMetricsSubscription {namespace}/{managed}"
    assert lines[legacy] == "UNMANAGED (no ClientMetricsSubscription)"
    described = subprocess.run(
        [str(KCT), "client-metrics", "--bootstrap-server", stack.kafka_bootstrap, "--describe", "--name", legacy,
         "-n", namespace], env=env, capture_output=True, text=True, timeout=60, check=True).stdout
    kubectl.run("apply", "-f", "-", stdin=described)
    adopted = yaml.safe_load(described.split("---", 1)[1])["metadata"]["name"]
    kubectl.run("wait", f"cms/{adopted}", "-n", namespace, "--for=condition=Ready", "--timeout=60s")
    assert "already in effect" in kubectl.condition(CMS, adopted, namespace, required=True)["message"]
    kubectl.run("delete", "cms", adopted, "-n", namespace, "--timeout=60s")
    eventually(lambda: broker.configs(legacy) == {}, timeout=30, what="the adopted subscription to be deleted")


def test_bad_regex_is_not_ready(kubectl: Kubectl, broker: Broker, operator_process: OperatorProcess,
                                namespace: str) -> None:
    """Given a match regex RE2 refuses, When applied, Then Ready=False/InvalidSpec with field, value and
    reason, and nothing on the broker."""
    name = unique("badregex")
    kubectl.apply(manifest(namespace, name, metrics=["*"], match={"clientId": "app-(.*"}))
    kubectl.run("wait", f"cms/{name}", "-n", namespace, "--for=condition=Ready=False", "--timeout=60s")
    ready = kubectl.condition(CMS, name, namespace, required=True)
    assert ready["reason"] == "InvalidSpec"
    assert "spec.match.clientId: 'app-(.*' is not a valid RE2 regular expression" in ready["message"]
    assert broker.configs(name) == {}


def test_later_claimant_gets_conflict(kubectl: Kubectl, broker: Broker, operator_process: OperatorProcess,
                                      namespace: str) -> None:
    """Given a resource owning a subscription name, When a later one claims the same name, Then the later
    gets Ready=False/Conflict and the broker keeps the first one's configs."""
    first = unique("owner")
    match = _no_match()
    kubectl.apply(manifest(namespace, first, metrics=["a."], match=match))
    kubectl.run("wait", f"cms/{first}", "-n", namespace, "--for=condition=Ready", "--timeout=60s")
    time.sleep(1.1)  # duration: creationTimestamp has one-second resolution; the claimant must be younger
    second = unique("claimant")
    kubectl.apply(manifest(namespace, second, metrics=["b."], subscriptionName=first, match=match))
    eventually(lambda: kubectl.condition(CMS, second, namespace, required=True).get("reason") == "Conflict",
               timeout=30, what="the Conflict condition")
    assert f"{namespace}/{first}" in kubectl.condition(CMS, second, namespace, required=True)["message"]
    operator_process.wait_for_resync(namespace, first, second, timeout=RESYNC_SECONDS * 4 + 30)
    assert broker.configs(first)["metrics"] == "a."
    assert kubectl.condition(CMS, first, namespace, required=True)["status"] == "True"

    # Both go at once (as when their namespace is deleted): the subscription must not be left behind.
    kubectl.run("delete", "cms", first, second, "-n", namespace, "--timeout=60s")
    eventually(lambda: broker.configs(first) == {}, timeout=30, what="the contested subscription to go")


def test_interval_above_cap_warns(kubectl: Kubectl, operator_process: OperatorProcess, namespace: str) -> None:
    """Given intervalMs 600000, When applied, Then Ready=True and IntervalCapped=True."""
    name = unique("capped")
    kubectl.apply(manifest(namespace, name, metrics=["*"], intervalMs=600000, match=_no_match()))
    kubectl.run("wait", f"cms/{name}", "-n", namespace, "--for=condition=Ready", "--timeout=60s")
    assert kubectl.condition(CMS, name, namespace, "IntervalCapped", required=True)["status"] == "True"


def test_kafka_outage_is_reported_and_recovered(stack: Any, kubectl: Kubectl, broker: Broker,
                                                operator_process: OperatorProcess, namespace: str) -> None:
    """Given a Ready resource, When Kafka stops and the resource is edited, Then Ready=False names
    KafkaUnreachable; When Kafka starts again, Then the edit reaches the broker, without restarting
    the operator."""
    stack.require_local("a Kafka outage")
    name = unique("outage")
    match = _no_match()
    kubectl.apply(manifest(namespace, name, metrics=["a."], intervalMs=60000, match=match))
    kubectl.run("wait", f"cms/{name}", "-n", namespace, "--for=condition=Ready", "--timeout=60s")
    broker.close()
    stack.kafka_stop()
    try:
        kubectl.apply(manifest(namespace, name, metrics=["b."], intervalMs=60000, match=match))
        eventually(lambda: kubectl.condition(CMS, name, namespace, required=True).get("reason") == "KafkaUnreachable",
                   timeout=90, what="Ready=False/KafkaUnreachable")
        assert kubectl.condition(CMS, name, namespace, required=True)["status"] == "False"
    finally:
        stack.kafka_start()
    kubectl.run("wait", f"cms/{name}", "-n", namespace, "--for=condition=Ready", "--timeout=120s")
    eventually(lambda: broker.configs(name).get("metrics") == "b.", timeout=30, what="the edit after recovery")
    assert operator_process.proc is not None and operator_process.proc.poll() is None


class _PushRecorder(BaseHTTPRequestHandler):
    pushes: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        type(self).pushes.append(self.headers.get("kct-client-id", ""))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_only_the_matching_client_pushes(stack: Any, kubectl: Kubectl, broker: Broker,
                                         operator_process: OperatorProcess, namespace: str) -> None:
    """Given a subscription matching one client id, When two real confluent-kafka clients run, Then the
    plugin's endpoint receives pushes from that client and none from the other."""
    from confluent_kafka import Producer

    endpoint = urllib.parse.urlparse(stack.telemetry_endpoint)
    try:
        server = ThreadingHTTPServer((endpoint.hostname or "127.0.0.1", endpoint.port or 4318), _PushRecorder)
    except OSError as error:
        missing_precondition(f"telemetry endpoint {stack.telemetry_endpoint} is in use ({error})")
    _PushRecorder.pushes = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    wanted, other = unique("kct-e2e-wanted"), unique("kct-e2e-other")
    name = unique("onlyone")
    producers: list[Any] = []
    try:
        foreign = [n for n in broker.names() if broker.may_match(n, other)]
        if foreign:
            missing_precondition(f"subscriptions {foreign} on the broker (not ours) could make {other} push too")
        kubectl.apply(manifest(namespace, name, metrics=["*"], intervalMs=1000, match={"clientId": wanted}))
        kubectl.run("wait", f"cms/{name}", "-n", namespace, "--for=condition=Ready", "--timeout=60s")
        producers = [Producer({"bootstrap.servers": stack.kafka_bootstrap, "client.id": cid})
                     for cid in (wanted, other)]

        def pushed() -> bool:
            for producer in producers:
                producer.poll(0.1)
            return wanted in _PushRecorder.pushes

        eventually(pushed, timeout=60, what=f"a push from {wanted}")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            for producer in producers:
                producer.poll(0.1)
        assert other not in _PushRecorder.pushes
    finally:
        for producer in producers:
            producer.flush(5)
        server.shutdown()
        server.server_close()
        kubectl.run("delete", "cms", name, "-n", namespace, "--timeout=60s", check=False)

