#!/usr/bin/env python3
"""Install Spark's Kafka connector jars for local runs of the aggregation job (standard library only).

    python dev/spark-deps/install.py [--python .venv/bin/python] [--optional]

Runs `mvn dependency:copy-dependencies` on dev/spark-deps/pom.xml with the Spark and Scala versions of the
installed pyspark, into ~/.cache/kct/spark-jars/<spark version>/ (skipped when already there). The job
(`kct aggregate`) then passes those jars with `spark.jars` (local paths; never `spark.jars.packages`, which
resolves at run time over the network) and reads the topic with Spark's own Kafka source.

When the registry does not serve the connector for this exact Spark version (on this project's machines it
serves neither spark-protobuf nor spark-token-provider-kafka-0-10, which spark-sql-kafka needs), the job
falls back to its built-in Python Kafka source and Python OTLP decoding; `--optional` makes that a warning
instead of an error, so `make` targets can call this unconditionally.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "stack"))

import _proc  # type: ignore[import-not-found, unused-ignore]  # noqa: E402


def pyspark_versions(python: str) -> tuple[str, str]:
    """(Spark version, Scala binary version) of the pyspark that `python` imports."""
    code = (
        "import pathlib, pyspark; jars = pathlib.Path(pyspark.__file__).parent / 'jars'; "
        "lib = next(jars.glob('scala-library-*.jar')).name; "
        "print(pyspark.__version__, '.'.join(lib.removeprefix('scala-library-').split('.')[:2]))"
    )
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    return out[0], out[1]


def install(python: str) -> Path:
    spark, scala = pyspark_versions(python)
    target: Path = _proc.cache_dir("spark-jars", spark)
    if any(target.glob("spark-sql-kafka-*.jar")):
        print(f"spark connector jars for Spark {spark} already in {target}")
        return target
    with _proc.step(f"spark-sql-kafka {spark} (Scala {scala}) into {target}"):
        staging = target.with_name(target.name + ".part")
        staging.mkdir(parents=True, exist_ok=True)
        try:
            _proc.run(
                ["mvn", "-B", "-q", "-U", "-f", HERE / "pom.xml", "dependency:copy-dependencies",
                 "-DincludeScope=runtime",
                 f"-Dspark.version={spark}", f"-Dscala.binary.version={scala}", f"-DoutputDirectory={staging}"],
                tool="spark-connectors", version=spark,
            )
        except _proc.InstallError:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        for jar in staging.glob("*.jar"):
            jar.replace(target / jar.name)
        staging.rmdir()
    return target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="interpreter whose pyspark decides the versions")
    parser.add_argument("--optional", action="store_true", help="exit 0 when the connector cannot be had")
    args = parser.parse_args()
    try:
        install(args.python)
    except _proc.InstallError as exc:
        print(f"{exc}\n", file=sys.stderr)
        print("The aggregation job will use its Python Kafka source instead (source.connector: auto).",
              file=sys.stderr)
        return 0 if args.optional else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
