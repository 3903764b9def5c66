"""Container images without Docker or a registry: the repository's Dockerfile built with buildah.

    python3 dev/images/images.py build [NAME...]   # build what is missing; prints "ARCHIVE<TAB>REFERENCE"
    python3 dev/images/images.py plan [NAME...]    # the same lines, without building (archives may be absent)
    python3 dev/images/images.py bases             # the local bases, their keys, sizes and packages
    python3 dev/images/images.py run kct -- kct receiver --help   # a command in the image, as the chart runs it

The Dockerfile's own stages are built (buildah bud), with its `ARG`s for the bases (PYTHON_IMAGE,
MAVEN_IMAGE) pointed at local Debian bookworm bases (debian_base.py), so what runs on the local node is
what `docker build` gives users, but for the base's origin. Each image is saved as a docker-archive
tarball under `~/.cache/kct/images/` named by a key: a hash of the Dockerfile, the target, the build
context files its stages COPY (after .dockerignore) and the bases' keys. A warm run hashes and returns;
the bases are cached separately (`bases/`), keyed by their recipe, because they change rarely.

The archive carries one reference, `kct.dev/<name>:<key>`: `ctr -n k8s.io images import ARCHIVE` loads it
under that name, and the chart (`image.repository=kct.dev/kct`, `image.tag=<key>`) and a
TelemetryReceiver (`spec.image: kct.dev/kct:<key>`) use it with `imagePullPolicy: IfNotPresent` (or
`Never`). A content key, not a fixed tag: a changed image is a new reference, so pods roll to it.

Python callers (the local stack) use `ensure_images()`; it returns `BuiltImage`s (archive, reference).
Needs root (buildah, mmdebstrap); installs buildah, mmdebstrap and runc from Debian when missing.
Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from buildah import Buildah, BuildahError
from container_run import RunError, run, unpack
from debian_base import (
    BASES,
    MAVEN_BASE,
    PYTHON_BASE,
    PYTHON_BUILD_BASE,
    SPARK_BASE,
    BaseSpec,
    BootstrapError,
    bootstrap_rootfs,
)
from dockerfile import DockerfileError, context_files, parse_dockerfile, stage_context

__all__ = [
    "IMAGES",
    "REPO",
    "BuiltImage",
    "ImageError",
    "ImageSpec",
    "cache_root",
    "ensure_base",
    "ensure_images",
    "plan",
]

REPO = Path(__file__).resolve().parents[2]
# Bump when the way images are built changes in a way the key's inputs do not show.
BUILD_RECIPE = "1"
# Older archives of an image (or a base) beyond this many are deleted after a build, unless built in the last
# KEEP_RECENT_SECONDS: a test run reads the archive it built ~20 min later, and a build in another clone
# (other sources, another key) meanwhile must not delete it.
KEEP_ARCHIVES = 3
KEEP_RECENT_SECONDS = 6 * 3600
HOST_TOOLS = {"buildah": "buildah", "mmdebstrap": "mmdebstrap", "runc": "runc"}
# The host's CA bundle is bind-mounted over the base's for RUN steps only (see debian_base.py, Trust).
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


class ImageError(RuntimeError):
    """An image could not be built; the message names the image and the failing step."""


@dataclass(frozen=True)
class ImageSpec:
    """One image: a target of the repository's Dockerfile, with the bases its ARGs are pointed at."""

    name: str
    target: str
    bases: Mapping[str, BaseSpec]   # Dockerfile ARG -> local base
    description: str

    @property
    def repository(self) -> str:
        return f"kct.dev/{self.name}"


IMAGES: Mapping[str, ImageSpec] = {
    spec.name: spec for spec in (
        ImageSpec(name="kct", target="runtime",
                  bases={"PYTHON_IMAGE": PYTHON_BASE, "PYTHON_BUILD_IMAGE": PYTHON_BUILD_BASE,
                         "MAVEN_IMAGE": MAVEN_BASE},
                  description="kct operator / kct receiver, the broker plugin jar in /opt/kct/share/"),
        ImageSpec(name="kct-spark", target="spark",
                  bases={"SPARK_IMAGE": SPARK_BASE, "MAVEN_IMAGE": MAVEN_BASE},
                  description="the aggregation job (SparkApplication image): Spark, the Kafka connector and "
                              "the OTLP decoder in /opt/spark/jars, kct's job on PYTHONPATH"),
    )
}


