"""The node's own images, built without a registry: static Go programs in otherwise empty (scratch) images.

`pause` holds each pod sandbox's namespaces (containerd's `sandbox_image`); `probe` is the workload of the
node's end-to-end test (an HTTP server, and checks of DNS, Services and the ServiceAccount token). Their
sources are in `dev/stack/node-images/`, standard library only, so `go build` needs no module download.
Each image is written as an OCI image-layout tarball that `ctr -n k8s.io images import` loads under the
reference `kct.dev/<name>:<key>`, the key a hash of the sources and the Go version: a changed program is a
new reference. Cached under `~/.cache/kct/node-images/<key>/`. Standard library only.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path

import _proc

__all__ = ["NODE_IMAGES", "SOURCES", "NodeImage", "ensure_node_images", "oci_archive", "sources_key"]

SOURCES = Path(__file__).resolve().parent / "node-images"
NODE_IMAGES = ("pause", "probe")
# Bump when the archive layout changes in a way the sources do not show.
RECIPE = "1"


@dataclass(frozen=True)
class NodeImage:
    name: str
    reference: str   # kct.dev/<name>:<key>
    archive: Path    # OCI image-layout tarball
    binary: Path     # the static program itself (the test also runs probe in the node's network namespace)


def _go() -> str:
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else None)
    if go is None:
        raise _proc.InstallError("node images", RECIPE, "the `go` toolchain is not on PATH")
    return go


def sources_key(go_version: str) -> str:
    digest = hashlib.sha256(f"{RECIPE}\0{go_version}\0".encode())
    for path in sorted(p for p in SOURCES.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(SOURCES)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _tar_bytes(members: list[tuple[str, bytes, int]]) -> bytes:
    """A reproducible tar (mtime 0, root-owned) of (path, content, mode)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, content, mode in members:
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(content), mode, 0
            tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def _blob(blobs: list[tuple[str, bytes, int]], content: bytes, media_type: str) -> dict[str, object]:
    digest = hashlib.sha256(content).hexdigest()
    blobs.append((f"blobs/sha256/{digest}", content, 0o644))
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(content)}


def oci_archive(*, binary: bytes, entrypoint: str, reference: str) -> bytes:
    """An OCI image layout (as a tarball) of one image: one layer holding `binary` at `entrypoint`."""
    layer = _tar_bytes([(entrypoint.lstrip("/"), binary, 0o755)])
    config = {
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": [entrypoint], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(layer).hexdigest()}"]},
    }
    blobs: list[tuple[str, bytes, int]] = []
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": _blob(blobs, json.dumps(config, sort_keys=True).encode(), "application/vnd.oci.image.config.v1+json"),
        "layers": [_blob(blobs, layer, "application/vnd.oci.image.layer.v1.tar")],
    }
    manifest_type = "application/vnd.oci.image.manifest.v1+json"
    descriptor = _blob(blobs, json.dumps(manifest, sort_keys=True).encode(), manifest_type)
    # containerd names the imported image after this annotation (the full reference).
    descriptor["annotations"] = {"io.containerd.image.name": reference,
                                 "org.opencontainers.image.ref.name": reference.rsplit(":", 1)[1]}
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [descriptor]}
    return _tar_bytes([
        ("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode(), 0o644),
        ("index.json", json.dumps(index, sort_keys=True).encode(), 0o644),
        *blobs,
    ])


def ensure_node_images() -> dict[str, NodeImage]:
    """Build (or find cached) the pause and probe images; returns them by name."""
    go = _go()
    go_version = _proc.run([go, "env", "GOVERSION"], tool="node images", version=RECIPE).strip()
    key = sources_key(go_version)
    out = _proc.cache_dir("node-images", key)
    images = {name: NodeImage(name=name, reference=f"kct.dev/{name}:{key}", archive=out / f"{name}.oci.tar",
                              binary=out / name) for name in NODE_IMAGES}
    if all(image.archive.exists() and image.binary.exists() for image in images.values()):
        return images
    with _proc.step(f"node images {', '.join(NODE_IMAGES)} ({key}): go build, OCI archives"):
        tmp = out / "tmp-bin"
        shutil.rmtree(tmp, ignore_errors=True)
        env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
        _proc.run([go, "build", "-trimpath", "-ldflags", "-s -w", "-o", f"{tmp}/", *[f"./{n}" for n in NODE_IMAGES]],
                  tool="node images", version=key, cwd=SOURCES, env=env)
        for image in images.values():
            archive = oci_archive(binary=(tmp / image.name).read_bytes(), entrypoint=f"/{image.name}",
                                  reference=image.reference)
            part = image.archive.with_suffix(".part")
            part.write_bytes(archive)
            part.replace(image.archive)
            (tmp / image.name).replace(image.binary)  # last: its presence says the image is complete
        shutil.rmtree(tmp, ignore_errors=True)
    return images
