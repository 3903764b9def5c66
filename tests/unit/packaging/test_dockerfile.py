"""The Dockerfile: linted with hadolint, and every RUN command it has executed here, outside Docker.

This machine has no Docker engine, so instead of building the image we replay each stage's RUN command
in a scratch directory that stands in for the image's filesystem: the build context is copied as the
stage's COPY lines say, and the absolute paths the command writes to (/opt/kct, /jars, ...) are moved
under the scratch directory. A RUN command nobody replays fails `test_every_run_command_is_replayed`.

These tests reach the package registries (pip, Maven) and take a minute or two on a warm cache.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[3]
DOCKERFILE = REPO / "Dockerfile"
PYTHON_310 = Path("/root/.pyenv/versions/3.10.13/bin/python3")


@dataclass
class Stage:
    name: str
    base: str
    workdir: str = "/"
    copies: list[tuple[list[str], str]] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    users: list[str] = field(default_factory=list)


def parse_dockerfile(text: str) -> tuple[dict[str, str], list[Stage]]:
    """(global ARG defaults, stages in order); enough of the syntax for this project's Dockerfile."""
    logical = re.sub(r"\\\n", " ", text)
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for raw in logical.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, rest = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "ARG" and "=" in rest and not stages:
            key, _, value = rest.partition("=")
            args[key] = value
        elif instruction == "FROM":
            base, _, name = rest.partition(" AS ")
            stages.append(Stage(name=name.strip(), base=base.strip()))
        elif instruction == "WORKDIR":
            stages[-1].workdir = rest
        elif instruction == "COPY" and not rest.startswith("--from"):
            *sources, destination = rest.split()
            stages[-1].copies.append((sources, destination))
        elif instruction == "RUN":
            stages[-1].runs.append(rest)
        elif instruction == "USER":
            stages[-1].users.append(rest)
    return args, stages


ARGS, STAGES = parse_dockerfile(DOCKERFILE.read_text())
BY_NAME = {stage.name: stage for stage in STAGES}


def expand(text: str) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: ARGS.get(m.group(1), m.group(0)), text)


def replay(stage: Stage, root: Path, command: str, *, env: dict[str, str] | None = None,
           rewrite: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `command` of `stage` with the stage's COPYs done under `root` and absolute paths moved there."""
    workdir = root / stage.workdir.lstrip("/")
    workdir.mkdir(parents=True, exist_ok=True)
    for sources, destination in stage.copies:
        target = root / destination.lstrip("/") if destination.startswith("/") else workdir / destination
        for source in sources:
            origin = REPO / source.rstrip("/")
            if origin.is_dir():
                ignore = shutil.ignore_patterns("target", "__pycache__")
                shutil.copytree(origin, target, dirs_exist_ok=True, ignore=ignore)
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, target / origin.name)
    # Every absolute path in a RUN command is a path inside the image: move it under `root`.
    local = re.sub(r"(?<![\w.$}])(/[\w.*-]+)", lambda m: f"{root}{m.group(1)}", expand(command))
    for old, new in (rewrite or {}).items():
        local = local.replace(old, new)
    return subprocess.run(["bash", "-eo", "pipefail", "-c", local], cwd=workdir, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, check=False, timeout=900)


REPLAYED = {"plugin-build", "spark-jars", "spark", "build"}


def test_every_run_command_is_replayed() -> None:
    """Given the Dockerfile, then each stage with RUN commands is one the tests below replay (or `runtime`)."""
    with_runs = {stage.name for stage in STAGES if stage.runs}
    assert with_runs - {"runtime"} <= REPLAYED
    assert BY_NAME["runtime"].runs == [
        "useradd --system --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin kct"
    ]


