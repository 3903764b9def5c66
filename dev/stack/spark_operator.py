#!/usr/bin/env python3
"""The Kubeflow spark-operator from its Go module: its CRDs, its controller binary and its Helm chart.

A TelemetryReceiver with `aggregation` renders a SparkApplication; the e2e tests apply the spark-operator's
real CRDs so the API server checks that object against the real schema, and examples/telemetryreceiver.yaml
tells users how to install them. They are fetched, never copied into git: `go mod download` of
`github.com/kubeflow/spark-operator/v2` at SPARK_OPERATOR_VERSION through the Go module proxy (the module
zip carries `config/crd/bases/`), and the YAML copied to `~/.cache/kct/spark-operator/<version>/crds/`.
`stack.py up` fetches them with the other servers, so the cache is warm before any test needs it.

The node stack runs the operator itself (tests/e2e/test_spark_operator_e2e.py): `binary()` is `go build` of
the module's `cmd/operator` (controller and webhook in one program, as upstream's image has it), cached as
`~/.cache/kct/spark-operator/<version>/spark-operator`; `chart()` is the module's own chart
(charts/spark-operator-chart, CRDs in its crds/), copied to `~/.cache/kct/spark-operator/<version>/chart/`,
installed with our helm as users install it. dev/images/spark_operator_image.py puts the binary on the local
Spark base (the operator runs spark-submit) as the image that chart runs.

    python3 dev/stack/spark_operator.py path      # prints the CRD folder, fetching it when missing
    python3 dev/stack/spark_operator.py binary    # prints the controller binary's path, building it when missing
    python3 dev/stack/spark_operator.py chart     # prints the chart's folder, fetching it when missing
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _proc

__all__ = ["MODULE", "SPARK_OPERATOR_VERSION", "binary", "binary_path", "chart", "crds"]

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


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise _proc.InstallError("spark-operator", SPARK_OPERATOR_VERSION, "the `go` toolchain is not on PATH")
    return go


def _module_info() -> dict[str, Any]:
    """`go mod download -json` of the module: its source (`Dir`) in Go's own module cache (read-only, shared
    with other builds; building needs the dependencies there anyway) and its origin (`Origin.Hash`)."""
    tool, version = "spark-operator", SPARK_OPERATOR_VERSION
    out = _proc.run([_go(), "mod", "download", "-json", f"{MODULE}@v{version}"], tool=tool, version=version,
                    cwd=_proc.cache_dir("go-scratch"))
    info: dict[str, Any] = json.loads(out)
    if info.get("Error") or not info.get("Dir"):
        raise _proc.InstallError(tool, version, f"go mod download {MODULE}@v{version}: {info.get('Error')}")
    return info


def _module_dir() -> Path:
    return Path(_module_info()["Dir"])


def version_ldflags(tag: str, commit: str) -> str:
    """What upstream's Makefile stamps into the binary (`spark-operator version` reports the release)."""
    stamp = {"version": tag, "gitTag": tag, "gitCommit": commit, "gitTreeState": "clean"}
    return " ".join(["-s", "-w", *(f"-X {MODULE}.{name}={value}" for name, value in stamp.items())])


def binary_path() -> Path:
    """Where `binary()` keeps the program (present or not)."""
    return _proc.cache_dir("spark-operator", SPARK_OPERATOR_VERSION) / "spark-operator"


def binary() -> Path:
    """The spark-operator program (`spark-operator controller start` / `webhook start`), built when missing.

    Built inside the module's folder (its go.mod has `replace` directives, which `go install mod@version`
    refuses), static (CGO_ENABLED=0), as upstream's Makefile builds it."""
    tool, version = "spark-operator", SPARK_OPERATOR_VERSION
    target = binary_path()
    if target.is_file():
        return target
    info = _module_info()
    source = Path(info["Dir"])
    ldflags = version_ldflags(f"v{version}", str((info.get("Origin") or {}).get("Hash", "")))
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod -buildvcs=false")
    with _proc.step(f"spark-operator {version}: go build ./cmd/operator (minutes when cold)"), \
            tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        built = Path(tmp, "spark-operator")
        _proc.run([_go(), "build", "-trimpath", "-ldflags", ldflags, "-o", str(built), "./cmd/operator"],
                  tool=tool, version=version, cwd=source, env=env)
        built.replace(target)
    return target


def chart() -> Path:
    """The module's Helm chart (templates, values, its CRDs under crds/), copied out of the module cache."""
    target = _proc.cache_dir("spark-operator", SPARK_OPERATOR_VERSION) / "chart"
    if (target / "Chart.yaml").is_file():
        return target
    source = _module_dir() / "charts" / "spark-operator-chart"
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        staged = Path(tmp, "chart")
        shutil.copytree(source, staged)
        for path in [staged, *staged.rglob("*")]:  # the module cache is read-only; the copy need not be
            path.chmod(path.stat().st_mode | 0o200)
        if target.exists():
            shutil.rmtree(target)
        staged.replace(target)
    return target


COMMANDS = {"path": crds, "binary": binary, "chart": chart}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in COMMANDS:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        with contextlib.redirect_stdout(sys.stderr):  # progress to stderr: stdout is the path alone
            found = COMMANDS[args[0]]()
        print(found)
    except _proc.InstallError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
