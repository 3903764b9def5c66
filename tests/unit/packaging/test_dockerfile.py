"""The Dockerfile: linted, pinned, non-root, and every stage that runs commands built or replayed here.

`make images` builds the stages of the images listed in dev/images/images.py (the runtime image: `plugin-build`,
`build`, `runtime`; the Spark job image: `spark-jars`, `otlp-decoder`, `job-python`, `spark`) from this Dockerfile with
buildah, on local Debian bases passed as PYTHON_IMAGE, MAVEN_IMAGE and SPARK_IMAGE; test_runtime_image.py
and test_spark_image.py run the results.

Two RUN commands are also replayed outside any image, for what the local build cannot show: `spark-jars`
at the Dockerfile's SPARK_VERSION, and the `spark` stage's pip install with Python 3.10, the Python of the
official Spark image users build on (the local base has Debian's 3.11). The build context is copied as the
stage's COPY lines say into a scratch folder that stands for the image's filesystem, and the absolute paths a
command writes (/opt/kct, /jars, ...) are moved under it. Those replays reach Maven Central and PyPI. A
replay that fails fails its test, whatever the reason; a tool it needs that is missing fails it in CI and
skips it elsewhere.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from chart_support import REPO
from image_support import dev_images, images_module, missing_precondition

images = images_module()
dockerfile = dev_images("dockerfile")

DOCKERFILE_PATH = REPO / "Dockerfile"
DOCKERFILE = dockerfile.parse_dockerfile(DOCKERFILE_PATH.read_text())
ARGS: dict[str, str] = dict(DOCKERFILE.global_args)
BY_NAME: dict[str, Any] = {stage.name: stage for stage in DOCKERFILE.stages}

# Stages only replayed, never built (see the module docstring): none since the Spark stages are built.
REPLAYED: set[str] = set()


def replay(stage: Any, root: Path, command: str, *,
           rewrite: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `command` of `stage` with the stage's COPYs done under `root` and absolute paths moved there."""
    workdir = root / stage.workdir.lstrip("/")
    workdir.mkdir(parents=True, exist_ok=True)
    for instruction in stage.of("COPY"):
        if instruction.flag("from") is not None:
            continue  # another stage's output: not part of this command's inputs
        *sources, destination = instruction.arguments.split()
        target = root / destination.lstrip("/") if destination.startswith("/") else workdir / destination
        for source in sources:
            origin = REPO / source.rstrip("/")
            if origin.is_dir():
                ignore = shutil.ignore_patterns("target", "__pycache__", "*.egg-info")
                shutil.copytree(origin, target, dirs_exist_ok=True, ignore=ignore)
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, target / origin.name)
    # Every absolute path in a RUN command is a path inside the image: move it under `root`.
    local = re.sub(r"(?<![\w.$}])(/[\w.*-]+)", lambda m: f"{root}{m.group(1)}", DOCKERFILE.expand(command))
    for old, new in (rewrite or {}).items():
        local = local.replace(old, new)
    return subprocess.run(["bash", "-eo", "pipefail", "-c", local], cwd=workdir, capture_output=True, text=True,
                          check=False, timeout=900)


def test_every_stage_that_runs_commands_is_built_or_replayed() -> None:
    """Given the Dockerfile, then each stage with RUN commands is one `make images` builds (a stage of an
    image's target) or one this file replays, and no stage is both."""
    built = {stage.name for spec in images.IMAGES.values() for stage in DOCKERFILE.closure(spec.target)}
    with_runs = {stage.name for stage in DOCKERFILE.stages if stage.runs}
    assert with_runs <= built | REPLAYED, sorted(with_runs - built - REPLAYED)
    assert not built & REPLAYED
    assert {"plugin-build", "build", "runtime", "spark-jars", "otlp-decoder", "job-python", "spark"} <= built


