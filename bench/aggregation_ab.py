"""A/B of the aggregation transforms in one SparkSession: another checkout's `kct.aggregation.transforms`
against this one's, interleaved, on the same cached data points, in JVM CPU-seconds and wall seconds.

    .venv/bin/python bench/aggregation_ab.py --old /path/to/other/checkout [--pushes 2000] [--rounds 2]

For a machine shared with other work: one JVM, both versions run in turn on the same input, and the JVM's
own CPU-seconds (/proc/<pid>/stat) move much less with the load than the wall time. No Kafka: the pushes
(bench/spark_throughput.py's fleet) are decoded by the JVM decoder from an in-memory DataFrame of records.
Steps: `aggregate` (points -> client_metrics, noop sink) and `rollups` (cached client_metrics -> rollups,
noop sink). The other checkout's transforms import decode/config from this one (they have to agree).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path
from typing import Any

S = 1_000_000_000


def jvm_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_transforms(checkout: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, checkout / "operator/kct/aggregation/transforms.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def records_df(spark: Any, pushes: int, clients: int, partitions: int) -> Any:
    import datetime as dt

    from kct.aggregation.decode import RAW_SCHEMA_DDL
    from kct.aggregation.synthetic import SyntheticClient

    rounds = max(1, pushes // clients)
    begin = (time.time_ns() // (60 * S)) * 60 * S - rounds * 10 * S
    fleet = [SyntheticClient(f"bench-{i % 50}", started_ns=begin - S, seed=i + 1, partitions=partitions)
             for i in range(clients)]
    rows: list[tuple[Any, ...]] = []
    for k in range(rounds):
        for c in fleet:
            rec = c.push(begin + k * 10 * S)
            rows.append((rec.key, rec.value, "bench", 0, len(rows), dt.datetime.now(dt.UTC), list(rec.headers)))
    return spark.createDataFrame(rows, RAW_SCHEMA_DDL)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, required=True, help="the other checkout (its operator/ is used)")
    parser.add_argument("--pushes", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=46)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import functions as F

    from kct.aggregation.config import parse_job_config
    from kct.aggregation.decode import jvm_points
    from kct.aggregation.session import build_session, register_jvm_decoder

    cfg = parse_job_config({"source": {"bootstrapServers": "127.0.0.1:1", "decoder": "jvm"},
                            "parquet": {"path": "/tmp/unused"},
                            "spark": {"master": "local[2]", "shufflePartitions": 4,
                                      "conf": {"spark.ui.enabled": "false", "spark.driver.memory": "3g"}}})
    spark = build_session(cfg)
    spark.sparkContext.setLogLevel("ERROR")
    pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    if not register_jvm_decoder(spark):
        raise SystemExit("the JVM decoder jar is not built: python dev/spark-deps/install.py --decoder-only")
    points = jvm_points(records_df(spark, args.pushes, args.clients, args.partitions)).persist()
    n = points.where(F.col("value").isNotNull() | F.col("count").isNotNull()).count()
    print(f"{n} points cached; spark {spark.version}", flush=True)
    versions = {"old": load_transforms(args.old, "kct_old_transforms"),
                "new": load_transforms(Path(__file__).resolve().parents[1], "kct_new_transforms")}

    def timed(label: str, fn: Any) -> None:
        cpu0, t0 = jvm_cpu(pid), time.perf_counter()
        fn()
        cpu, wall = jvm_cpu(pid) - cpu0, time.perf_counter() - t0
        print(f"  {label:<16} {wall:7.2f} s wall  {cpu:6.1f} JVM CPU-s  {n / cpu:10,.0f} points/CPU-s", flush=True)

    for r in range(args.rounds + 1):  # round 0 warms both up (code generation, class loading)
        for name, mod in versions.items():
            tag = f"{name} r{r}" + (" (warm-up)" if r == 0 else "")
            timed(f"{tag} aggregate",
                  lambda mod=mod: mod.aggregate_client_metrics(points).write.format("noop").mode("overwrite").save())
            metrics = mod.aggregate_client_metrics(points).persist()
            metrics.count()
            timed(f"{tag} rollups",
                  lambda mod=mod, metrics=metrics: mod.rollups(metrics).write.format("noop").mode("overwrite").save())
            metrics.unpersist()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
