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
