"""`kubectl kct` against an in-memory cluster: what it asks the API (service proxy, token header), how it
merges replicas and matches subscriptions, what it prints, and its errors."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import yaml

from kct.kubectl.cluster import Forbidden
from kct.kubectl.command import main
from kct.kubectl.fake import FakeCluster

NOW = 1_700_000_100_000


def _receiver(namespace: str, name: str, auth: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name}, "spec": {"receiver": {"auth": auth}} if auth else {}}


def _subscription(namespace: str, name: str, match: dict[str, str] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"metrics": ["org.apache.kafka.producer."]}
    if match is not None:
        spec["match"] = match
    return {"metadata": {"namespace": namespace, "name": name}, "spec": spec}


def _client(instance: str, client_id: str, software: str, last_ms: int, *, pod: str = "", deployment: str = "",
            pushes: int = 1, metrics: dict[str, float] | None = None) -> dict[str, Any]:
    attributes = {"k8s.namespace.name": "shop", "k8s.pod.name": pod} if pod else {}
    if deployment:
        attributes["k8s.deployment.name"] = deployment
    return {"client_instance_id": instance,
            "labels": {"client_id": client_id, "client_software_name": software, "client_software_version": "3.9.0",
                       "principal": "User:shop", "client_source_address": "10.1.0.5", "client_source_port": "4000"},
            "attributes": attributes, "first_push_ms": last_ms - 60_000, "last_push_ms": last_ms, "pushes": pushes,
            "metrics": metrics or {}}


def _doc(*clients: dict[str, Any]) -> dict[str, Any]:
    return {"receiver": "r-0", "now_ms": NOW, "clients": list(clients), "tracked": len(clients), "evicted": 0,
            "expired": 0}


@pytest.fixture
def cluster() -> FakeCluster:
    cluster = FakeCluster()
    cluster.add("telemetryreceivers", _receiver("kafka", "telemetry"))
    cluster.secrets[("kafka", "telemetry-token", "token")] = "s3cret"
    cluster.answers[("kafka", "services", "telemetry-receiver", 4318)] = _doc(
        _client("aaaaaaaa-1111", "checkout-1", "apache-kafka-java", NOW - 5_000, pod="checkout-7d9f-x",
                deployment="checkout", metrics={"records_per_s": 50.0, "request_latency_max_ms": 31.0}),
        _client("bbbbbbbb-2222", "billing", "librdkafka", NOW - 120_000,
                metrics={"records_per_s": 5.0, "request_latency_max_ms": 80.0}),
    )
    java_only = _subscription("kafka", "java-only", {"clientSoftwareName": "apache-kafka-java"})
    cluster.add("clientmetricssubscriptions", java_only)
    cluster.add("clientmetricssubscriptions", _subscription("kafka", "everyone", None))
    cluster.add("clientmetricssubscriptions", _subscription("kafka", "checkout", {"clientId": "checkout"}))
    return cluster


def _run(cluster: FakeCluster, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    status = main(list(argv), make_cluster=lambda _args: cluster, out=out, now_ms=lambda: NOW)
    return status, out.getvalue()


def test_clients_asks_the_service_proxy_with_the_token_in_the_read_header(cluster: FakeCluster) -> None:
    status, output = _run(cluster, "clients", "-n", "kafka")
    assert status == 0
    assert cluster.calls == [
        ("kafka", "services", "telemetry-receiver", 4318, "/v1/clients", {"X-Kct-Read-Token": "s3cret"})]
    assert output.splitlines() == [
        "INSTANCE   CLIENT ID    SOFTWARE                  WORKLOAD              POD                    LAST PUSH   "
        "SUBSCRIPTIONS",
        "aaaaaaaa   checkout-1   apache-kafka-java/3.9.0   deployment/checkout   shop/checkout-7d9f-x   5s          "
        "kafka/everyone,kafka/java-only",
        "bbbbbbbb   billing      librdkafka/3.9.0          <none>                <none>                 2m          "
        "kafka/everyone",
    ]


def test_no_token_is_read_when_the_receiver_takes_unauthenticated_pushes(cluster: FakeCluster) -> None:
    cluster.objects["telemetryreceivers"] = [_receiver("kafka", "telemetry", {"enabled": False})]
    assert _run(cluster, "clients", "-n", "kafka")[0] == 0
    assert cluster.calls[0][5] == {}


def test_a_named_token_secret_is_used(cluster: FakeCluster) -> None:
    cluster.objects["telemetryreceivers"] = [
        _receiver("kafka", "telemetry", {"tokenSecretRef": {"name": "push-token", "key": "value"}})]
    cluster.secrets[("kafka", "push-token", "value")] = "other"
    assert _run(cluster, "clients", "-n", "kafka")[0] == 0
    assert cluster.calls[0][5] == {"X-Kct-Read-Token": "other"}


def test_every_replica_behind_the_service_is_asked_through_its_pod(cluster: FakeCluster) -> None:
    # Given two ready receiver pods, each of which stored pushes of a client the other did not
    cluster.endpoints[("kafka", "telemetry-receiver")] = ["telemetry-receiver-a", "telemetry-receiver-b"]
    cluster.answers[("kafka", "pods", "telemetry-receiver-a", 4318)] = _doc(
        _client("aaaaaaaa-1111", "checkout-1", "apache-kafka-java", NOW - 5_000))
    cluster.answers[("kafka", "pods", "telemetry-receiver-b", 4318)] = _doc(
        _client("cccccccc-3333", "search", "librdkafka", NOW - 9_000))
    # When the clients are listed
    status, output = _run(cluster, "clients", "-n", "kafka", "-o", "json")
    # Then both pods were asked (not the Service) and both clients are listed
    assert status == 0
    assert [(kind, name) for _, kind, name, *_ in cluster.calls] == [
        ("pods", "telemetry-receiver-a"), ("pods", "telemetry-receiver-b")]
    assert [row["client_instance_id"] for row in json.loads(output)] == ["aaaaaaaa-1111", "cccccccc-3333"]


def test_without_rights_on_pods_the_service_is_asked_with_a_warning(
    cluster: FakeCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.endpoints[("kafka", "telemetry-receiver")] = Forbidden("you may not get Endpoints kafka/telemetry-receiver")
    status, _ = _run(cluster, "clients", "-n", "kafka")
    assert status == 0 and [kind for _, kind, *_ in cluster.calls] == ["services"]
    assert "asked Service kafka/telemetry-receiver instead, which reaches one replica" in capsys.readouterr().err
    # the same when the Endpoints are readable but proxying to pods is not allowed
    cluster.calls.clear()
    cluster.endpoints[("kafka", "telemetry-receiver")] = ["telemetry-receiver-a"]
    cluster.answers[("kafka", "pods", "telemetry-receiver-a", 4318)] = Forbidden("you may not proxy to pod")
    assert _run(cluster, "clients", "-n", "kafka")[0] == 0
    assert [kind for _, kind, *_ in cluster.calls] == ["pods", "services"]


def test_json_output_merges_replicas_keeping_the_newest_entry(cluster: FakeCluster) -> None:
    # Given a second receiver that saw the checkout client too, earlier, under another client id
    cluster.add("telemetryreceivers", _receiver("kafka", "second"))
    cluster.secrets[("kafka", "second-token", "token")] = "t2"
    cluster.answers[("kafka", "services", "second-receiver", 4318)] = _doc(
        _client("aaaaaaaa-1111", "old-name", "apache-kafka-java", NOW - 50_000, pushes=3))
    status, output = _run(cluster, "clients", "-n", "kafka", "-o", "json")
    rows = json.loads(output)
    assert status == 0 and [r["client_instance_id"] for r in rows] == ["aaaaaaaa-1111", "bbbbbbbb-2222"]
    checkout = rows[0]
    assert checkout["labels"]["client_id"] == "checkout-1" and checkout["pushes"] == 4
    assert checkout["first_push_ms"] == NOW - 110_000
    assert checkout["workload"] == "deployment/checkout"
    assert checkout["subscriptions"] == ["kafka/everyone", "kafka/java-only"]
    assert yaml.safe_load(_run(cluster, "clients", "-n", "kafka", "-o", "yaml")[1]) == rows


def test_subscription_filter_and_wide_output(cluster: FakeCluster) -> None:
    status, output = _run(cluster, "clients", "-n", "kafka", "--subscription", "java-only", "-o", "wide")
    lines = output.splitlines()
    assert status == 0 and len(lines) == 2
    assert lines[0].split()[-4:] == ["PRINCIPAL", "SOURCE", "BROKER", "PUSHES"]
    assert "aaaaaaaa-1111" in lines[1] and "User:shop" in lines[1] and "10.1.0.5:4000" in lines[1]
    assert _run(cluster, "clients", "-n", "kafka", "--subscription", "nope")[0] == 1


def test_why_shows_every_selector_with_value_and_regex(cluster: FakeCluster) -> None:
    status, output = _run(cluster, "why", "checkout-7d9f-x", "-n", "kafka")
    assert status == 0
    assert output.splitlines() == [
        "client aaaaaaaa-1111 (checkout-1, deployment/checkout, pod shop/checkout-7d9f-x)",
        "  kafka/checkout: does not match",
        "    FAIL client_id = 'checkout-1' against ^(?:checkout)$",
        "  kafka/everyone: MATCHES",
        "    (no match selectors: every client)",
        "  kafka/java-only: MATCHES",
        "    ok   client_software_name = 'apache-kafka-java' against ^(?:apache-kafka-java)$",
    ]
    assert _run(cluster, "why", "bbbbbbbb", "-n", "kafka")[1].startswith("client bbbbbbbb-2222 (billing")
    assert _run(cluster, "why", "nobody", "-n", "kafka")[0] == 1


def test_top_by_workload_and_by_client_sorted_by_a_metric(cluster: FakeCluster) -> None:
    status, output = _run(cluster, "top", "-n", "kafka", "--sort", "request_latency_max_ms")
    lines = output.splitlines()
    assert status == 0 and lines[0].split()[:3] == ["WORKLOAD", "RECORDS/S", "BYTES/S"]
    assert [line.split()[0] for line in lines[1:]] == ["<none>", "deployment/checkout"]
    assert lines[2].split()[1:3] == ["50.0", "-"]
    by_client = _run(cluster, "top", "-n", "kafka", "--by", "client")[1].splitlines()
    assert [line.split()[0] for line in by_client[1:]] == ["checkout-1/aaaaaaaa", "billing/bbbbbbbb"]


def test_clear_errors_when_crds_or_receivers_are_absent(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(FakeCluster(crds=False), "clients", "-A")[0] == 1
    assert "CRD is not installed" in capsys.readouterr().err
    assert _run(FakeCluster(), "clients", "-n", "shop")[0] == 1
    assert "no TelemetryReceiver in namespace 'shop'" in capsys.readouterr().err


def test_receivers_that_do_not_answer_are_named(cluster: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    # One receiver without endpoints next to one that answers: a warning, the clients of the other
    cluster.add("telemetryreceivers", _receiver("kafka", "down"))
    cluster.secrets[("kafka", "down-token", "token")] = "x"
    assert _run(cluster, "clients", "-n", "kafka")[0] == 0
    warned = capsys.readouterr().err
    assert "warning: services kafka/down-receiver:4318/v1/clients: 503 no endpoints available" in warned
    # None answering: an error naming each, here a token the user may not read
    cluster.answers.clear()
    refused = Forbidden("you may not proxy to Service kafka/telemetry-receiver")
    cluster.answers[("kafka", "services", "telemetry-receiver", 4318)] = refused
    assert _run(cluster, "clients", "-n", "kafka")[0] == 1
    err = capsys.readouterr().err
    assert err.startswith("error: no receiver answered:") and "may not proxy to Service kafka/telemetry-receiver" in err


def test_completion_script_names_the_subcommands_and_their_options(cluster: FakeCluster) -> None:
    status, script = _run(cluster, "completion", "bash")
    assert status == 0 and "complete -F _kubectl_kct kubectl-kct" in script
    assert 'clients) words="' in script and "--subscription" in script and "--sort" in script


def test_receivers_are_asked_over_https_unless_their_tls_is_disabled(cluster: FakeCluster) -> None:
    """Given a receiver with the default spec (TLS on), Then the proxy call is https; with
    `receiver.tls.mode: disabled` it is http."""
    assert _run(cluster, "clients", "-n", "kafka")[0] == 0
    assert cluster.schemes == ["https"]
    plain = _receiver("kafka", "telemetry", {"enabled": True})
    plain["spec"]["receiver"]["tls"] = {"mode": "disabled"}
    cluster.objects["telemetryreceivers"] = [plain]
    assert _run(cluster, "clients", "-n", "kafka")[0] == 0
    assert cluster.schemes == ["https", "http"]
