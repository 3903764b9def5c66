"""Helpers shared by the packaging tests (the chart, the generator, the cached tools)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "helm" / "kct"
KUBE_VERSION = "1.36.3"

Render = Callable[..., list[dict[str, Any]]]


def load_script(path: Path) -> ModuleType:
    """Import a dev/ script (they are standalone files, not a package)."""
    if path.stem in sys.modules:
        return sys.modules[path.stem]
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def helm_template(helm: Path, *args: str, namespace: str = "kct-system") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm), "template", "kct", str(CHART), "--namespace", namespace, "--kube-version", KUBE_VERSION, *args],
        capture_output=True, text=True, check=False,
    )
