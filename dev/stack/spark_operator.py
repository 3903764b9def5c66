#!/usr/bin/env python3
"""The Kubeflow spark-operator's CRDs (SparkApplication, ScheduledSparkApplication), from its Go module.

A TelemetryReceiver with `aggregation` renders a SparkApplication; the e2e tests apply the spark-operator's
real CRDs so the API server checks that object against the real schema, and examples/telemetryreceiver.yaml
tells users how to install them. They are fetched, never copied into git: `go mod download` of
`github.com/kubeflow/spark-operator/v2` at SPARK_OPERATOR_VERSION through the Go module proxy (the module
zip carries `config/crd/bases/`), and the YAML copied to `~/.cache/kct/spark-operator/<version>/crds/`.
`stack.py up` fetches them with the other servers, so the cache is warm before any test needs it.

    python3 dev/stack/spark_operator.py path    # prints the CRD folder, fetching it when missing
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _proc

__all__ = ["MODULE", "SPARK_OPERATOR_VERSION", "crds"]

MODULE = "github.com/kubeflow/spark-operator/v2"
SPARK_OPERATOR_VERSION = "2.4.0"
_BASES = Path("config", "crd", "bases")
# The two kinds `kct.render` builds; the module's other CRDs (SparkConnect) are copied along.
REQUIRED = ("sparkoperator.k8s.io_sparkapplications.yaml", "sparkoperator.k8s.io_scheduledsparkapplications.yaml")


def crds() -> Path:
    """The folder holding the spark-operator's CRD YAML (`kubectl apply -f` it), fetched when missing."""
    tool, version = "spark-operator-crds", SPARK_OPERATOR_VERSION
    home = _proc.cache_dir("spark-operator", version)
    target = home / "crds"
    if all((target / name).is_file() for name in REQUIRED):
        return target
    go = shutil.which("go")
    if go is None:
        raise _proc.InstallError(tool, version, "the `go` toolchain is not on PATH (it fetches the Go module)")
    with _proc.step(f"spark-operator {version} CRDs (go mod download {MODULE})"), \
            tempfile.TemporaryDirectory(dir=home) as tmp:
        # A throw-away module cache, writable so it can be removed: only the YAML is kept.
        env = dict(os.environ, GOMODCACHE=str(Path(tmp, "mod")), GOFLAGS="-modcacherw")
        out = _proc.run([go, "mod", "download", "-json", f"{MODULE}@v{version}"],
                        tool=tool, version=version, cwd=Path(tmp), env=env)
        info = json.loads(out)
        if info.get("Error") or not info.get("Dir"):
            raise _proc.InstallError(tool, version, f"go mod download {MODULE}@v{version}: {info.get('Error')}")
        bases = Path(info["Dir"]) / _BASES
        missing = [name for name in REQUIRED if not (bases / name).is_file()]
        if missing:
            raise _proc.InstallError(tool, version, f"the module has no {', '.join(missing)} under {_BASES}")
        staged = Path(tmp, "crds")
        staged.mkdir()
        for source in sorted(bases.glob("*.yaml")):
            shutil.copyfile(source, staged / source.name)
        if target.exists():
            shutil.rmtree(target)
        staged.replace(target)
    return target


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args != ["path"]:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        with contextlib.redirect_stdout(sys.stderr):  # progress to stderr: stdout is the path alone
            folder = crds()
        print(folder)
    except _proc.InstallError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
