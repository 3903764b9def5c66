"""The Spark job image (the Dockerfile's `spark` target), as `make images` built it on the local JDK + Spark base.

`make images` builds it with buildah, SPARK_IMAGE pointed at a Debian bookworm base with OpenJDK 17 and the
Spark release of pyproject's pyspark pin (dev/images/debian_base.py, SPARK_BASE), and saves a docker-archive
under ~/.cache/kct/images/. These tests unpack it and run its commands with runc as the image's user (185)
in fresh namespaces without network, as the spark-operator's driver and executor pods would run them.
"""

from __future__ import annotations

import json
import re
import tomllib
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path
from typing import Any

import pytest
from chart_support import REPO
from image_support import built_image, dev_images, images_module, unpack_archive

images = images_module()
container_run = dev_images("container_run")
dockerfile = dev_images("dockerfile")

DOCKERFILE = dockerfile.parse_dockerfile((REPO / "Dockerfile").read_text())
SPARK = DOCKERFILE.stage(images.IMAGES["kct-spark"].target)


def _pinned_spark() -> str:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    (pin,) = {r for r in project["optional-dependencies"]["spark"] if r.startswith("pyspark")}
    return pin.split("==")[1]


@pytest.fixture(scope="module")
def built() -> Any:
    return built_image("kct-spark")


