"""The TelemetryReceiver spec model and its generated CRD: what is refused, and where it is said."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from kct.api.crdgen import render_crd
from kct.api.crds import TELEMETRY_RECEIVER
from kct.api.telemetry_receiver import SECRET_PROPERTY_KEYS, TelemetryReceiverSpec, parse_receiver_spec
from kct.receiver.config import QuotasConfig
from kct.validation import format_validation_error

REPO = Path(__file__).resolve().parents[3]


def refusal(spec: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        parse_receiver_spec(spec)
    return format_validation_error(caught.value)


def schema() -> dict[str, Any]:
    crd = render_crd(TELEMETRY_RECEIVER)
    spec: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return spec


def test_the_example_parses_and_an_empty_spec_has_defaults() -> None:
    """Given examples/telemetryreceiver.yaml, Then it parses; Given `{}`, Then every section has defaults."""
    example = yaml.safe_load((REPO / "examples" / "telemetryreceiver.yaml").read_text())
    parsed = parse_receiver_spec(example["spec"])
    assert parsed.topic.partitions == 6 and parsed.aggregation is not None
    empty = parse_receiver_spec({})
    assert empty.replicas == 2 and empty.topic.delete_on_removal is False and empty.aggregation is None


@pytest.mark.parametrize(
    ("spec", "field", "rule"),
    [
        ({"replicas": -1}, "spec.replicas", "greater than or equal to 0"),
        ({"autoscaling": {"minReplicas": 5, "maxReplicas": 2}}, "spec.autoscaling", "minReplicas must not exceed"),
        ({"receiver": {"quotas": {"overrides": [{"group": "g", "byteRate": 1}]}}}, "group", "Extra inputs"),
        ({"receiver": {"quotas": {"overrides": [{"byteRate": 1}]}}}, "overrides.0", "needs `user`, `clientId`"),
        ({"aggregation": {"mode": "scheduled"}}, "spec.aggregation", "schedule: required"),
        ({"topic": {"partitions": 0}}, "spec.topic.partitions", "greater than or equal to 1"),
        ({"replicas": "2"}, "spec.replicas", "valid integer"),
        ({"receiver": {"producerProperties": {"sasl.password": "p"}}}, "producerProperties: sasl.password",
         "use producerPropertiesFromSecrets"),
        ({"receiver": {"producerProperties": {"SSL.Key.Password": "p", "sasl.jaas.config": "x"}}},
         "producerProperties: SSL.Key.Password, sasl.jaas.config", "must not hold credentials"),
        ({"receiver": {"producerProperties": {"sasl.oauthbearer.client.secret": "s"}}},
         "sasl.oauthbearer.client.secret", "must not hold credentials"),
    ],
)
def test_invalid_specs_are_refused_naming_the_field(spec: dict[str, Any], field: str, rule: str) -> None:
    """Given an invalid spec, When parsed, Then the error names the field and the rule."""
    message = refusal(spec)
    assert field in message and rule in message, message


def test_crd_carries_the_rules_the_api_server_checks_at_apply_time() -> None:
    """Given the generated CRD, Then replicas has minimum 0, autoscaling and quota overrides have CEL rules,
    an unknown quota entity field is not in the schema (refused by strict field validation), quantities are
    int-or-string, and `kubectl get tr` shows replicas, endpoint and Ready."""
    spec = schema()
    assert spec["properties"]["replicas"]["minimum"] == 0
    autoscaling_rules = spec["properties"]["autoscaling"]["x-kubernetes-validations"]
    assert any("minReplicas <= self.maxReplicas" in r["rule"] for r in autoscaling_rules)
    receiver = spec["properties"]["receiver"]
    assert any("has(o.user) || has(o.clientId)" in r["rule"] for r in receiver["x-kubernetes-validations"])
    override = receiver["properties"]["quotas"]["properties"]["overrides"]["items"]
    assert set(override["properties"]) == {"user", "clientId", "byteRate", "pushRate"}
    quantity = spec["properties"]["resources"]["properties"]["requests"]["additionalProperties"]
    assert quantity["x-kubernetes-int-or-string"] is True
    crd = render_crd(TELEMETRY_RECEIVER)
    assert crd["spec"]["names"]["shortNames"] == ["tr"]
    columns = [c["name"] for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert {"Ready Replicas", "Endpoint", "Ready", "Age"} <= set(columns)
    assert crd["spec"]["versions"][0]["subresources"] == {"status": {}}


def test_receiver_settings_are_the_receivers_own_models() -> None:
    """Given the spec model, Then spec.receiver.quotas is the receiver's QuotasConfig (one schema source)."""
    assert TelemetryReceiverSpec.model_fields["receiver"].annotation is not None
    assert type(parse_receiver_spec({}).receiver.quotas) is QuotasConfig


