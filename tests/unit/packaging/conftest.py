"""Fixtures for the packaging tests: the cached tools (helm, hadolint) and a renderer of the chart.

helm is built once from the Go module proxy by dev/tools/tools.py and cached under
~/.cache/kct/helm/<version>/, so only the first run on a machine pays for the build (a few minutes).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from chart_support import REPO, Render, helm_template
from script_loader import load_script


@pytest.fixture(scope="session")
def tools() -> ModuleType:
    return load_script(REPO / "dev" / "tools" / "tools.py")


@pytest.fixture(scope="session")
def helm(tools: ModuleType) -> Path:
    path: Path = tools.ensure_helm()
    return path


@pytest.fixture(scope="session")
def render(helm: Path) -> Render:
    """`render("--set", "a=b", values=[file])` -> the rendered objects; fails the test on a helm error."""

    def _render(*args: str, values: Sequence[Path] = ()) -> list[dict[str, Any]]:
        extra = [arg for path in values for arg in ("--values", str(path))]
        proc = helm_template(helm, *extra, *args)
        assert proc.returncode == 0, proc.stderr
        return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]

    return _render
