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
        "Subscription", "Interval", "Metrics", "Ready", "Reason", "Age"
    ]
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
