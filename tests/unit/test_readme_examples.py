"""The README's resource examples are real: each YAML block with a `kind` equals a file under examples/."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]


def _yaml_blocks(markdown: str) -> list[Any]:
    return [yaml.safe_load(block) for block in re.findall(r"^```yaml\n(.*?)^```", markdown, re.MULTILINE | re.DOTALL)]


def test_each_readme_resource_is_an_example_file() -> None:
    """Given README.md, When its YAML blocks are parsed, Then each resource in them equals one of
    examples/**/*.yaml (so an example shown is one the tests apply), and there is one per kind."""
    examples = [yaml.safe_load(path.read_text()) for path in sorted((REPO / "examples").rglob("*.yaml"))]
    resources = [block for block in _yaml_blocks((REPO / "README.md").read_text())
                 if isinstance(block, dict) and "kind" in block]
    assert sorted(r["kind"] for r in resources) == ["ClientMetricsSubscription", "TelemetryReceiver"]
    for resource in resources:
        assert resource in examples, f"README's {resource['kind']} {resource['metadata']['name']} is no example file"