@dataclass(frozen=True)
class BuiltImage:
    name: str
    reference: str   # the name the archive is tagged with: kct.dev/<name>:<key>
    archive: Path    # docker-archive tarball
    key: str

    @property
    def tag(self) -> str:
        return self.key

    @property
    def metadata_path(self) -> Path:
        return self.archive.with_suffix(".json")

    def exists(self) -> bool:
        """Built and complete (the metadata is written last, after the archive is in place)."""
        return self.archive.is_file() and self.metadata_path.is_file()

    def metadata(self) -> dict[str, object]:
        loaded: dict[str, object] = json.loads(self.metadata_path.read_text())
        return loaded


def cache_root() -> Path:
    """`~/.cache/kct/images` (or `$KCT_CACHE/images`)."""
    root = Path(os.environ.get("KCT_CACHE", Path.home() / ".cache" / "kct")) / "images"
    root.mkdir(parents=True, exist_ok=True)
    return root


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """One build at a time per cache (helpers and CI share it; buildah's storage too)."""
    with (cache_root() / ".lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _buildah() -> Buildah:
    return Buildah(cache_root() / "buildah")


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def ensure_host_tools() -> None:
    """buildah, mmdebstrap and runc from Debian (apt), when missing; the build needs root anyway."""
    if os.geteuid() != 0:
        raise ImageError("building images needs root (mmdebstrap --mode=root, buildah on its own storage, "
                         "apt-get for the tools); run `make images` as root")
    missing = [package for binary, package in HOST_TOOLS.items() if shutil.which(binary) is None]
    if not missing:
        return
    _say(f"==> apt-get install {' '.join(missing)} (Debian packages for building images)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update", "-qq"],
                 ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing]):
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            output = (proc.stdout + proc.stderr)[-3000:]
            raise ImageError(f"`{' '.join(argv)}` exited {proc.returncode}:\n{output}")


# ---------------------------------------------------------------------------------------------- bases


def _base_archive(spec: BaseSpec) -> Path:
    return cache_root() / "bases" / f"{spec.name}-{spec.suite}-{spec.key()}.tar"


def ensure_base(spec: BaseSpec) -> str:
    """The base's reference, present in buildah's storage: loaded from its archive, or bootstrapped."""
    buildah, reference, archive = _buildah(), spec.reference(), _base_archive(spec)
    if buildah.has_image(reference):
        return reference
    if archive.is_file() and archive.with_suffix(".json").is_file():
        buildah.load(archive, reference)
        return reference
    archive.parent.mkdir(parents=True, exist_ok=True)
    log = cache_root() / "logs" / f"{archive.stem}.log"
    log.unlink(missing_ok=True)
    _say(f"==> base {reference} (mmdebstrap {spec.suite} + {', '.join(spec.packages)}), log: {log}")
    started, cpu = time.monotonic(), _children_cpu()
    with tempfile.TemporaryDirectory(dir=archive.parent, prefix=".bootstrap-") as tmp:
        rootfs = Path(tmp, "rootfs.tar")
        cost = bootstrap_rootfs(spec, rootfs, log=log)
        buildah.commit_rootfs(rootfs, reference, env=spec.env, cmd=spec.cmd, workdir=spec.workdir, log=log,
                              entrypoint=spec.entrypoint, user=spec.user)
        rootfs.unlink()
        partial = Path(tmp, archive.name)
        buildah.save(reference, partial, log=log)
        partial.replace(archive)
    meta = {
        "reference": reference, "key": spec.key(), "stands_for": spec.stands_for, "recipe": spec.recipe(),
        "archive_bytes": archive.stat().st_size, "installed_kib": cost.installed_kib,
        "downloaded_bytes": cost.downloaded_bytes, "packages": [f"{n}={v}" for n, v in cost.packages],
        "bootstrap_seconds": round(cost.seconds, 1),
        "build_seconds": round(time.monotonic() - started, 1),
        "build_cpu_seconds": round(_children_cpu() - cpu, 1),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    archive.with_suffix(".json").write_text(json.dumps(meta, indent=2) + "\n")
    _say(f"    {reference}: {len(cost.packages)} packages, {cost.downloaded_bytes / 1e6:.0f} MB downloaded, "
         f"{meta['build_seconds']} s")
    _prune(archive.parent, f"{spec.name}-{spec.suite}-", keep={archive})
    return reference


# --------------------------------------------------------------------------------------------- images


def _inputs(spec: ImageSpec) -> tuple[str, list[str], Mapping[str, str]]:
    """(key, context file descriptions, build args) for the image's current sources."""
    text = (REPO / "Dockerfile").read_text()
    dockerfile = parse_dockerfile(text)
    build_args = {arg: base.reference() for arg, base in sorted(spec.bases.items())}
    unknown = set(build_args) - set(dockerfile.global_args)
    if unknown:
        raise ImageError(f"image {spec.name}: the Dockerfile declares no ARG {', '.join(sorted(unknown))}")
    files = context_files(dockerfile, spec.target, REPO, build_args)
    lines = [f.line() for f in files]
    digest = hashlib.sha256()
    for part in (BUILD_RECIPE, spec.target, text, json.dumps(build_args, sort_keys=True), *lines):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16], lines, build_args


