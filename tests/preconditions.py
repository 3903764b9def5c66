"""The one way a test says it cannot run here: in CI (`CI=true`) that is a failure, elsewhere a skip.

A skipped check is a check that did not happen; on a developer's machine that may be fine (no runc, no
openssl), in CI it hides a broken setup. So no test calls `pytest.skip`, `skipif` or `importorskip`
directly: they call `missing_precondition` or `require_module`, which say what is missing either way.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import NoReturn

import pytest

__all__ = ["in_ci", "missing_precondition", "require_module"]


def in_ci() -> bool:
    """True when `CI` says so (GitHub Actions, GitLab CI and our .ci/run set CI=true)."""
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def missing_precondition(what: str) -> NoReturn:
    """A test that cannot run here: in CI that fails; elsewhere it skips, saying what is missing.

    Also usable at module level (a conftest or a test module): the skip then covers the whole module."""
    if in_ci():
        pytest.fail(f"precondition missing in CI: {what}", pytrace=False)
    pytest.skip(what, allow_module_level=True)


def require_module(name: str, why: str) -> ModuleType:
    """`importlib.import_module(name)`, or `missing_precondition` naming the module and why it is needed."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        missing_precondition(f"{name} is not importable ({error}); {why}")
