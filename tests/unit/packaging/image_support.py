"""Helpers for the image tests: the dev/images modules (and, re-exported, `missing_precondition`)."""

from __future__ import annotations

from types import ModuleType

from chart_support import REPO, load_script
from preconditions import missing_precondition

__all__ = ["dev_images", "images_module", "missing_precondition"]

IMAGES_DIR = REPO / "dev" / "images"


def images_module() -> ModuleType:
    """dev/images/images.py (it puts dev/images on sys.path, so its siblings import by name too)."""
    return load_script(IMAGES_DIR / "images.py")


def dev_images(name: str) -> ModuleType:
    """A sibling module of dev/images/images.py: `dockerfile`, `container_run`, `debian_base`, `buildah`."""
    images_module()
    return load_script(IMAGES_DIR / f"{name}.py")