@pytest.mark.parametrize("name", sorted(images.IMAGES))
def test_local_bases_replace_every_base_the_target_starts_from(name: str) -> None:
    """Given an image's build args, then every external base of its stages is a local base (so buildah needs
    no registry), while the defaults stay the official images users build on."""
    spec = images.IMAGES[name]
    local = {arg: base.reference() for arg, base in spec.bases.items()}
    assert set(DOCKERFILE.external_bases(spec.target, local)) == set(local.values())
    official = DOCKERFILE.external_bases(spec.target)
    assert set(official) == {ARGS[arg] for arg in spec.bases}
    assert all(base.split("/")[0].split(":")[0] in {"python", "maven", "apache"} for base in official), official


def test_hadolint_passes(tools: ModuleType) -> None:
    """Given the Dockerfile, when hadolint (from its PyPI wheel) lints it, then it reports nothing."""
    hadolint = tools.ensure_hadolint()
    proc = subprocess.run([str(hadolint), "--no-color", str(DOCKERFILE_PATH)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == ""


def test_images_are_pinned_slim_and_non_root() -> None:
    """Given the stages, then bases carry exact versions, the default target is `runtime` on a slim Python
    whose version the package supports, and the shipped images run non-root."""
    for stage in DOCKERFILE.stages:
        base = DOCKERFILE.expand(stage.base)
        if base == "scratch" or base in BY_NAME:
            continue
        assert re.search(r":\d+\.\d+\.\d+", base), f"{stage.name}: base {base} is not pinned to an exact version"
    assert DOCKERFILE.stages[-1].name == "runtime"
    assert "slim" in DOCKERFILE.expand(BY_NAME["runtime"].base)
    for name in ("runtime", "spark"):
        final_user = BY_NAME[name].users[-1]
        assert final_user.split(":")[0] not in {"0", "root"}, f"{name} runs as root"
    floor = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    wanted = re.fullmatch(r">=\s*(\d+)\.(\d+)", floor)
    python = re.search(r"python:(\d+)\.(\d+)", ARGS["PYTHON_IMAGE"])
    assert wanted is not None and python is not None
    assert (int(python[1]), int(python[2])) >= (int(wanted[1]), int(wanted[2]))


def _declared_connectors() -> set[str]:
    """The jar names dev/spark-deps/pom.xml's direct dependencies resolve to, for the Dockerfile's Spark."""
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    pom = ET.parse(REPO / "dev" / "spark-deps" / "pom.xml").getroot()
    properties = {child.tag.split("}")[1]: child.text or "" for child in pom.find("m:properties", ns) or []}
    properties["spark.version"] = ARGS["SPARK_VERSION"]
    jars = set()
    for dependency in pom.findall("m:dependencies/m:dependency", ns):
        artifact, version = dependency.findtext("m:artifactId", "", ns), dependency.findtext("m:version", "", ns)
        name = re.sub(r"\$\{([\w.]+)\}", lambda m: properties[m[1]], f"{artifact}-{version}.jar")
        jars.add(name)
    return jars


def test_spark_jars_stage_copies_every_declared_connector(tmp_path: Path) -> None:
    """Given the `spark-jars` stage, when its RUN runs here, then every dependency dev/spark-deps/pom.xml
    declares is copied, at the Dockerfile's SPARK_VERSION."""
    (command,) = BY_NAME["spark-jars"].runs
    if shutil.which("mvn") is None:
        missing_precondition("mvn is not installed (a JDK 17 with Maven is a prerequisite of the project)")
    (tmp_path / "src" / "no-extra-repository").mkdir(parents=True)  # an empty folder git does not keep
    proc = replay(BY_NAME["spark-jars"], tmp_path, command)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    jars = {jar.name for jar in (tmp_path / "jars").glob("*.jar")}
    expected = _declared_connectors()
    assert expected and expected <= jars, sorted(expected - jars)


def _python310() -> str | None:
    """A working Python 3.10: `python3.10` on PATH, else pyenv's 3.10.x (its shim runs only when selected)."""
    candidates = [shutil.which("python3.10")]
    pyenv = shutil.which("pyenv")
    if pyenv is not None:
        versions = subprocess.run([pyenv, "versions", "--bare"], capture_output=True, text=True, check=False)
        for version in sorted(v for v in versions.stdout.split() if v.startswith("3.10.")):
            prefix = subprocess.run([pyenv, "prefix", version], capture_output=True, text=True, check=False)
            candidates.append(str(Path(prefix.stdout.strip(), "bin", "python3.10")))
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2] == (3, 10))"],
                               capture_output=True, text=True, check=False)
        if probe.stdout.strip() == "True":
            return candidate
    return None