def plan(name: str = "kct") -> BuiltImage:
    """Where the archive of `name` for the current sources is (or will be); builds nothing."""
    try:
        spec = IMAGES[name]
    except KeyError:
        raise ImageError(f"unknown image {name!r}; known: {', '.join(IMAGES)}") from None
    key, _, _ = _inputs(spec)
    return BuiltImage(name=name, reference=f"{spec.repository}:{key}",
                      archive=cache_root() / f"{name}-{key}.tar", key=key)


def _build(spec: ImageSpec, image: BuiltImage) -> None:
    buildah = _buildah()
    log = cache_root() / "logs" / f"{image.name}-{image.key}.log"
    log.unlink(missing_ok=True)
    started, cpu = time.monotonic(), _children_cpu()
    base_seconds: dict[str, float] = {}
    for base in spec.bases.values():
        t0 = time.monotonic()
        ensure_base(base)
        base_seconds[base.name] = round(time.monotonic() - t0, 1)
    key, lines, build_args = _inputs(spec)
    if key != image.key:
        raise ImageError(f"image {spec.name}: the sources changed during the build (key {image.key} -> {key})")
    _say(f"==> image {image.reference} (buildah bud --target {spec.target}), log: {log}")
    bud_started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=cache_root(), prefix=".context-") as tmp:
        dockerfile = parse_dockerfile((REPO / "Dockerfile").read_text())
        files = context_files(dockerfile, spec.target, REPO, build_args)
        staged_dockerfile = stage_context(files, REPO, dockerfile.text, Path(tmp, "context"))
        volumes = [f"{CA_BUNDLE}:{CA_BUNDLE}:ro"] if Path(CA_BUNDLE).is_file() else []
        buildah.bud(context=Path(tmp, "context"), dockerfile=staged_dockerfile, target=spec.target,
                    tag=image.reference, build_args=build_args, volumes=volumes, log=log)
        bud_seconds = time.monotonic() - bud_started
        partial = Path(tmp, image.archive.name)
        buildah.save(image.reference, partial, log=log)
        partial.replace(image.archive)
    # The archive is the product; a vfs copy in the storage would only take disk.
    buildah.remove_image(image.reference)
    buildah.prune()
    meta = {
        "name": image.name, "reference": image.reference, "key": image.key, "target": spec.target,
        "build_args": build_args, "context_files": lines, "archive_bytes": image.archive.stat().st_size,
        "bases_seconds": base_seconds, "bud_seconds": round(bud_seconds, 1),
        "build_seconds": round(time.monotonic() - started, 1),
        "build_cpu_seconds": round(_children_cpu() - cpu, 1),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    image.metadata_path.write_text(json.dumps(meta, indent=2) + "\n")
    _say(f"    {image.reference}: {image.archive.stat().st_size / 1e6:.0f} MB archive, "
         f"{meta['build_seconds']} s ({meta['build_cpu_seconds']} CPU-s)")
    _prune(cache_root(), f"{image.name}-", keep={image.archive})


def _prune(folder: Path, prefix: str, *, keep: set[Path]) -> None:
    """Keep the newest KEEP_ARCHIVES archives starting with `prefix` (and `keep`, and those younger than
    KEEP_RECENT_SECONDS); delete the rest."""
    archives = sorted((p for p in folder.glob(f"{prefix}*.tar") if p.stem[len(prefix):].isalnum()),
                      key=lambda p: p.stat().st_mtime, reverse=True)
    recent = time.time() - KEEP_RECENT_SECONDS
    for old in [p for p in archives if p not in keep][max(0, KEEP_ARCHIVES - len(keep)):]:
        if old.stat().st_mtime > recent:
            continue
        old.unlink(missing_ok=True)
        old.with_suffix(".json").unlink(missing_ok=True)
        (cache_root() / "logs" / f"{old.stem}.log").unlink(missing_ok=True)


def ensure_images(names: Sequence[str] | None = None, *, rebuild: bool = False) -> list[BuiltImage]:
    """The archives of `names` (default: all) for the current sources, building the missing ones."""
    results = []
    for name in names or list(IMAGES):
        image = plan(name)
        if image.exists() and not rebuild:
            results.append(image)
            continue
        ensure_host_tools()
        with _locked():
            if not image.exists() or rebuild:   # another build may have made it while we waited
                _build(IMAGES[name], image)
        results.append(image)
    return results


def _describe_bases() -> None:
    for spec in BASES.values():
        archive = _base_archive(spec)
        state = "missing"
        if archive.with_suffix(".json").is_file():
            meta = json.loads(archive.with_suffix(".json").read_text())
            state = (f"{meta['archive_bytes'] / 1e6:.0f} MB, {len(meta['packages'])} packages, "
                     f"{meta['downloaded_bytes'] / 1e6:.0f} MB downloaded, built in {meta['build_seconds']} s")
        print(f"{spec.reference()}\t{archive}\t{spec.stands_for}\t{state}")


def _run_in(name: str, argv: list[str] | None) -> int:
    (image,) = ensure_images([name])
    with tempfile.TemporaryDirectory(prefix=f"kct-run-{name}-") as tmp:
        config = unpack(image.archive, Path(tmp, "rootfs"))
        proc = run(Path(tmp, "rootfs"), config, argv)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    return proc.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build the missing images; print ARCHIVE<TAB>REFERENCE per image")
    build.add_argument("names", nargs="*", metavar="NAME", help="one of " + ", ".join(IMAGES))
    build.add_argument("--rebuild", action="store_true", help="build even when the archive exists")
    build.add_argument("--json", action="store_true", help="print a JSON list instead")
    show = sub.add_parser("plan", help="print ARCHIVE<TAB>REFERENCE for the current sources, building nothing")
    show.add_argument("names", nargs="*", metavar="NAME")
    show.add_argument("--json", action="store_true")
    sub.add_parser("bases", help="the local bases: reference, archive, what they stand for, state")
    execute = sub.add_parser("run", help="run a command in an image (built when missing) with runc, as the "
                                         "chart runs it: its user, read-only root, writable /tmp, no network")
    execute.add_argument("name", choices=sorted(IMAGES))
    execute.add_argument("argv", nargs=argparse.REMAINDER, help="the command (default: the image's own)")
    args = parser.parse_args(argv)
    try:
        if args.command == "bases":
            _describe_bases()
            return 0
        if args.command == "run":
            command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
            return _run_in(args.name, command or None)
        images = ensure_images(args.names, rebuild=args.rebuild) if args.command == "build" \
            else [plan(name) for name in args.names or IMAGES]
    except (ImageError, BootstrapError, BuildahError, DockerfileError, RunError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([{"name": i.name, "archive": str(i.archive), "reference": i.reference,
                           "built": i.exists()} for i in images], indent=2))
    else:
        for image in images:
            print(f"{image.archive}\t{image.reference}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
