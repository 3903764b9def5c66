"""The job's per-client JVM aggregation (kct.aggregation.client_windows) against the tests' Spark SQL oracle
(tests/aggregation_oracle), in one SparkSession: what the job's choice of engine rests on.

    .venv/bin/python bench/client_windows_ab.py [--pushes 10000] [--clients 200] [--partitions 46] [--rounds 2]
        [--parts] [--run-batch] [--only sql|jvm]

No Kafka: the pushes (bench/spark_throughput.py's fleet, ~100 points each) are built in Python, written once
to Parquet as the Kafka source's records (decode.RAW_SCHEMA_DDL) and read back cached, so both paths start
from the same records in memory, as `run_batch` does after its read. Interleaved, `--rounds` times:

  sql      records -> JVM decoder -> points -> the oracle's aggregate_client_metrics (Spark SQL)
  jvm      records -> ClientWindows (grouped per client instance, one Java loop per client: the job's)
  (each to Spark's noop sink, and once more into Parquet: the client_metrics table alone)

with --parts, the SQL path's decoding alone; with --run-batch, the job's `run_batch` itself, end to end but
for the Kafka read (stubbed: the cached records); then
`bare`: Spark alone, groupBy(window, series) min/max/avg/count over the same points pre-flattened in
Parquet (bench/spark_throughput.py's), and the ratios. Each line: wall seconds, points/s, JVM CPU-seconds
(/proc/<pid>/stat: on a machine shared with other work they move less with the load than the wall time).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import spark_throughput as st

# The oracle is the tests' (tests/aggregation_oracle), not the product's: it is imported from there.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

S = 1_000_000_000


def records(spark: Any, pushes: int, clients: int, partitions: int, work: Path) -> tuple[Any, int]:
    """The fleet's pushes as Kafka records, cached; and how many records."""
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
            rows.append((rec.key, rec.value, "bench", len(rows) % 2, len(rows), dt.datetime.now(dt.UTC),
                         list(rec.headers)))
    spark.createDataFrame(rows, RAW_SCHEMA_DDL).write.parquet(str(work / "records"))
    cached = spark.read.parquet(str(work / "records")).persist()
    return cached, int(cached.count())


def run_batches(spark: Any, args: argparse.Namespace, raw: Any, n_records: int, n_points: int, work: Path) -> None:
    """The job's `run_batch` end to end but for the Kafka read (stubbed: the cached records): client_metrics,
    roll-ups, terminations, alerts -> Parquet."""
    from kct.aggregation import batch
    from kct.aggregation.config import parse_job_config

    # The topic read replaced by the records in memory, where run_batch looks it up; a copy: run_batch
    # unpersists what it reads.
    setattr(batch, "read_records", lambda *_a, **_k: raw.select("*"))  # noqa: B010
    cfg = parse_job_config({
        "source": {"bootstrapServers": "unused:9092"},
        "rules": [{"name": "queue", "metric": "org.apache.kafka.producer.record.queue.time.max",
                   "field": "max", "op": ">", "threshold": 5000, "forSeconds": 180}],
        "parquet": {"path": str(work / "batch")},
        "run": {"mode": "batch"},
    })
    for r in range(args.rounds):
        took, counts = st.timed(lambda: batch.run_batch(spark, cfg))
        st.line(f"batch #{r + 1}", took, n_records, n_points,
                f"run_batch, Kafka read stubbed ({counts.get('client_metrics')} client_metrics rows)", st._LAST_CPU[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pushes", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=46)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--only", choices=("sql", "jvm"), help="time one path only (quick iterations)")
    parser.add_argument("--run-batch", action="store_true",
                        help="also time the job's run_batch, end to end but for the Kafka read (stubbed)")
    parser.add_argument("--parts", action="store_true",
                        help="also time the SQL path's decoding alone")
    args = parser.parse_args()

    from aggregation_oracle.sql_engine import aggregate_client_metrics

    from kct.aggregation.client_windows import client_metrics_from_records
    from kct.aggregation.config import parse_job_config
    from kct.aggregation.decode import jvm_points
    from kct.aggregation.session import build_session, register_jvm_decoder

    work = Path(tempfile.mkdtemp(prefix="kct-cw-ab-"))
    try:
        cfg = parse_job_config({
            "source": {"bootstrapServers": "unused:9092"},
            "parquet": {"path": str(work / "out")},
            "run": {"mode": "batch"},
            "spark": {"master": args.master, "conf": {"spark.ui.enabled": "false", "spark.driver.memory": "3g"}},
        })
        spark = build_session(cfg)
        spark.sparkContext.setLogLevel("ERROR")
        st._JVM_CPU.append(int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()))
        if not register_jvm_decoder(spark):
            print("the OTLP decoder jar is not built: python dev/spark-deps/install.py --decoder-only",
                  file=sys.stderr)
            return 2
        raw, n_records = records(spark, args.pushes, args.clients, args.partitions, work)
        size, lookback = cfg.window.size_seconds, cfg.window.counter_lookback_windows
        points = jvm_points(raw).persist()
        n_points = int(points.count())
        print(f"{n_records} records, {n_points} points; Spark {spark.version}, {args.master}", flush=True)

        paths = {
            "sql": lambda: aggregate_client_metrics(jvm_points(raw), window_seconds=size, lookback_windows=lookback),
            "jvm": lambda: client_metrics_from_records(raw, window_seconds=size, lookback_windows=lookback),
        }
        if args.parts:
            paths["decode"] = lambda: jvm_points(raw)  # the SQL path's decoding alone
        if args.only:
            paths = {k: v for k, v in paths.items() if k == args.only or k not in ("sql", "jvm")}
        best: dict[str, float] = {}
        for r in range(args.rounds):
            for name, build in paths.items():
                took, _ = st.timed(lambda build=build: build().write.format("noop").mode("overwrite").save())
                st.line(f"{name} #{r + 1}", took, n_records, n_points, "noop sink", st._LAST_CPU[0])
                best[name] = min(best.get(name, took), took)
        for name in [n for n in ("sql", "jvm") if n in paths]:
            build = paths[name]
            out = str(work / f"cm-{name}")
            took, _ = st.timed(lambda build=build, out=out: build().write.mode("overwrite").parquet(out))
            st.line(f"{name} pq", took, n_records, n_points, "client_metrics -> Parquet", st._LAST_CPU[0])
        if args.run_batch:
            run_batches(spark, args, raw, n_records, n_points, work)
        rows = {name: spark.read.parquet(str(work / f"cm-{name}")).count() for name in ("sql", "jvm") if name in paths}
        print(f"  client_metrics rows: {rows}", flush=True)
        points.unpersist()
        bare_runs, n_bare = st.bare_groupby(spark, jvm_points(raw), work, size, 3)
        bare, bare_cpu = min(bare_runs, key=lambda run: run[0])  # the best run, as the variants' `best` below
        st.line("bare", bare, n_records, n_bare, "groupBy(window, series) over flat Parquet, best of 3", bare_cpu)
        for name, took in best.items():
            if name not in ("sql", "jvm"):
                continue
            print(f"  ratio {name} (best noop) / bare: {bare / took:.3f}", flush=True)
        spark.stop()
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
