"""One local SparkSession for every aggregation test (starting a JVM costs seconds; share it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from preconditions import missing_precondition, require_module

require_module("pyspark", "the aggregation runs on Spark (the test extras install it)")
require_module("pyarrow", "the Kafka source hands Spark Arrow batches (the test extras install it)")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # The oracle's Python decoder runs in Spark's Python workers (mapInArrow pickles it by reference): they
    # import it from tests/ as pytest does, through PYTHONPATH (the JVM's, and the session's executorEnv).
    tests = str(Path(__file__).resolve().parents[2])
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (tests, os.environ.get("PYTHONPATH")) if p)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("kct-aggregation-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.streaming.stateStore.maintenanceInterval", "600s")
        .config("spark.executorEnv.PYTHONPATH", tests)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()



@pytest.fixture(scope="session")
def jvm_decoder(spark: Any) -> Any:
    """The session with the OTLP decoder jar (the decoder function and ClientWindows), built when missing."""
    from kct.aggregation.session import decoder_jar, register_jvm_decoder

    jar = decoder_jar()
    if jar is None:
        if shutil.which("mvn") is None:
            missing_precondition("the OTLP decoder jar is not built and mvn is not available")
        install = Path(__file__).resolve().parents[3] / "dev" / "spark-deps" / "install.py"
        subprocess.run([sys.executable, str(install), "--decoder-only"], check=True, capture_output=True)
        jar = decoder_jar()
    assert jar is not None
    assert register_jvm_decoder(spark, jar)  # ADD JAR: the classes are then on the session's class loader
    return spark
