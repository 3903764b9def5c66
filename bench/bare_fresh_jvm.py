"""The bare groupBy of `spark_throughput.py` in a JVM of its own, timed run by run from JVM start.

    .venv/bin/python bench/bare_fresh_jvm.py --work DIR [--runs 3] [--master local[2]] [--shuffle-partitions 4]
        [--window-seconds 60]

Reads the points `spark_throughput.py` wrote under DIR (`flat-demo`: the demo topic's, `flat`: the
benchmark's), starts a SparkSession as the job does, runs the bare groupBy once over the demo-sized points
and then `--runs` times over the benchmark's, and prints one JSON line: each run's seconds and JVM CPU-s.
That is how the job's first batch run is measured (after the demo-sized run, in a fresh JVM), so the two
first runs can be compared; the benchmark's own bare figure is Spark warm, after the whole job ran.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import spark_throughput as bench


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--shuffle-partitions", type=int, default=4)
    parser.add_argument("--window-seconds", type=int, default=60)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from kct.aggregation.session import build_session

    # The job's session (decoder jar, cache serializer, the benchmark's conf): the same JVM as the job's.
    session_args = argparse.Namespace(bootstrap="unused:9092", master=args.master,
                                      shuffle_partitions=args.shuffle_partitions)
    spark = build_session(bench.job_config(session_args, "unused", args.work / "fresh", {}))
    spark.sparkContext.setLogLevel("ERROR")
    bench._JVM_CPU.append(int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()))

    def run(name: str) -> list[float | None]:
        took, _ = bench.timed(lambda: bench.bare_query(spark, args.work / name, args.work / f"fresh-{name}",
                                                        args.window_seconds))
        return [took, bench._LAST_CPU[0]]

    result = {"demo": run("flat-demo"), "demo_points": spark.read.parquet(str(args.work / "flat-demo")).count(),
              "runs": [run("flat") for _ in range(max(1, args.runs))],
              "points": spark.read.parquet(str(args.work / "flat")).count()}
    spark.stop()
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
