"""docs/reference/crds.md: generated from the CRD models, and failing the tests when stale."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from script_loader import load_script

from kct.api.crdgen import CrdDefinition, render_crd
from kct.api.crds import DEFINITIONS

REPO = Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    return load_script(REPO / "dev" / "gen_crd_docs.py")


def _field_paths(node: dict[str, Any], path: str) -> Iterator[str]:
    for name, child in node.get("properties", {}).items():
        yield f"{path}.{name}"
        yield from _field_paths(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _field_paths(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _field_paths(node["additionalProperties"], f"{path}{{}}")


def test_crd_reference_is_up_to_date() -> None:
    """Given the models, When the reference is rendered, Then docs/reference/crds.md holds exactly that
    (run `make manifests` or `python dev/gen_crd_docs.py` after changing a model)."""
    assert _generator().stale() == []


def test_check_reports_an_edited_or_missing_reference(tmp_path: Path) -> None:
    """Given a missing, a current and a hand-edited copy, When checked, Then only the current one passes."""
    generator = _generator()
    target = tmp_path / "crds.md"
    assert generator.stale(target) == [f"{target}: missing"]
    assert generator.main(["--output", str(target)]) == 0
    assert generator.stale(target) == []
    target.write_text(target.read_text().replace("| `spec.metrics` |", "| `spec.metric` |"))
    assert generator.stale(target) == [f"{target}: stale (differs from the models)"]
    assert generator.main(["--check", "--output", str(target)]) == 1


@pytest.mark.parametrize("definition", DEFINITIONS, ids=lambda d: d.kind)
def test_reference_lists_every_field_of_the_schema(definition: CrdDefinition) -> None:
    """Given a rendered CRD, Then every spec and status field path appears as a row of the reference
    (so a new field cannot be left out of the docs)."""
    text = (REPO / "docs" / "reference" / "crds.md").read_text()
    root = render_crd(definition)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    rows = {row.split("|")[1].strip().strip("`") for row in text.splitlines() if row.startswith("| `")}
    for part in ("spec", "status"):
        for path in _field_paths(root["properties"][part], part):
            assert path in rows, f"{definition.kind}: {path} missing from docs/reference/crds.md"
