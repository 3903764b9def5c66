"""The Kubeflow spark-operator's image, built here: its controller binary on the local Spark base.

    python3 dev/images/spark_operator_image.py build   # prints "ARCHIVE<TAB>REFERENCE", building when missing
    python3 dev/images/spark_operator_image.py plan    # the same line, building nothing (fails without the binary)

Upstream's image is its `go build` output on the official Spark image (the controller runs spark-submit),
started through an entrypoint that runs the binary with the chart's arguments (`controller start ...`,
`webhook start ...`). This one is the same program (built from the released Go module by
dev/stack/spark_operator.py) on the same local JDK + Spark base as our `spark` image (debian_base.py,
SPARK_BASE), run as the base's spark user (185), so the chart's `runAsNonRoot` holds. Not a stage of our
Dockerfile: it is not our product, only what the local node runs to schedule our SparkApplications.

The archive is `~/.cache/kct/images/spark-operator-<key>.tar`, reference `kct.dev/spark-operator:<key>`, the key a
hash of the base's key and the binary. Needs root (buildah). Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "stack"))
import spark_operator  # type: ignore[import-not-found, unused-ignore]
from buildah import BuildahError
from debian_base import SPARK_BASE, BootstrapError
from images import BuiltImage, ImageError, _buildah, _locked, _prune, cache_root, ensure_base, ensure_host_tools

__all__ = ["NAME", "ensure_spark_operator_image", "plan"]

NAME = "spark-operator"
RECIPE = "1"
# Where upstream's image has it (its chart's probes and docs assume nothing else about the layout).
BINARY_PATH = "/usr/bin/spark-operator"


def _key(binary: Path) -> str:
    digest = hashlib.sha256(f"{RECIPE}\0{SPARK_BASE.key()}\0{spark_operator.SPARK_OPERATOR_VERSION}\0".encode())
    digest.update(hashlib.sha256(binary.read_bytes()).digest())
    return digest.hexdigest()[:16]


def plan(binary: Path) -> BuiltImage:
    key = _key(binary)
    return BuiltImage(name=NAME, reference=f"kct.dev/{NAME}:{key}", archive=cache_root() / f"{NAME}-{key}.tar",
                      key=key)


def _build(binary: Path, image: BuiltImage) -> None:
    buildah = _buildah()
    log = cache_root() / "logs" / f"{NAME}-{image.key}.log"
    log.unlink(missing_ok=True)
    started = time.monotonic()
    base = ensure_base(SPARK_BASE)
    container = buildah.run("from", "--pull=never", base).strip()
    try:
        buildah.run("copy", "--chmod", "0755", container, str(binary), BINARY_PATH, log=log)
        buildah.run("config", "--entrypoint", json.dumps([BINARY_PATH]), "--cmd", "[]", "--user", "185:185",
                    "--label", f"org.opencontainers.image.version={spark_operator.SPARK_OPERATOR_VERSION}",
                    container)
        buildah.run("commit", "--quiet", container, image.reference, log=log)
    finally:
        buildah.run("rm", container)
    with tempfile.TemporaryDirectory(dir=cache_root(), prefix=".spark-operator-") as tmp:
        partial = Path(tmp, image.archive.name)
        buildah.save(image.reference, partial, log=log)
        partial.replace(image.archive)
    buildah.remove_image(image.reference)
    meta = {"name": NAME, "reference": image.reference, "key": image.key, "base": base,
            "spark_operator_version": spark_operator.SPARK_OPERATOR_VERSION,
            "archive_bytes": image.archive.stat().st_size, "build_seconds": round(time.monotonic() - started, 1),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    image.metadata_path.write_text(json.dumps(meta, indent=2) + "\n")
    _prune(cache_root(), f"{NAME}-", keep={image.archive})


def ensure_spark_operator_image() -> BuiltImage:
    """The image's archive, built (with the binary, when that is missing too) unless already there."""
    binary = spark_operator.binary()
    image = plan(binary)
    if image.exists():
        return image
    ensure_host_tools()
    with _locked():
        if not image.exists():
            _build(binary, image)
    return image


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["build", "plan"])
    args = parser.parse_args(argv)
    try:
        if args.command == "plan":
            binary = spark_operator.binary_path()
            if not binary.is_file():
                raise ImageError(f"no spark-operator binary at {binary}: run `make spark-operator`")
            image = plan(binary)
        else:
            image = ensure_spark_operator_image()
    except (ImageError, BootstrapError, BuildahError, spark_operator._proc.InstallError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"{image.archive}\t{image.reference}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