def test_no_object_defaults_are_frozen_into_the_crd() -> None:
    """Given the generated CRD, Then no object-valued default (with nulls the API server would refuse, or
    today's defaults frozen into stored objects) appears anywhere."""

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            assert not isinstance(node.get("default"), dict), node
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema())


def test_a_min_isr_above_the_replication_factor_is_refused_at_apply_time() -> None:
    """Given minInsyncReplicas 3 and replicationFactor 2, Then the model refuses it naming the field and the
    rule, and the generated CRD carries the same rule as CEL for the API server (fieldPath minInsyncReplicas)."""
    message = refusal({"topic": {"replicationFactor": 2, "minInsyncReplicas": 3}})
    assert "spec.topic" in message and "minInsyncReplicas: 3 is above replicationFactor (2)" in message
    equal = parse_receiver_spec({"topic": {"replicationFactor": 2, "minInsyncReplicas": 2}})
    assert equal.topic.min_insync_replicas == 2
    rules = schema()["properties"]["topic"]["x-kubernetes-validations"]
    assert [(r["fieldPath"], r["rule"]) for r in rules] == [(
        ".minInsyncReplicas",
        "!has(self.replicationFactor) || !has(self.minInsyncReplicas) || "
        "self.minInsyncReplicas <= self.replicationFactor",
    )]


def test_plain_producer_properties_without_credentials_are_accepted() -> None:
    """Given producer properties that are settings, not credentials, When parsed, Then they are kept; a
    credential goes through producerPropertiesFromSecrets instead."""
    spec = parse_receiver_spec({"receiver": {
        "producerProperties": {"compression.type": "zstd", "security.protocol": "SASL_SSL",
                               "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "kct",
                               "sasl.oauthbearer.token.endpoint.url": "https://idp/token"},
        "producerPropertiesFromSecrets": {"sasl.password": {"name": "kafka-user", "key": "password"}},
    }})
    assert spec.receiver.producer_properties["sasl.username"] == "kct"
    assert spec.receiver.producer_properties_from_secrets["sasl.password"].name == "kafka-user"


def test_the_crd_refuses_credentials_in_plain_properties_with_the_models_rule() -> None:
    """Given the generated CRD, Then spec.receiver carries a CEL rule refusing every known credential key of
    producerProperties, by map lookup (constant cost), from the same list as the model's check."""
    rules = schema()["properties"]["receiver"]["x-kubernetes-validations"]
    (rule,) = [r for r in rules if r.get("fieldPath") == ".producerProperties"]
    assert all(f"'{key}'" in rule["rule"] for key in SECRET_PROPERTY_KEYS)
    assert "k in self.producerProperties" in rule["rule"] and "producerPropertiesFromSecrets" in rule["message"]


def test_tls_is_issued_by_default_with_tls12_and_forward_secret_suites() -> None:
    tls = parse_receiver_spec({}).receiver.tls
    assert (tls.mode, tls.min_version, tls.client_auth) == ("issued", "TLSv1.2", None)
    assert tls.cipher_suites and all(suite.startswith("ECDHE-") for suite in tls.cipher_suites)
    assert tls.issued.renew_before_hours < tls.issued.validity_hours


@pytest.mark.parametrize(("tls", "named"), [
    ({"mode": "secret"}, "secretName"),
    ({"mode": "disabled", "clientAuth": {"caSecretRef": {"name": "broker-ca"}}}, "clientAuth"),
    ({"issued": {"validityHours": 24, "renewBeforeHours": 24}}, "renewBeforeHours"),
    ({"issued": {"caValidityHours": 100, "caRenewBeforeHours": 200}}, "caRenewBeforeHours"),
    ({"minVersion": "TLSv1.1"}, "minVersion"),
    ({"cipherSuites": ["RC4 MD5"]}, "cipherSuites"),
])
def test_inconsistent_tls_settings_are_refused_naming_the_field(tls: dict[str, Any], named: str) -> None:
    with pytest.raises(ValidationError, match=named):
        parse_receiver_spec({"receiver": {"tls": tls}})
