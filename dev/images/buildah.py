"""buildah, on a storage of the project's own under `~/.cache/kct/images/buildah/`.

vfs storage: no overlay mounts left on the host, and it works in any filesystem and namespace (each layer
is a full copy, which is why the built image is removed from the storage once it is saved as an archive).
`TMPDIR` points into the cache too, because buildah keeps `RUN --mount=type=cache` folders (Maven's and
pip's downloads) under it: they survive between builds and never enter a layer.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Buildah", "BuildahError"]


class BuildahError(RuntimeError):
    """A buildah command failed; the message has the command and the tail of its output."""


@dataclass(frozen=True)
class Buildah:
    home: Path   # storage root, run root and TMPDIR live under it

    @property
    def _global(self) -> list[str]:
        return ["--root", str(self.home / "root"), "--runroot", str(self.home / "runroot"),
                "--storage-driver", "vfs"]

    @property
    def _env(self) -> dict[str, str]:
        tmp = self.home / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        return {**os.environ, "TMPDIR": str(tmp), "BUILDAH_ISOLATION": "oci"}

    def run(self, *args: str, log: Path | None = None) -> str:
        argv = ["buildah", *self._global, *args]
        if log is None:
            proc = subprocess.run(argv, capture_output=True, text=True, env=self._env, check=False)
            returncode, stdout, output = proc.returncode, proc.stdout, proc.stdout + proc.stderr
        else:
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("a") as out:
                out.write(f"$ {' '.join(argv)}\n")
                out.flush()
                returncode = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=self._env,
                                            check=False).returncode
            stdout, output = "", log.read_text()
        if returncode != 0:
            tail = "\n".join(output.splitlines()[-30:])
            where = f" (full log: {log})" if log else ""
            raise BuildahError(f"`buildah {' '.join(args[:2])} ...` exited {returncode}{where}:\n{tail}")
        return stdout

    def has_image(self, reference: str) -> bool:
        proc = subprocess.run(["buildah", *self._global, "inspect", "--type", "image", reference],
                              capture_output=True, text=True, env=self._env, check=False)
        return proc.returncode == 0

    def commit_rootfs(self, rootfs_tar: Path, reference: str, *, env: Sequence[tuple[str, str]],
                      cmd: Sequence[str], workdir: str, log: Path, entrypoint: Sequence[str] = (),
                      user: str = "") -> None:
        """An image of one layer, `rootfs_tar`, with the given config."""
        container = self.run("from", "--pull=never", "scratch").strip()
        try:
            self.run("add", container, str(rootfs_tar), "/", log=log)
            config = [arg for name, value in env for arg in ("--env", f"{name}={value}")]
            config += ["--cmd", json.dumps(list(cmd)), "--workingdir", workdir]
            if entrypoint:
                config += ["--entrypoint", json.dumps(list(entrypoint))]
            if user:
                config += ["--user", user]
            self.run("config", *config, container)
            self.run("commit", "--quiet", container, reference, log=log)
        finally:
            self.run("rm", container)

    def load(self, archive: Path, reference: str) -> None:
        """Put a docker-archive into the storage under `reference` (a base after the storage was wiped)."""
        image_id = self.run("pull", "--quiet", f"docker-archive:{archive}").strip().splitlines()[-1]
        self.run("tag", image_id, reference)

    def bud(self, *, context: Path, dockerfile: Path, target: str, tag: str, build_args: Mapping[str, str],
            volumes: Sequence[str], log: Path) -> None:
        argv = ["bud", "--pull=never", "--network=host", "--layers=false", f"--target={target}", "--tag", tag,
                "--file", str(dockerfile)]
        argv += [arg for name, value in sorted(build_args.items()) for arg in ("--build-arg", f"{name}={value}")]
        argv += [arg for volume in volumes for arg in ("--volume", volume)]
        self.run(*argv, str(context), log=log)

    def save(self, reference: str, archive: Path, *, log: Path) -> None:
        """`reference` as a docker-archive (what `ctr images import` and `docker load` read), tagged so."""
        self.run("push", "--quiet", reference, f"docker-archive:{archive}:{reference}", log=log)

    def remove_image(self, reference: str) -> None:
        if self.has_image(reference):
            self.run("rmi", reference)

    def prune(self) -> None:
        """Drop untagged images and leftover build containers (an interrupted build leaves both)."""
        self.run("rm", "--all")
        self.run("rmi", "--prune")
