"""`kct client-metrics`: kafka-client-metrics.sh flags in, ClientMetricsSubscription YAML out."""

from __future__ import annotations

import io
from typing import Any

import pytest
import yaml

from kct import clientmetrics_cli
from kct.cli import build_parser
from kct.kafka.fake import InMemoryClientMetricsAdmin
from kct.kafka.properties import kafka_python_settings


def run(argv: list[str], monkeypatch: pytest.MonkeyPatch, admin: InMemoryClientMetricsAdmin | None = None,
        managed: dict[str, list[str]] | None = None) -> tuple[int, str, str]:
    if admin is not None:
        monkeypatch.setattr(clientmetrics_cli, "_admin", lambda args: admin)
    monkeypatch.setattr(clientmetrics_cli, "managed_subscriptions", lambda: managed or {})
    args = build_parser().parse_args(["client-metrics", *argv])
    out, err = io.StringIO(), io.StringIO()
    code = clientmetrics_cli._handle(args, out, err)
    return code, out.getvalue(), err.getvalue()


def test_alter_prints_resource(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given kafka-client-metrics.sh --alter flags, When run, Then the equivalent resource is printed."""
    code, out, _ = run([
        "--alter", "--name", "checkout-producers", "--metrics", "org.apache.kafka.producer.",
        "--interval", "60000", "--match", "client_id=checkout-.*,client_software_name=apache-kafka-java",
        "--namespace", "team-a",
    ], monkeypatch)
    assert code == 0
    document = yaml.safe_load(out)
    assert document == {
        "apiVersion": "telemetry.kct.dev/v1alpha1",
        "kind": "ClientMetricsSubscription",
        "metadata": {"name": "checkout-producers", "namespace": "team-a"},
        "spec": {
            "metrics": ["org.apache.kafka.producer."],
            "intervalMs": 60000,
            "match": {"clientId": "checkout-.*", "clientSoftwareName": "apache-kafka-java"},
        },
    }


def test_alter_keeps_non_dns_name_in_subscription_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given a subscription name that is not a valid metadata.name, Then it goes to spec.subscriptionName."""
    _, out, _ = run(["--alter", "--name", "Basic_Producer", "--metrics", "*"], monkeypatch)
    document = yaml.safe_load(out)
    assert document["metadata"]["name"] == "basic-producer"
    assert document["spec"]["subscriptionName"] == "Basic_Producer"


def test_alter_generate_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given --generate-name, Then a UUID names the subscription."""
    _, out, _ = run(["--alter", "--generate-name", "--metrics", "*"], monkeypatch)
    assert len(yaml.safe_load(out)["metadata"]["name"]) == 36


def test_alter_merges_with_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given an existing subscription, When --alter changes only the interval, Then metrics and match
    come from the cluster, as kafka-client-metrics.sh --alter would keep them."""
    existing = {"metrics": "a.", "interval.ms": "1000", "match": "client_id=x"}
    admin = InMemoryClientMetricsAdmin(resources={"s": existing})
    argv = ["--bootstrap-server", "k:9092", "--alter", "--name", "s", "--interval", "5000"]
    _, out, _ = run(argv, monkeypatch, admin)
    assert yaml.safe_load(out)["spec"] == {"metrics": ["a."], "intervalMs": 5000, "match": {"clientId": "x"}}


def test_invalid_flags_name_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given an interval below the minimum or an unknown selector, Then exit 2 and the error names it."""
    code, _, err = run(["--alter", "--name", "s", "--metrics", "*", "--interval", "50"], monkeypatch)
    assert code == 2 and "spec.intervalMs" in err
    code, _, err = run(["--alter", "--name", "s", "--metrics", "*", "--match", "host=x"], monkeypatch)
    assert code == 2 and "host=x" in err


def test_list_marks_unmanaged(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given two subscriptions on the cluster, one managed by a resource, When listed, Then the other is
    marked UNMANAGED."""
    admin = InMemoryClientMetricsAdmin(resources={"a": {"metrics": "*"}, "b": {"metrics": "*"}})
    _, out, _ = run(["--bootstrap-server", "k:9092", "--list"], monkeypatch, admin, {"a": ["team-a/a"]})
    assert out.splitlines() == [
        "a\tmanaged by ClientMetricsSubscription team-a/a",
        "b\tUNMANAGED (no ClientMetricsSubscription)",
    ]


def test_describe_unmanaged_prints_adoptable_resources(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given an unmanaged subscription, When described with --unmanaged-only, Then a resource equal to
    its configs is printed, ready for kubectl apply."""
    admin = InMemoryClientMetricsAdmin(resources={
        "a": {"metrics": "*"},
        "legacy_sub": {"metrics": "org.apache.kafka.consumer.", "interval.ms": "30000",
                       "match": "client_software_name=kafka-python,client_software_version=1\\.2\\..*"},
    })
    _, out, _ = run(["--bootstrap-server", "k:9092", "--describe", "--unmanaged-only"], monkeypatch, admin,
                    {"a": ["team-a/a"]})
    documents = [d for d in yaml.safe_load_all(out) if d]
    assert len(documents) == 1
    assert documents[0]["metadata"] == {"name": "legacy-sub"}
    assert documents[0]["spec"] == {
        "metrics": ["org.apache.kafka.consumer."],
        "intervalMs": 30000,
        "match": {"clientSoftwareName": "kafka-python", "clientSoftwareVersion": "1\\.2\\..*"},
        "subscriptionName": "legacy_sub",
    }
    assert "UNMANAGED" in out


def test_delete_points_at_the_resource(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given a managed subscription, When --delete, Then the kubectl command deleting its resource."""
    _, out, _ = run(["--delete", "--name", "a"], monkeypatch, None, {"a": ["team-a/a"]})
    assert out == "kubectl delete clientmetricssubscription a -n team-a\n"


def test_client_properties_translation(tmp_path: Any) -> None:
    """Given Java-style SASL/TLS properties, Then kafka-python settings, PEM written to files; unknown
    keys are refused by name."""
    settings = kafka_python_settings({
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "scram-sha-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            'username="ops" password="s3cr\\"et";',
        "ssl.ca.pem": "-----BEGIN CERTIFICATE-----\n",
    }, tmp_path)
    assert settings["security_protocol"] == "SASL_SSL"
    assert settings["sasl_mechanism"] == "SCRAM-SHA-512"
    assert settings["sasl_plain_username"] == "ops"
    assert (tmp_path / "ssl.ca.pem").read_text().startswith("-----BEGIN")
    with pytest.raises(ValueError, match=r"sasl\.kerberos\.service\.name"):
        kafka_python_settings({"sasl.kerberos.service.name": "kafka"})
