"""dev/stack/spark_operator.py: the spark-operator's CRDs taken from its Go module into the cache, never
from a folder outside the repository. A stand-in `go` (a script answering `go mod download -json`) plays
the Go module proxy, so this runs offline; the e2e tests use the real module."""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "dev" / "stack"))
import _proc
import spark_operator


def fake_go(bin_dir: Path, module_dir: Path, calls: Path) -> None:
    """A `go` whose `mod download -json` reports `module_dir` as the downloaded module."""
    info = json.dumps({"Path": spark_operator.MODULE, "Dir": str(module_dir)})
    script = bin_dir / "go"
    script.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\ncat <<'EOF'\n{info}\nEOF\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KCT_CACHE", str(tmp_path / "cache"))
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


def test_the_crds_are_copied_from_the_module_once(sandbox: Path) -> None:
    """Given a module holding the CRDs under config/crd/bases, when the folder is asked for twice, then the
    YAML is in the versioned cache and the module is downloaded only the first time."""
    bases = sandbox / "module" / "config" / "crd" / "bases"
    bases.mkdir(parents=True)
    for name in (*spark_operator.REQUIRED, "sparkoperator.k8s.io_sparkconnects.yaml"):
        (bases / name).write_text(f"# {name}\n")
    calls = sandbox / "calls"
    fake_go(sandbox / "bin", sandbox / "module", calls)
    folder = spark_operator.crds()
    assert folder == sandbox / "cache" / "spark-operator" / spark_operator.SPARK_OPERATOR_VERSION / "crds"
    assert sorted(p.name for p in folder.iterdir()) == sorted((*spark_operator.REQUIRED,
                                                               "sparkoperator.k8s.io_sparkconnects.yaml"))
    assert spark_operator.crds() == folder
    assert calls.read_text().splitlines() == [
        f"mod download -json {spark_operator.MODULE}@v{spark_operator.SPARK_OPERATOR_VERSION}"
    ]


def test_a_module_without_the_crds_is_refused_and_caches_nothing(sandbox: Path) -> None:
    (sandbox / "module").mkdir()
    fake_go(sandbox / "bin", sandbox / "module", sandbox / "calls")
    with pytest.raises(_proc.InstallError, match=re.escape("has no sparkoperator.k8s.io_sparkapplications.yaml")):
        spark_operator.crds()
    assert not (sandbox / "cache" / "spark-operator" / spark_operator.SPARK_OPERATOR_VERSION / "crds").exists()


def test_the_chart_and_the_binary_come_from_the_module_and_are_cached(sandbox: Path) -> None:
    """Given the module (its chart under charts/spark-operator-chart, read-only as in Go's module cache), when
    the chart and the binary are asked for twice, then the chart is a writable copy in the versioned cache,
    the binary is `go build` of ./cmd/operator run inside the module, and the second calls build nothing."""
    chart = sandbox / "module" / "charts" / "spark-operator-chart"
    (chart / "crds").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("name: spark-operator\n")
    (chart / "crds" / "x.yaml").write_text("# crd\n")
    for path in (chart / "crds" / "x.yaml", chart / "Chart.yaml", chart / "crds", chart):
        path.chmod(path.stat().st_mode & ~0o222)
    calls = sandbox / "calls"
    info = json.dumps({"Path": spark_operator.MODULE, "Dir": str(sandbox / "module")})
    script = sandbox / "bin" / "go"
    script.write_text(f"#!/bin/sh\necho \"$PWD $@\" >> {calls}\n"
                      "if [ \"$1\" = build ]; then shift; while [ \"$1\" != -o ]; do shift; done; "
                      "echo binary > \"$2\"; exit 0; fi\n"
                      f"cat <<'EOF'\n{info}\nEOF\n")
    script.chmod(0o755)
    home = sandbox / "cache" / "spark-operator" / spark_operator.SPARK_OPERATOR_VERSION
    assert spark_operator.chart() == home / "chart"
    assert (home / "chart" / "crds" / "x.yaml").read_text() == "# crd\n"
    assert (home / "chart" / "Chart.yaml").stat().st_mode & 0o200
    assert spark_operator.binary() == home / "spark-operator" == spark_operator.binary_path()
    assert (home / "spark-operator").read_text() == "binary\n"
    assert spark_operator.chart() == home / "chart" and spark_operator.binary() == home / "spark-operator"
    builds = [line for line in calls.read_text().splitlines() if " build " in line]
    assert len(builds) == 1 and builds[0].startswith(f"{sandbox / 'module'} build ")
    assert builds[0].endswith("./cmd/operator")
    for path in (chart, chart / "crds"):  # let pytest remove the tree
        path.chmod(0o755)
