"""Helpers shared by the packaging tests (the chart, the generator, the cached tools)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "helm" / "kct"
KUBE_VERSION = "1.36.3"

Render = Callable[..., list[dict[str, Any]]]


def helm_template(helm: Path, *args: str, namespace: str = "kct-system") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm), "template", "kct", str(CHART), "--namespace", namespace, "--kube-version", KUBE_VERSION, *args],
        capture_output=True, text=True, check=False,
    )