@pytest.fixture(scope="module")
def unpacked(built: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    return unpack_archive(built.archive, tmp_path_factory.mktemp("kct-spark-image"))


def run(unpacked: tuple[Path, Any], *argv: str) -> Any:
    rootfs, config = unpacked
    # No network here, so no resolvable host name: Spark binds to loopback instead of looking its name up.
    return container_run.run(rootfs, config, list(argv), env={"SPARK_LOCAL_IP": "127.0.0.1"}, timeout=300)


def test_image_config_is_what_spark_on_kubernetes_expects(built: Any, unpacked: tuple[Path, Any]) -> None:
    """Given the archive, then it is tagged kct.dev/kct-spark:<key>, runs as the stage's last USER (185, not
    root), starts through the base's entrypoint (which Spark's driver and executor pods call with `driver` /
    `executor`), with SPARK_HOME=/opt/spark and the job's PYTHONPATH and decoder jar from the stage."""
    _, config = unpacked
    assert config.repo_tags == (built.reference,) and built.reference == f"kct.dev/kct-spark:{built.key}"
    (*_, user) = SPARK.of("USER")
    assert config.user == user.arguments == "185:185"
    assert list(config.entrypoint) == ["/opt/entrypoint.sh"]
    assert config.env["SPARK_HOME"] == "/opt/spark"
    assert config.env["PYTHONPATH"] == "/opt/kct/python"
    assert config.env["KCT_OTLP_DECODER_JAR"] == "/opt/spark/jars/kct-otlp-decoder.jar"


def test_spark_is_the_release_the_job_is_tested_with(unpacked: tuple[Path, Any]) -> None:
    """Given the image, when `spark-submit --version` runs through its entrypoint, then it is pyproject's
    pyspark release, and the job's Python imports that same pyspark."""
    proc = run(unpacked, "/opt/entrypoint.sh", "spark-submit", "--version")
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = re.search(r"version (\d+\.\d+\.\d+)", proc.stdout + proc.stderr)
    assert found is not None and found[1] == _pinned_spark()
    proc = run(unpacked, "python3", "-c", "import pyspark; print(pyspark.__version__)")
    assert proc.stdout.strip() == _pinned_spark(), proc.stderr[-3000:]


def test_jars_holds_the_kafka_connector_and_the_decoder(unpacked: tuple[Path, Any]) -> None:
    """Given /opt/spark/jars, then every dependency dev/spark-deps/pom.xml declares is there at the pinned
    Spark release, and the decoder jar has every class of operator/kct/aggregation/jvm's main sources (and
    none of its tests)."""
    rootfs, _ = unpacked
    jars = {p.name for p in (rootfs / "opt/spark/jars").glob("*.jar")}
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    pom = ET.parse(REPO / "dev" / "spark-deps" / "pom.xml").getroot()
    properties = {child.tag.split("}")[1]: child.text or "" for child in pom.find("m:properties", ns) or []}
    artifacts = [re.sub(r"\$\{([\w.]+)\}", lambda m: properties[m[1]], d.findtext("m:artifactId", "", ns))
                 for d in pom.findall("m:dependencies/m:dependency", ns)]
    assert artifacts
    for artifact in artifacts:
        assert any(jar.startswith(f"{artifact}-") for jar in jars), f"{artifact} is not in /opt/spark/jars"
    assert f"spark-sql-kafka-0-10_2.13-{_pinned_spark()}.jar" in jars
    with zipfile.ZipFile(rootfs / "opt/spark/jars/kct-otlp-decoder.jar") as archive:
        classes = set(archive.namelist())
    java = REPO / "operator" / "kct" / "aggregation" / "jvm" / "src"
    expected = {p.relative_to(java / "main" / "java").with_suffix(".class").as_posix()
                for p in (java / "main" / "java").rglob("*.java")}
    assert expected and expected <= classes, sorted(expected - classes)
    tests = {p.relative_to(java / "test" / "java").with_suffix(".class").as_posix()
             for p in (java / "test" / "java").rglob("*.java")}
    assert tests and not tests & classes, sorted(tests & classes)


def test_the_jobs_python_is_the_package_without_its_java_sources(unpacked: tuple[Path, Any]) -> None:
    """Given PYTHONPATH's kct package, then it holds every module of operator/kct, and not the Java sources
    that sit next to the aggregation's modules (aggregation/jvm: built into the decoder jar instead)."""
    rootfs, _ = unpacked
    package = rootfs / "opt/kct/python/kct"
    sources = {p.relative_to(REPO / "operator" / "kct").as_posix() for p in (REPO / "operator" / "kct").rglob("*.py")}
    copied = {p.relative_to(package).as_posix() for p in package.rglob("*.py")}
    assert sources and sources <= copied, sorted(sources - copied)
    assert (REPO / "operator" / "kct" / "aggregation" / "jvm" / "pom.xml").is_file()
    assert not (package / "aggregation" / "jvm").exists()


def test_the_jobs_entry_runs(unpacked: tuple[Path, Any]) -> None:
    """Given the SparkApplication's mainApplicationFile, when it runs with --help in the image, then the
    job's command answers (the kct package and its libraries import from PYTHONPATH)."""
    from kct.render.spark import JOB_FILE

    proc = run(unpacked, "python3", JOB_FILE.removeprefix("local://"), "--help")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "--config" in proc.stdout and "--mode" in proc.stdout


SESSION_PROBE = """
import json
from pyspark.sql import SparkSession
from kct.aggregation.session import register_jvm_decoder
from kct.aggregation.source import require_kafka_source
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
require_kafka_source(spark)
print(json.dumps({"spark": spark.version, "decoder": register_jvm_decoder(spark)}))
spark.stop()
"""


def test_a_spark_session_finds_the_kafka_source_and_registers_the_decoder(unpacked: tuple[Path, Any]) -> None:
    """Given the image's JVM and Python, when a local SparkSession starts (no spark.jars: what the job gets on
    Kubernetes), then Spark's Kafka source class loads and the JVM decoder registers as a SQL function."""
    proc = run(unpacked, "python3", "-c", SESSION_PROBE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"spark": _pinned_spark(), "decoder": True}


def test_the_spark_user_owns_its_work_dir_and_nothing_else(unpacked: tuple[Path, Any]) -> None:
    """Given the base's user (spark, 185) and layout, then the work dir is its own and the jars are root's."""
    rootfs, _ = unpacked
    passwd = {line.split(":")[0]: line.split(":") for line in (rootfs / "etc/passwd").read_text().splitlines()}
    assert passwd["spark"][2:4] == ["185", "185"]
    work = (rootfs / "opt/spark/work-dir").stat()
    assert (work.st_uid, work.st_gid) == (185, 185)
    assert (rootfs / "opt/spark/jars").stat().st_uid == 0
