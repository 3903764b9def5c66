"""The spark-operator image the node runs (dev/images/spark_operator_image.py), as `make spark-operator` built it:
the released module's binary on the local Spark base, run with runc as its chart runs it (its user, no root).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_support import REPO
from image_support import dev_images, unpack_archive
from script_loader import load_script

container_run = dev_images("container_run")
operator_image = load_script(REPO / "dev" / "images" / "spark_operator_image.py")
spark_operator = operator_image.spark_operator


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, Any]:
    binary = spark_operator.binary_path()
    if not binary.is_file():
        pytest.fail(f"no spark-operator binary at {binary}: run `make spark-operator` (`make pytest` runs it)")
    image = operator_image.plan(binary)
    if not image.exists():
        pytest.fail(f"no image archive {image.archive}: run `make spark-operator` (`make pytest` runs it)")
    rootfs, config = unpack_archive(image.archive, tmp_path_factory.mktemp("spark-operator-image"))
    return rootfs, config, image


def test_the_image_runs_the_released_operator_as_the_spark_user(unpacked: tuple[Path, Any, Any]) -> None:
    """Given the image, then its entrypoint is the spark-operator binary, it runs as 185 (the chart sets
    runAsNonRoot), and `version` reports the module's release."""
    rootfs, config, image = unpacked
    assert config.repo_tags == (image.reference,)
    assert list(config.entrypoint) == [operator_image.BINARY_PATH]
    assert config.user == "185:185"
    proc = container_run.run(rootfs, config, [operator_image.BINARY_PATH, "version"])
    assert proc.returncode == 0, proc.stderr
    assert re.search(rf"Version: v{re.escape(spark_operator.SPARK_OPERATOR_VERSION)}\b", proc.stdout), proc.stdout
    assert "Git Tree State: clean" in proc.stdout


def test_the_charts_commands_are_the_binarys(unpacked: tuple[Path, Any, Any]) -> None:
    """Given the chart's controller and webhook Deployments (they pass only `args`), then the image's
    entrypoint knows those commands, and spark-submit, which the controller runs, is on the image's PATH at
    the Spark release of the job image."""
    rootfs, config, _ = unpacked
    for command in ("controller", "webhook"):
        proc = container_run.run(rootfs, config, [operator_image.BINARY_PATH, command, "start", "--help"])
        assert proc.returncode == 0, proc.stderr
        assert "--namespaces" in proc.stdout
    chart = Path(spark_operator.chart())
    for template in ("controller", "webhook"):
        text = (chart / "templates" / template / "deployment.yaml").read_text()
        assert "command:" not in text and f"- {template}" in text
    assert yaml.safe_load((chart / "Chart.yaml").read_text())["version"] == spark_operator.SPARK_OPERATOR_VERSION
    proc = container_run.run(rootfs, config, ["sh", "-c", "command -v spark-submit"])
    assert proc.stdout.strip() == "/opt/spark/bin/spark-submit", proc.stderr
    release = dev_images("debian_base").SPARK_VERSION
    assert (rootfs / "opt" / "spark" / "jars" / f"spark-core_2.13-{release}.jar").is_file()