def test_spark_stage_libraries_import_on_the_spark_image_python(tmp_path: Path) -> None:
    """Given the `spark` stage, when its pip RUN runs with Python 3.10 (Ubuntu 22.04's, as in the official
    Spark image), then the job's modules import from the PYTHONPATH it sets."""
    (command,) = BY_NAME["spark"].runs
    python310 = _python310()
    if python310 is None:
        missing_precondition("no Python 3.10 (the official Spark image's Python): neither python3.10 on PATH "
                             "nor a pyenv version 3.10.x")
    _replay_job_python(tmp_path)
    proc = replay(BY_NAME["spark"], tmp_path, command, rewrite={"python3 -m pip": f"{python310} -m pip",
                                                               " --no-cache-dir": ""})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    python_path = tmp_path / "opt" / "kct" / "python"
    assert (python_path / "kct" / "aggregation").is_dir()
    assert not (python_path / "kct" / "aggregation" / "jvm").exists()
    # pyspark comes with the Spark image; borrow the (pure-Python) one of this venv, after the image's paths.
    pyspark_home = Path(__import__("pyspark").__file__).parents[1]
    modules = sorted(f"kct.aggregation.{p.stem}" for p in (python_path / "kct" / "aggregation").glob("[!_]*.py"))
    probe = subprocess.run(
        [python310, "-c", "import importlib, sys; [importlib.import_module(m) for m in sys.argv[1:]]", *modules],
        env={**os.environ, "PYTHONPATH": f"{python_path}:{pyspark_home}"}, capture_output=True, text=True, check=False,
    )
    assert probe.returncode == 0, probe.stderr[-3000:]


def _replay_job_python(root: Path) -> None:
    """The `spark` stage's kct package: the `job-python` stage replayed (its COPY, its RUN that drops the Java
    sources) under a scratch root, then copied where the `spark` stage's `COPY --from=job-python` puts it."""
    stage = BY_NAME["job-python"]
    scratch = root / "job-python"
    for command in stage.runs:
        proc = replay(stage, scratch, command)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (copy,) = [c for c in BY_NAME["spark"].of("COPY") if c.flag("from") == "job-python"]
    source, destination = copy.arguments.split()
    shutil.copytree(scratch / source.strip("/"), root / destination.strip("/"), dirs_exist_ok=True)


def test_one_spark_release_everywhere() -> None:
    """Given the Spark release the job is tested with (the pyspark pin in pyproject.toml), then the job image
    (Dockerfile SPARK_VERSION), the SparkApplication the operator renders (sparkVersion's default), the
    manifests under spark/, and the two Maven projects that build against Spark all name the same release."""
    from kct.api.telemetry_receiver import AggregationSpec

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = {req for extra in ("spark", "test") for req in project["optional-dependencies"][extra]
            if req.startswith("pyspark")}
    assert len(pins) == 1, pins
    pinned = re.fullmatch(r"pyspark==(\d+\.\d+\.\d+)", pins.pop())
    assert pinned is not None, "pyproject.toml must pin pyspark to one release (==X.Y.Z)"
    release = pinned[1]
    assert ARGS["SPARK_VERSION"] == release
    assert f":{release}-" in ARGS["SPARK_IMAGE"]
    assert release == dev_images("debian_base").SPARK_VERSION   # the local base standing in for SPARK_IMAGE
    assert AggregationSpec.model_fields["spark_version"].default == release
    for manifest in sorted((REPO / "spark").glob("*.yaml")):
        for found in re.findall(r"sparkVersion:\s*\"?([\w.]+)", manifest.read_text()):
            assert found == release, f"{manifest.name}: sparkVersion {found}, pyspark is pinned to {release}"
    for pom in (REPO / "dev" / "spark-deps" / "pom.xml", REPO / "operator" / "kct" / "aggregation" / "jvm" / "pom.xml"):
        assert f"<spark.version>{release}</spark.version>" in pom.read_text(), pom
