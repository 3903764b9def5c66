"""Run a command of an image archive the way a kubelet would run the chart's pod, without Docker.

`unpack` turns a docker-archive (what `make images` writes and `ctr images import` reads) into a root
filesystem and the image's config; `run` starts one process in it with runc (Debian's, the runtime
containerd uses) under the chart's security context: the image's user, a read-only root filesystem, a
writable `/tmp` (the chart's emptyDir), no capabilities, no new privileges, fresh namespaces (network
included: nothing outside is reachable). Needs root, as runc does. Standard library only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ImageConfig", "RunError", "run", "unpack"]


class RunError(RuntimeError):
    """The archive could not be unpacked or runc could not start the container."""


@dataclass(frozen=True)
class ImageConfig:
    """The parts of an image's config a container runtime acts on."""

    repo_tags: tuple[str, ...]
    user: str
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    env: Mapping[str, str]
    workdir: str
    exposed_ports: tuple[str, ...]
    layers: int
    layer_bytes: int
    raw: Mapping[str, Any] = field(repr=False)


def _whiteout(root: Path, member: tarfile.TarInfo) -> bool:
    """Apply an OCI whiteout entry; True when `member` was one."""
    path = Path(member.name)
    if path.name == ".wh..wh..opq":
        folder = root / path.parent
        if folder.is_dir():
            for child in folder.iterdir():
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        return True
    if path.name.startswith(".wh."):
        victim = root / path.parent / path.name.removeprefix(".wh.")
        if victim.is_dir() and not victim.is_symlink():
            shutil.rmtree(victim)
        elif victim.exists() or victim.is_symlink():
            victim.unlink()
        return True
    return False


def unpack(archive: Path, rootfs: Path) -> ImageConfig:
    """Extract the layers of the docker-archive `archive` into `rootfs` (owners kept; needs root)."""
    rootfs.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as outer:
        manifest_file = outer.extractfile("manifest.json")
        if manifest_file is None:
            raise RunError(f"{archive}: no manifest.json, not a docker-archive")
        (manifest,) = json.load(manifest_file)
        config_file = outer.extractfile(manifest["Config"])
        if config_file is None:
            raise RunError(f"{archive}: config {manifest['Config']} missing")
        config = json.load(config_file)
        layer_bytes = 0
        for layer_name in manifest["Layers"]:
            layer_file = outer.extractfile(layer_name)
            if layer_file is None:
                raise RunError(f"{archive}: layer {layer_name} missing")
            with tarfile.open(fileobj=layer_file, mode="r|*") as layer:
                for member in layer:
                    layer_bytes += member.size
                    if _whiteout(rootfs, member):
                        continue
                    existing = rootfs / member.name
                    if (existing.is_symlink() or existing.exists()) and not (existing.is_dir() and member.isdir()):
                        shutil.rmtree(existing) if existing.is_dir() and not existing.is_symlink() \
                            else existing.unlink()
                    layer.extract(member, rootfs, set_attrs=True, numeric_owner=True, filter="fully_trusted")
    settings = config.get("config") or {}
    env = dict(item.split("=", 1) for item in settings.get("Env") or [])
    return ImageConfig(
        repo_tags=tuple(manifest.get("RepoTags") or ()),
        user=settings.get("User") or "0:0",
        entrypoint=tuple(settings.get("Entrypoint") or ()),
        cmd=tuple(settings.get("Cmd") or ()),
        env=env,
        workdir=settings.get("WorkingDir") or "/",
        exposed_ports=tuple(sorted(settings.get("ExposedPorts") or {})),
        layers=len(manifest["Layers"]),
        layer_bytes=layer_bytes,
        raw=config,
    )


def _ids(user: str, rootfs: Path) -> tuple[int, int]:
    """uid and gid of an image's `User` (numeric, or a name in the image's /etc/passwd)."""
    name, _, group = user.partition(":")
    if name.isdigit() and (group.isdigit() or not group):
        return int(name), int(group or name)
    for line in (rootfs / "etc" / "passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == name:
            return int(fields[2]), int(group) if group.isdigit() else int(fields[3])
    raise RunError(f"user {user!r} is not in the image's /etc/passwd")


def _spec(rootfs: Path, image: ImageConfig, argv: Sequence[str], *, env: Mapping[str, str],
          read_only: bool) -> dict[str, Any]:
    uid, gid = _ids(image.user, rootfs)
    ro = ["nosuid", "noexec", "nodev", "ro"]
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": uid, "gid": gid},
            "args": list(argv),
            "env": [f"{k}={v}" for k, v in {**image.env, **env}.items()],
            "cwd": image.workdir,
            "capabilities": {"bounding": [], "effective": [], "inheritable": [], "permitted": [], "ambient": []},
            "noNewPrivileges": True,
        },
        "root": {"path": str(rootfs), "readonly": read_only},
        "hostname": "kct-image-check",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
             "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
             "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ro},
            # The chart's emptyDir at /tmp.
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "nodev", "mode=1777", "size=65536k"]},
        ],
        "linux": {
            "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")],
            "maskedPaths": ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"],
            "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
        },
    }


def run(rootfs: Path, image: ImageConfig, argv: Sequence[str] | None = None, *, env: Mapping[str, str] | None = None,
        read_only: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run `argv` (default: the image's entrypoint + cmd) in `rootfs` as the image's user; wait for it."""
    runc = shutil.which("runc")
    if runc is None:
        raise RunError("runc is not on PATH (`make images` installs it from Debian)")
    args = list(argv) if argv is not None else [*image.entrypoint, *image.cmd]
    bundle = rootfs.parent / f"bundle-{uuid.uuid4().hex[:8]}"
    bundle.mkdir()
    state = bundle / "state"
    try:
        (bundle / "config.json").write_text(json.dumps(_spec(rootfs, image, args, env=env or {},
                                                             read_only=read_only)))
        name = f"kct-check-{bundle.name}"
        return subprocess.run([runc, "--root", str(state), "run", "--bundle", str(bundle), name],
                              capture_output=True, text=True, timeout=timeout, check=False,
                              stdin=subprocess.DEVNULL, env={**os.environ})
    finally:
        subprocess.run([runc, "--root", str(state), "delete", "--force", f"kct-check-{bundle.name}"],
                       capture_output=True, check=False)
        shutil.rmtree(bundle, ignore_errors=True)
