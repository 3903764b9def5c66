"""Generated CRDs: up to date with the models, and structural as the API server requires."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, Field

from kct.api.crdgen import CrdDefinition, PrinterColumn, render_crd, structural_schema
from kct.api.crds import CLIENT_METRICS_SUBSCRIPTION, DEFINITIONS, check_crds, default_crd_dir, write_crds


def walk(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        yield path, node
        for key, value in node.get("properties", {}).items():
            yield from walk(value, f"{path}.{key}")
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                yield from walk(node[key], f"{path}[{key}]")


def test_crds_directory_is_up_to_date() -> None:
    """Given the models, When the CRDs are rendered, Then crds/ holds exactly that
    (run `kct crds generate` after changing a model)."""
    assert check_crds(default_crd_dir()) == []


def test_check_reports_stale_and_missing(tmp_path: Any) -> None:
    """Given a directory with an edited CRD, When checked, Then it is reported stale; missing too."""
    assert check_crds(tmp_path) != []
    write_crds(tmp_path)
    assert check_crds(tmp_path) == []
    target = tmp_path / CLIENT_METRICS_SUBSCRIPTION.file_name
    target.write_text(target.read_text() + "# edited\n")
    assert check_crds(tmp_path) == [f"{target}: stale (differs from the models)"]


@pytest.mark.parametrize("definition", DEFINITIONS, ids=lambda d: d.kind)
def test_schema_is_structural(definition: CrdDefinition) -> None:
    """Given a rendered CRD, Then no node uses $ref, every node has a type, and anyOf appears only in
    the int-or-string form Kubernetes allows (never as a nullable union)."""
    crd = render_crd(definition)
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    text = yaml.safe_dump(schema)
    assert "$defs" not in text and "type: 'null'" not in text
    for path, node in walk(schema):
        special = {"x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields"} & set(node)
        assert "type" in node or special, path
        assert "$ref" not in node, path
        assert "anyOf" not in node or node.get("x-kubernetes-int-or-string"), path
        assert node.get("additionalProperties") is not False, path


def test_client_metrics_subscription_crd_shape() -> None:
    """Given the ClientMetricsSubscription CRD, Then it has the group, short name, status subresource,
    printer columns and the CEL rules the issue asks for."""
    crd = render_crd(CLIENT_METRICS_SUBSCRIPTION)
    assert crd["metadata"]["name"] == "clientmetricssubscriptions.telemetry.kct.dev"
    assert crd["spec"]["names"]["shortNames"] == ["cms"]
    assert crd["spec"]["scope"] == "Namespaced"
    version = crd["spec"]["versions"][0]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Subscription", "Interval", "Metrics", "Clients", "Ready", "Reason", "Age"
    ]
    clients = next(c for c in version["additionalPrinterColumns"] if c["name"] == "Clients")
    assert (clients["jsonPath"], clients["type"]) == (".status.clients.matched", "integer")
    root = version["schema"]["openAPIV3Schema"]
    spec = root["properties"]["spec"]
    assert spec["required"] == ["metrics"]
    assert spec["properties"]["intervalMs"] == {
        "type": "integer",
        "description": spec["properties"]["intervalMs"]["description"],
        "default": 300000,
        "maximum": 3600000,
        "minimum": 100,
    }
    assert sorted(spec["properties"]["match"]["properties"]) == sorted(
        ["clientInstanceId", "clientId", "clientSoftwareName", "clientSoftwareVersion",
         "clientSourceAddress", "clientSourcePort"]
    )
    assert spec["properties"]["metrics"]["items"]["minLength"] == 1
    assert spec["properties"]["subscriptionName"]["x-kubernetes-validations"][0]["rule"] == "self == oldSelf"
    assert "oldSelf.metadata.name" in root["x-kubernetes-validations"][0]["rule"]
    conditions = root["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]


def test_generator_is_generic() -> None:
    """Given any small model, When rendered as a CRD, Then optional and nested fields become plain
    typed nodes with their descriptions."""

    class Inner(BaseModel):
        size: int = Field(ge=1)

    class Spec(BaseModel):
        inner: Inner | None = Field(default=None, description="Nested.")
        tags: dict[str, str] = Field(default_factory=dict)

    schema = structural_schema(Spec)
    assert schema["properties"]["inner"] == {
        "type": "object",
        "description": "Nested.",
        "properties": {"size": {"type": "integer", "minimum": 1}},
        "required": ["size"],
    }
    assert schema["properties"]["tags"]["additionalProperties"] == {"type": "string"}
    crd = render_crd(CrdDefinition(
        group="example.dev", version="v1", kind="Thing", plural="things", spec_model=Spec,
        printer_columns=(PrinterColumn("Size", ".spec.inner.size", "integer"),),
    ))
    assert crd["spec"]["versions"][0]["additionalPrinterColumns"][0]["jsonPath"] == ".spec.inner.size"
    assert "subresources" not in crd["spec"]["versions"][0]


# What apiextensions.k8s.io/v1 accepts in a CRD's schema (JSONSchemaProps). Anything else, e.g.
# `patternProperties` from a dict with constrained keys, makes the API server refuse the whole CRD.
_CRD_SCHEMA_KEYWORDS = frozenset({
    "description", "type", "format", "title", "default", "maximum", "exclusiveMaximum", "minimum",
    "exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems", "minItems", "multipleOf", "enum",
    "maxProperties", "minProperties", "required", "items", "allOf", "oneOf", "anyOf", "not", "properties",
    "additionalProperties", "externalDocs", "example", "nullable", "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource", "x-kubernetes-int-or-string", "x-kubernetes-list-map-keys",
    "x-kubernetes-list-type", "x-kubernetes-map-type", "x-kubernetes-validations",
})


def _unsupported_keywords(node: dict[str, Any], path: str) -> Iterator[str]:
    for key in sorted(set(node) - _CRD_SCHEMA_KEYWORDS):
        yield f"{path}: {key}"
    for name, child in node.get("properties", {}).items():
        yield from _unsupported_keywords(child, f"{path}.{name}")
    for key in ("items", "additionalProperties", "not"):
        if isinstance(node.get(key), dict):
            yield from _unsupported_keywords(node[key], f"{path}[{key}]")
    for key in ("allOf", "oneOf", "anyOf"):
        for i, child in enumerate(node.get(key, ())):
            yield from _unsupported_keywords(child, f"{path}.{key}[{i}]")


@pytest.mark.parametrize("definition", DEFINITIONS, ids=lambda d: d.kind)
def test_every_crd_schema_uses_only_keywords_the_api_server_accepts(definition: CrdDefinition) -> None:
    """Given each generated CRD, Then its schema has no keyword outside apiextensions/v1's JSONSchemaProps
    (the API server refuses the CRD: `patternProperties is not supported`, `$ref`, `const`, ...)."""
    schema = render_crd(definition)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert list(_unsupported_keywords(schema, "openAPIV3Schema")) == []


def test_the_keyword_check_finds_pattern_properties() -> None:
    """Given a schema with patternProperties deep inside, Then the check names it with its path."""
    schema = {"type": "object", "properties": {"a": {"type": "object", "additionalProperties": {
        "type": "object", "patternProperties": {"^x$": {"type": "string"}}}}}}
    assert list(_unsupported_keywords(schema, "s")) == ["s.a[additionalProperties]: patternProperties"]
