"""The runtime image (the Dockerfile's default target), as `make images` built it, run as the chart runs it.

`make images` builds the Dockerfile with buildah on local Debian bases and saves a docker-archive under
~/.cache/kct/images/ (the make targets that run pytest build it first: downloads never happen in a test).
These tests unpack that archive and start its commands with runc as the image's user (uid 10001), with a
read-only root filesystem, a writable /tmp (the chart's emptyDir), no capabilities and no network.
"""

from __future__ import annotations

import json
import re
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest
from chart_support import REPO, Render
from image_support import built_image, dev_images, images_module, unpack_archive

images = images_module()
container_run = dev_images("container_run")
dockerfile = dev_images("dockerfile")

DOCKERFILE = dockerfile.parse_dockerfile((REPO / "Dockerfile").read_text())
RUNTIME = DOCKERFILE.stage(images.IMAGES["kct"].target)


def _last(keyword: str) -> str:
    (*_, instruction) = RUNTIME.of(keyword)
    text: str = instruction.arguments
    return text


@pytest.fixture(scope="module")
def built() -> Any:
    return built_image("kct")


@pytest.fixture(scope="module")
def unpacked(built: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """(root filesystem, image config) of the archive, unpacked once for the module."""
    return unpack_archive(built.archive, tmp_path_factory.mktemp("kct-image"))


def run(unpacked: tuple[Path, Any], *argv: str) -> Any:
    rootfs, config = unpacked
    return container_run.run(rootfs, config, list(argv))


def test_the_archive_is_the_default_target_tagged_with_its_key(built: Any, unpacked: tuple[Path, Any]) -> None:
    """Given the archive for the current sources, then it is the Dockerfile's last stage and carries one
    reference, kct.dev/kct:<key>, the name `ctr images import` gives it."""
    assert images.IMAGES["kct"].target == DOCKERFILE.stages[-1].name
    _, config = unpacked
    assert built.reference == f"kct.dev/kct:{built.key}"
    assert config.repo_tags == (built.reference,)
    assert json.loads(built.metadata_path.read_text())["reference"] == built.reference


def test_image_config_is_what_the_dockerfile_says(unpacked: tuple[Path, Any]) -> None:
    """Given the runtime stage's USER, ENTRYPOINT, CMD, EXPOSE and ENV, then the built image's config agrees."""
    _, config = unpacked
    assert config.user == _last("USER") == "10001:10001"
    assert list(config.entrypoint) == json.loads(_last("ENTRYPOINT"))
    assert list(config.cmd) == json.loads(_last("CMD"))
    assert config.exposed_ports == tuple(sorted(f"{port}/tcp" for port in _last("EXPOSE").split()))
    assert config.env["PATH"].split(":")[0] == "/opt/kct/bin"
    assert config.env["PYTHONDONTWRITEBYTECODE"] == "1"


def test_the_chart_and_the_receivers_run_as_the_images_user(unpacked: tuple[Path, Any], render: Render) -> None:
    """Given the chart's Deployment and the uid the operator renders receiver pods with, then both are the
    image's user, with a read-only root filesystem and a /tmp volume: what these tests run it with."""
    from kct.render import receiver_workload as receiver

    _, config = unpacked
    uid, gid = (int(part) for part in config.user.split(":"))
    assert uid == receiver.RUN_AS_USER
    (deployment,) = [doc for doc in render() if doc["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (uid, gid)
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]


def test_the_image_holds_the_package_the_plugin_and_the_user(unpacked: tuple[Path, Any]) -> None:
    """Given the unpacked image, then it has every module of operator/kct (and not the aggregation's Java
    sources: no Python package), the plugin jar with every class of plugin/src/main, the kct user and group
    (10001, no login), and no build leftovers."""
    rootfs, _ = unpacked
    (site,) = rootfs.glob("opt/kct/lib/python3.*/site-packages")
    sources = {p.relative_to(REPO / "operator").as_posix() for p in (REPO / "operator" / "kct").rglob("*.py")}
    installed = {p.relative_to(site).as_posix() for p in (site / "kct").rglob("*.py")}
    assert sources <= installed, sorted(sources - installed)
    assert not (site / "kct" / "aggregation" / "jvm").exists()

    jar = rootfs / "opt" / "kct" / "share" / "kct-telemetry-plugin.jar"
    with zipfile.ZipFile(jar) as archive:
        classes = set(archive.namelist())
    java = REPO / "plugin" / "src" / "main" / "java"
    expected = {p.relative_to(java).with_suffix(".class").as_posix() for p in java.rglob("*.java")}
    assert expected and expected <= classes, sorted(expected - classes)

    passwd = dict((line.split(":")[0], line.split(":")) for line in (rootfs / "etc/passwd").read_text().splitlines())
    group = dict((line.split(":")[0], line.split(":")) for line in (rootfs / "etc/group").read_text().splitlines())
    assert passwd["kct"][2:4] == ["10001", "10001"]
    assert passwd["kct"][6] == "/usr/sbin/nologin"
    assert group["kct"][2] == "10001"

    for leftover in ("src", "root/.m2", "root/.cache", "kct-telemetry-plugin.jar"):
        assert not (rootfs / leftover).exists(), f"/{leftover} is in the runtime image"


@pytest.mark.parametrize(("argv", "expected"), [
    (("kct", "--help"), "operator"),
    (("kct", "operator", "--help"), "--namespace"),
    (("kct", "receiver", "--help"), "--config"),
])
def test_kct_commands_run_as_non_root_on_a_read_only_root(unpacked: tuple[Path, Any], argv: tuple[str, ...],
                                                           expected: str) -> None:
    """Given the image run as uid 10001 with a read-only root filesystem, when `kct ...` runs, then it answers."""
    proc = run(unpacked, *argv)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert expected in proc.stdout


NATIVE_PROBE = """
import json, sys
import confluent_kafka, re2, zstandard, google.protobuf, aiohttp, kopf, kubernetes, uvloop
from kct.receiver import _otlpscan
from google.protobuf.internal import api_implementation
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
request = ExportMetricsServiceRequest()
request.resource_metrics.add().scope_metrics.add().metrics.add(name="org.apache.kafka.producer.record.queue.time.max")
payload = zstandard.ZstdCompressor().compress(request.SerializeToString())
decoded = ExportMetricsServiceRequest.FromString(zstandard.ZstdDecompressor().decompress(payload))
print(json.dumps({
    "python": list(sys.version_info[:2]),
    "librdkafka": confluent_kafka.libversion()[0],
    "re2": bool(re2.compile("client-[a-z]+").fullmatch("client-abc")),
    "zstd_backend": zstandard.backend,
    "protobuf": api_implementation.Type(),
    "metric": decoded.resource_metrics[0].scope_metrics[0].metrics[0].name,
    "otlpscan": _otlpscan.valid(request.SerializeToString()) and not _otlpscan.valid(b"\\x0a\\xff"),
    "uvloop": type(uvloop.new_event_loop()).__module__.startswith("uvloop"),
}))
"""


def test_native_dependencies_load_in_the_image(unpacked: tuple[Path, Any]) -> None:
    """Given the image, when its Python imports the receiver's compiled dependencies and uses each once, then
    librdkafka, RE2, zstd (C backend), protobuf's upb, our own wire scanner (compiled in the build stage; the
    package would install without it) and uvloop work, on a Python the package supports."""
    proc = run(unpacked, "python", "-c", NATIVE_PROBE)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    floor = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    match = re.fullmatch(r">=\s*(\d+)\.(\d+)", floor)
    assert match is not None, floor
    assert tuple(found["python"]) >= (int(match[1]), int(match[2]))
    assert re.fullmatch(r"\d+\.\d+\.\d+", found["librdkafka"])
    assert found["re2"] is True
    assert found["zstd_backend"] == "cext"
    assert found["protobuf"] == "upb"
    assert found["metric"] == "org.apache.kafka.producer.record.queue.time.max"
    assert found["otlpscan"] is True
    assert found["uvloop"] is True


def test_root_filesystem_is_read_only_tmp_is_writable_and_no_capabilities(unpacked: tuple[Path, Any]) -> None:
    """Given the chart's security context, then the process is uid/gid 10001 without capabilities, cannot write
    the root filesystem (nor /opt/kct), and can write /tmp."""
    script = ("id -u; id -g; grep CapEff /proc/self/status; "
              "touch /opt/kct/probe 2>&1 || true; touch /probe 2>&1 || true; touch /tmp/probe && echo tmp-writable")
    proc = run(unpacked, "sh", "-c", script)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["10001", "10001"]
    assert re.fullmatch(r"CapEff:\s+0+", lines[2])
    assert proc.stdout.count("Read-only file system") == 2
    assert lines[-1] == "tmp-writable"