def test_hadolint_passes(tools: ModuleType) -> None:
    """Given the Dockerfile, when hadolint (from its PyPI wheel) lints it, then it reports nothing."""
    hadolint = tools.ensure_hadolint()
    proc = subprocess.run([str(hadolint), "--no-color", str(DOCKERFILE)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == ""


def test_images_are_small_pinned_and_non_root() -> None:
    """Given the stages, then bases carry exact versions, the default target is `runtime`, and images run non-root."""
    for stage in STAGES:
        base = expand(stage.base)
        if base == "scratch" or base in BY_NAME:
            continue
        assert re.search(r":\d+\.\d+\.\d+", base), f"{stage.name}: base {base} is not pinned to an exact version"
    assert STAGES[-1].name == "runtime"
    assert "slim" in expand(BY_NAME["runtime"].base)
    for name in ("runtime", "spark"):
        final_user = BY_NAME[name].users[-1]
        assert final_user.split(":")[0] not in {"0", "root"}, f"{name} runs as root"
    assert expand(BY_NAME["spark"].base).startswith("apache/spark:")


def test_operator_image_install_gives_the_kct_command(tmp_path: Path) -> None:
    """Given the `build` stage, when its RUN runs here, then the venv it makes has `kct operator` and `kct receiver`."""
    (command,) = BY_NAME["build"].runs
    # pip's own cache is kept here (the image build disables it to stay small); nothing else changes.
    proc = replay(BY_NAME["build"], tmp_path, command,
                  rewrite={" --no-cache-dir": "", "python -m venv": f"{sys.executable} -m venv"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    kct = tmp_path / "opt" / "kct" / "bin" / "kct"
    out = subprocess.run([str(kct), "--help"], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert "operator" in out.stdout


def test_plugin_stage_builds_the_jar(tmp_path: Path) -> None:
    """Given the `plugin-build` stage, when its RUN runs here, then the jar lands where later stages copy it from."""
    (command,) = BY_NAME["plugin-build"].runs
    if shutil.which("mvn") is None:
        pytest.skip("mvn is not installed")
    proc = replay(BY_NAME["plugin-build"], tmp_path, command)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "kct-telemetry-plugin.jar").stat().st_size > 1000


def test_spark_jars_stage_copies_the_connectors(tmp_path: Path) -> None:
    """Given the `spark-jars` stage, when its RUN runs here, then the Kafka and protobuf connectors are copied."""
    (command,) = BY_NAME["spark-jars"].runs
    if shutil.which("mvn") is None:
        pytest.skip("mvn is not installed")
    (tmp_path / "src" / "no-extra-repository").mkdir(parents=True)  # an empty folder git does not keep
    proc = replay(BY_NAME["spark-jars"], tmp_path, command)
    missing = re.search(r"Could not find artifact (\S+)", proc.stdout)
    if proc.returncode != 0 and missing:
        # The registry mirror this machine reaches lacks some Spark connector artifacts; a real build does not.
        pytest.skip(f"Maven cannot resolve {missing.group(1)} from the registries reachable here")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    jars = {jar.name for jar in (tmp_path / "jars").glob("*.jar")}
    version = ARGS["SPARK_VERSION"]
    assert f"spark-sql-kafka-0-10_2.13-{version}.jar" in jars
    assert f"spark-protobuf_2.13-{version}.jar" in jars


@pytest.mark.skipif(not PYTHON_310.exists(), reason="no Python 3.10 (the Spark image's Python) on this machine")
def test_spark_stage_libraries_import_on_the_spark_image_python(tmp_path: Path) -> None:
    """Given the `spark` stage, when its pip RUN runs with Python 3.10 (Ubuntu 22.04's, as in the official
    Spark image), then the job's modules import from the PYTHONPATH it sets."""
    (command,) = BY_NAME["spark"].runs
    proc = replay(BY_NAME["spark"], tmp_path, command, rewrite={"python3 -m pip": f"{PYTHON_310} -m pip",
                                                               " --no-cache-dir": ""})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    python_path = tmp_path / "opt" / "kct" / "python"
    assert (python_path / "kct" / "aggregation").is_dir()
    # pyspark comes with the Spark image; borrow the (pure-Python) one of this venv, after the image's paths.
    pyspark_home = Path(__import__("pyspark").__file__).parents[1]
    modules = sorted(f"kct.aggregation.{p.stem}" for p in (python_path / "kct" / "aggregation").glob("[!_]*.py"))
    probe = subprocess.run(
        [str(PYTHON_310), "-c", "import importlib, sys; [importlib.import_module(m) for m in sys.argv[1:]]", *modules],
        env={**os.environ, "PYTHONPATH": f"{python_path}:{pyspark_home}"}, capture_output=True, text=True, check=False,
    )
    assert probe.returncode == 0, probe.stderr[-3000:]


def test_python_interpreter_of_the_build_stage_matches_the_project() -> None:
    """Given the Python base image, then its minor version is one the project supports (requires-python)."""
    match = re.search(r"python:(\d+)\.(\d+)", ARGS["PYTHON_IMAGE"])
    assert match is not None
    assert (int(match.group(1)), int(match.group(2))) >= (3, 11)
    assert sys.version_info >= (3, 11)
