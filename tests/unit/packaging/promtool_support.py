"""Where the tests find promtool: the cached build of dev/stack's Prometheus (3.16.0, `make stack-install`).

The same path as `dev/stack/prometheus.py`'s `binary("promtool")` (`$KCT_CACHE` or ~/.cache/kct, then
prometheus/<version>/bin/): a lookup only, never a build, which takes minutes and belongs to stack-install.
"""

from __future__ import annotations

import os
from pathlib import Path

from preconditions import missing_precondition

__all__ = ["PROMETHEUS_VERSION", "promtool_path"]

PROMETHEUS_VERSION = "3.16.0"


def promtool_path() -> Path:
    """The cached promtool, or `missing_precondition` (a failure in CI) naming where it was looked for."""
    root = Path(os.environ.get("KCT_CACHE", Path.home() / ".cache" / "kct"))
    path = root / "prometheus" / PROMETHEUS_VERSION / "bin" / "promtool"
    if not os.access(path, os.X_OK):
        missing_precondition(f"promtool {PROMETHEUS_VERSION} is not at {path} (make stack-install builds it)")
    return path
