#!/usr/bin/env python3
"""Install the aggregation job's jars for local runs: Spark's Kafka source and our OTLP decoder (stdlib only).

    python dev/spark-deps/install.py [--python .venv/bin/python] [--decoder-only | --maven-properties]

Runs `mvn dependency:copy-dependencies` on dev/spark-deps/pom.xml with the Spark and Scala versions of the
installed pyspark (pinned in pyproject.toml), into ~/.cache/kct/spark-jars/<spark version>/ (skipped when
already there): spark-sql-kafka-0-10, spark-token-provider-kafka-0-10, kafka-clients and commons-pool2, the
jars Spark itself does not ship. The job (`kct aggregate`) passes them with `spark.jars` (local paths; never
`spark.jars.packages`, which resolves at run time over the network) and reads the topic with Spark's own
Kafka source; without them it stops, naming this script. `make spark-jars` runs it (the targets that start
Spark depend on it), so downloads happen on the host, never inside a test.

The aggregation's JVM code (operator/kct/aggregation/jvm: the OTLP decoder and the Java functions the job
calls, protobuf shaded in) is built with `mvn -q package` against the installed pyspark's own jars into
~/.cache/kct/spark-decoder/<hash>/, where <hash> covers the decoder's sources and the Spark version
(`decoder_source_hash`, computed the same way by `kct.aggregation.session.decoder_jar`): an unchanged decoder
is not rebuilt, a changed one is never used stale.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DECODER = HERE.parents[1] / "operator" / "kct" / "aggregation" / "jvm"
DECODER_JAR = "kct-otlp-decoder.jar"
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


def pyspark_jars(python: str) -> Path:
    """The `jars` folder of the pyspark that `python` imports (Spark's own classpath)."""
    code = "import pathlib, pyspark; print(pathlib.Path(pyspark.__file__).parent / 'jars')"
    return Path(subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip())


def decoder_source_hash(source: Path, spark_version: str) -> str:
    """16 hex digits over the decoder's pom.xml and src/ (paths and contents) and the Spark version.
    kct.aggregation.session computes the same to find the jar: keep the two in step."""
    digest = hashlib.sha256(spark_version.encode())
    files = [source / "pom.xml", *sorted(p for p in (source / "src").rglob("*") if p.is_file())]
    for path in files:
        digest.update(path.relative_to(source).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def maven_properties(python: str) -> list[str]:
    """The -D flags that point the aggregation's pom at the installed pyspark: its Spark release and the jars
    folder its Spark, Scala and kryo dependencies (scope system) are read from. The jar build here and
    `make aggregation-jvm-test` (its JUnit tests) use the same, so both compile against the pinned Spark."""
    spark, _ = pyspark_versions(python)
    jars = pyspark_jars(python)
    scala_lib = next(jars.glob("scala-library-*.jar")).name.removeprefix("scala-library-").removesuffix(".jar")
    kryo = next(jars.glob("kryo-shaded-*.jar")).name.removeprefix("kryo-shaded-").removesuffix(".jar")
    return [f"-Dspark.version={spark}", f"-Dscala.library.version={scala_lib}", f"-Dkryo.version={kryo}",
            f"-Dspark.jars.dir={jars}"]


def install_decoder(python: str) -> Path:
    """Build operator/kct/aggregation/jvm for the installed pyspark (cached by source hash); the jar's path."""
    spark, _ = pyspark_versions(python)
    target: Path = _proc.cache_dir("spark-decoder", decoder_source_hash(DECODER, spark))
    jar = target / DECODER_JAR
    if jar.is_file():
        print(f"OTLP decoder jar for Spark {spark} already in {target}")
        return jar
    if shutil.which("mvn") is None:
        raise _proc.InstallError("spark-decoder", spark, "mvn (Maven) is not on PATH")
    with _proc.step(f"kct-otlp-decoder (Spark {spark}) into {target}"):
        build = target / "build"
        try:
            _proc.run(
                # The JUnit tests are `make aggregation-jvm-test`'s: not compiled or run for the jar.
                ["mvn", "-B", "-q", "-f", DECODER / "pom.xml", "package", "-Dmaven.test.skip=true",
                 *maven_properties(python), f"-Dkct.build.dir={build}"],
                tool="spark-decoder", version=spark,
            )
            (build / DECODER_JAR).replace(jar)
        finally:
            shutil.rmtree(build, ignore_errors=True)
    return jar


def install(python: str) -> Path:
    spark, scala = pyspark_versions(python)
    target: Path = _proc.cache_dir("spark-jars", spark)
    if any(target.glob("spark-sql-kafka-*.jar")):
        print(f"Spark's Kafka source jars for Spark {spark} already in {target}")
        return target
    with _proc.step(f"spark-sql-kafka {spark} (Scala {scala}) into {target}"):
        staging = target.with_name(target.name + ".part")
        staging.mkdir(parents=True, exist_ok=True)
        try:
            _proc.run(
                ["mvn", "-B", "-q", "-U", "-f", HERE / "pom.xml", "dependency:copy-dependencies",
                 f"-Dspark.version={spark}", f"-Dscala.binary.version={scala}", f"-DoutputDirectory={staging}"],
                tool="spark-sql-kafka", version=spark,
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
    parser.add_argument("--decoder-only", action="store_true", help="build the OTLP decoder jar only")
    parser.add_argument("--maven-properties", action="store_true",
                        help="print the -D flags for the aggregation's pom (Spark release, pyspark's jars) and exit")
    args = parser.parse_args()
    if args.maven_properties:
        print(" ".join(maven_properties(args.python)))
        return 0
    try:
        install_decoder(args.python)
        if not args.decoder_only:
            install(args.python)
    except _proc.InstallError as exc:
        print(f"{exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
