"""Helpers for the image tests: the dev/images modules and the CI rule for missing preconditions."""

from __future__ import annotations

import os
from types import ModuleType
from typing import NoReturn

import pytest
from chart_support import REPO, load_script

IMAGES_DIR = REPO / "dev" / "images"


def images_module() -> ModuleType:
    """dev/images/images.py (it puts dev/images on sys.path, so its siblings import by name too)."""
    return load_script(IMAGES_DIR / "images.py")


def dev_images(name: str) -> ModuleType:
    """A sibling module of dev/images/images.py: `dockerfile`, `container_run`, `debian_base`, `buildah`."""
    images_module()
    return load_script(IMAGES_DIR / f"{name}.py")


def missing_precondition(what: str) -> NoReturn:
    """A test that cannot run here: in CI (`CI=true`) that fails; elsewhere it skips, saying what is missing."""
    if os.environ.get("CI", "").lower() in {"true", "1", "yes"}:
        pytest.fail(f"precondition missing in CI: {what}")
    pytest.skip(what)
