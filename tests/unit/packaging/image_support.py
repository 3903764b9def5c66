"""Helpers for the image tests: the dev/images modules (and, re-exported, `missing_precondition`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from chart_support import REPO
from preconditions import missing_precondition
from script_loader import load_script

__all__ = ["built_image", "dev_images", "images_module", "missing_precondition", "unpack_archive"]

IMAGES_DIR = REPO / "dev" / "images"


def images_module() -> ModuleType:
    """dev/images/images.py (it puts dev/images on sys.path, so its siblings import by name too)."""
    return load_script(IMAGES_DIR / "images.py")


def dev_images(name: str) -> ModuleType:
    """A sibling module of dev/images/images.py: `dockerfile`, `container_run`, `debian_base`, `buildah`."""
    images_module()
    return load_script(IMAGES_DIR / f"{name}.py")



def built_image(name: str) -> Any:
    """The planned image `name` of dev/images for the current sources; fails when `make images` has not built it."""
    image = images_module().plan(name)
    if not image.exists():
        pytest.fail(f"no image archive for the current sources ({image.archive}): run `make images` "
                    "(`make unit`, `make pytest` and `make test` run it first)")
    return image


def unpack_archive(archive: Path, into: Path) -> tuple[Path, Any]:
    """(root filesystem, image config) of a docker-archive unpacked under `into`, as runc will run it."""
    if os.geteuid() != 0:
        missing_precondition("unpacking an image keeps its file owners and runc needs root; run as root")
    if shutil.which("runc") is None:
        missing_precondition("runc is not installed (`make images` installs it from Debian)")
    rootfs = into / "rootfs"
    return rootfs, dev_images("container_run").unpack(archive, rootfs)
