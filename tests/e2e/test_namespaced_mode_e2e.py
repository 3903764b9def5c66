"""A namespaced operator (`kct operator --namespace NS`) whose namespace is deleted, end to end.

Deleting a namespace deletes its resources in no particular order: the ClientMetricsSubscriptions (held by
our finalizer until the broker's configs are removed), the Secret their `spec.kafka.secretRef` names, the
events the operator would post. The operator must release every finalizer, remove the subscriptions from
the broker, and let the namespace go, instead of retrying forever and leaving it Terminating.
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import Kubectl, OperatorProcess, eventually, kubectl_with_crds, unique

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def kubectl(stack: Any) -> Kubectl:
    return kubectl_with_crds(stack.kubeconfig)


def client_metrics_names(bootstrap: str) -> set[str]:
    """The CLIENT_METRICS resources the broker lists (kafka-python's own admin client)."""
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kct-e2e-nsdel")
    try:
        found = admin.list_config_resources([ConfigResourceType.CLIENT_METRICS])
    finally:
        admin.close()
    return set(found.get("client_metrics", []))


@pytest.fixture
def doomed_namespace(kubectl: Kubectl) -> Iterator[str]:
    name = unique("kct-doomed")
    kubectl.run("create", "namespace", name)
    yield name
    kubectl.run("delete", "namespace", name, "--wait=false", check=False)


@pytest.mark.parametrize("restarted", [False, True], ids=["running", "restarted-after-secret-deletion"])
def test_deleting_the_watched_namespace_releases_everything(stack: Any, kubectl: Kubectl, doomed_namespace: str,
                                                           tmp_path: Path, restarted: bool) -> None:
    """Given an operator watching only NS with two subscriptions there (one using a Kafka Secret of NS),
    When the Secret and then NS are deleted, Then NS disappears and the operator is still running; both
    subscriptions are gone from the broker, or, when the operator restarted between the Secret's deletion
    and the namespace's (it never held a client for that Secret), the one it cannot reach is named in its
    log as left on the broker."""
    namespace = doomed_namespace
    protocol = base64.b64encode(b"PLAINTEXT").decode()
    kubectl.run("apply", "-f", "-", stdin=f"""
apiVersion: v1
kind: Secret
metadata: {{name: kafka-client, namespace: {namespace}}}
data: {{security.protocol: {protocol}}}
""")
    plain, with_secret = unique("nsdel-plain"), unique("nsdel-secret")
    for name, kafka in ((plain, None), (with_secret, {"bootstrapServers": stack.kafka_bootstrap,
                                                       "secretRef": {"name": "kafka-client"}})):
        spec: dict[str, Any] = {"metrics": ["org.apache.kafka.producer."], "intervalMs": 60000,
                                "match": {"clientId": f"nobody-{name}"}}
        if kafka:
            spec["kafka"] = kafka
        kubectl.apply({"apiVersion": "telemetry.kct.dev/v1alpha1", "kind": "ClientMetricsSubscription",
                       "metadata": {"name": name, "namespace": namespace}, "spec": spec})
    env = stack.env()
    env["KCT_WATCH_NAMESPACES"] = namespace
    env["KCT_BACKOFF_MAX_SECONDS"] = "5"
    operator = OperatorProcess(env, tmp_path / "operator.log")
    try:
        operator.start(timeout=60)
        for name in (plain, with_secret):
            kubectl.run("wait", f"cms/{name}", "-n", namespace, "--for=condition=Ready", "--timeout=60s")
        assert {plain, with_secret} <= client_metrics_names(stack.kafka_bootstrap)

        # The namespace controller deletes in no set order; the worst one for us: the Secret goes first.
        kubectl.run("delete", "secret", "kafka-client", "-n", namespace)
        if restarted:
            operator.restart()
        kubectl.run("delete", "namespace", namespace, "--wait=false")
        eventually(lambda: kubectl.run("get", "namespace", namespace, check=False).returncode != 0, timeout=90,
                   what=f"namespace {namespace} to be gone")
        left = client_metrics_names(stack.kafka_bootstrap)
        assert plain not in left
        if restarted:
            assert with_secret in left
            assert f"CLIENT_METRICS {with_secret!r} is left on the broker" in operator.log_tail(20000)
        else:
            assert with_secret not in left
        assert operator.proc is not None and operator.proc.poll() is None, operator.log_tail()
    finally:
        operator.stop()
        sys.stderr.write(f"--- operator log tail ---\n{operator.log_tail(4000)}\n")
        from kct.kafka.kafka_python import KafkaPythonClientMetricsAdmin

        admin = KafkaPythonClientMetricsAdmin(stack.kafka_bootstrap, {})
        try:  # what the operator had to leave behind must not leak into other tests
            for name in {plain, with_secret} & client_metrics_names(stack.kafka_bootstrap):
                admin.delete_subscription(name)
        finally:
            admin.close()
