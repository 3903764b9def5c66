"""Spark aggregation throughput: the job end to end next to a bare Spark groupBy, and the demo-sized run.

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:19092 .venv/bin/python bench/spark_throughput.py [--pushes 10000]
        [--clients 200] [--partitions 46] [--no-stream] [--stages] [--jobs]
        [--source KEY=VALUE ...]

Fills a fresh topic with realistic pushes (~100 data points each: the standard producer metrics plus 46
partitions' series, like KIP-714's sizing example) and, in one local[2] SparkSession, measures:

  demo      `run_batch` on a demo-sized topic (one minute of four clients, ~670 points), first thing after
            the JVM started (what `make demo` waits for)
  batch     end to end: `run_batch` (topic -> decode -> client_metrics, roll-ups, terminations, alerts -> Parquet)
  stream    end to end: Structured Streaming, availableNow trigger, topic -> the same Parquet tables
  bare      Spark alone: the same data points, pre-flattened in Parquet (window-able columns only), through
            groupBy(window, series) with min/max/avg/count -> Parquet: what Spark itself does on this machine
  ratio     batch (and stream) points/s divided by bare points/s (the median of --bare-runs timed runs,
            default 5), measured in this run
  bare new  the bare groupBy in a JVM of its own (`bare_fresh_jvm.py`), measured as batch's first run is:
            the demo-sized points first, then the benchmark's points run by run; `ratio batch / bare, each
            the first run ...` divides batch's first run by this first run (--no-bare-fresh-jvm skips it)

With --warm-rounds N, N more batch runs over the same topic, and N runs of a stream on a topic of its own,
each over --pushes new pushes appended to it (the same clients, later in event time), on one checkpoint
(the first round starts it: its query plans are new): a stream runs
for days, so its capacity is that of a JVM past its warm-up (the JIT compiler alone takes ~10 CPU-seconds
of a first 1M-point run here). A stream round's points are those of the windows it finalized. With 4 rounds
or more, a `steady` line gives the median points/s of the later half of the rounds (and its ratio to bare):
where the JIT has compiled most of what it will (its CPU per round falls for ~15 rounds here).

With --stages it also times the job's parts: `read` (the topic -> raw records), `decode` (cached records ->
points, what terminations and the bare groupBy read), `aggregate` (cached records -> client_metrics with
ClientWindows, noop sink), `rollups` (cached client_metrics -> rollups on the JVM, noop sink, twice: the second
warm) and `write` (cached client_metrics -> Parquet). bench/client_windows_ab.py times the tests' Spark SQL
oracle next to the job's engine.
With --jobs, after batch and stream: how many Spark jobs they ran, their tasks' CPU-seconds, and the JVM's
CPU-seconds by thread kind (JIT compilers, GC, task threads, other): on this machine a run's JIT
compilation alone costs a third of its CPU. Each line prints
seconds, records/s and data points/s. `--source KEY=VALUE` adds keys to the job's `source:` config (e.g.
to replay an older checkout's options). The figures are for this 2-core machine shared with other work:
compare runs made in the same conditions, not absolute values.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

S = 1_000_000_000


class TopicFiller:
    """A fresh topic and a fleet of synthetic clients pushing every `interval_s` seconds of event time;
    `fill(pushes)` appends the next pushes, continuing where the previous call stopped (the warm rounds
    read the same topic further on)."""

    def __init__(self, bootstrap: str, clients: int, partitions: int, rounds: int, interval_s: int = 10) -> None:
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        from kct.aggregation.synthetic import SyntheticClient

        self.topic = f"kct-bench-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(self.topic, 2, 1)])[self.topic].result(30)
        self._producer = Producer({"bootstrap.servers": bootstrap, "enable.metrics.push": False, "linger.ms": 50,
                                   "compression.type": "lz4", "queue.buffering.max.messages": 200_000})
        self._interval_ns = interval_s * S
        # The first `rounds` rounds end at the current minute; later ones go on into event-time future.
        self._begin = (time.time_ns() // (60 * S)) * 60 * S - rounds * self._interval_ns
        self._fleet = [SyntheticClient(f"bench-{i % 50}", started_ns=self._begin - S, seed=i + 1,
                                       partitions=partitions) for i in range(clients)]
        self._round = 0

    def fill(self, pushes: int) -> int:
        """Produce `pushes` more pushes (whole rounds of every client, at least one); returns how many."""
        sent = 0
        for _ in range(max(1, pushes // len(self._fleet))):
            at = self._begin + self._round * self._interval_ns
            for client in self._fleet:
                rec = client.push(at)
                headers: list[tuple[str, str | bytes | None]] = list(rec.headers)
                self._producer.produce(self.topic, key=rec.key, value=rec.value, headers=headers)
                self._producer.poll(0)
                sent += 1
            self._round += 1
        self._producer.flush(120)
        return sent


def fill_topic(bootstrap: str, pushes: int, clients: int, partitions: int) -> tuple[TopicFiller, int]:
    filler = TopicFiller(bootstrap, clients, partitions, max(1, pushes // clients))
    return filler, filler.fill(pushes)


def delete_topics(bootstrap: str, topics: list[str]) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the deletion is answered
    for future in admin.delete_topics(topics).values():
        future.result(30)


# CPU time of the Spark JVM (driver and local executors), read around each timed step: on a machine shared
# with other work the wall time varies with the load, the CPU-seconds the job itself spends much less.
_JVM_CPU: list[Any] = []


def jvm_cpu_seconds() -> float | None:
    """User + system CPU-seconds of the JVM so far (/proc/<pid>/stat; None where there is no /proc)."""
    if not _JVM_CPU:
        return None
    try:
        fields = Path(f"/proc/{_JVM_CPU[0]}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def jvm_thread_cpu() -> dict[str, float]:
    """CPU-seconds per live JVM thread kind: JIT compilers (`jit`), garbage collection (`gc`), Spark's task
    threads (`tasks`), the rest (`other`); threads that ended are not counted."""
    out = {"jit": 0.0, "gc": 0.0, "tasks": 0.0, "other": 0.0}
    if not _JVM_CPU:
        return out
    root = Path(f"/proc/{_JVM_CPU[0]}/task")
    for task in root.iterdir() if root.is_dir() else []:
        try:
            raw = (task / "stat").read_text()
        except OSError:
            continue
        name = raw[raw.index("(") + 1: raw.rindex(")")]
        fields = raw.rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        kind = ("jit" if "CompilerThre" in name else "gc" if name.startswith(("GC Thread", "G1 ")) else
                "tasks" if name.startswith("Executor task") else "other")
        out[kind] += cpu
    return out


def spark_jobs(spark: Any) -> tuple[int, float]:
    """Spark jobs run so far and their tasks' CPU-seconds (the status store, kept without the UI too)."""
    store = spark.sparkContext._jsc.sc().statusStore()
    jobs = store.jobsList(None)
    stages: set[int] = set()
    for i in range(jobs.size()):
        ids = jobs.apply(i).stageIds()
        stages.update(int(ids.apply(k)) for k in range(ids.size()))
    cpu = 0.0
    for stage in stages:
        try:
            data = store.lastStageAttempt(stage)
        except Exception:  # a stage that never ran (skipped) has no attempt
            continue
        cpu += data.executorCpuTime() / 1e9
    return int(jobs.size()), cpu


def jobs_line(spark: Any, before: tuple[tuple[int, float], dict[str, float]], enabled: bool,
              after: tuple[int, float] | None = None) -> None:
    """`--jobs`: what the step just timed cost in Spark jobs and JVM threads. The threads' CPU is the one
    `timed` read as the step ended, and `after` the Spark jobs counted then (default: now): what runs in
    between (this function's own calls over every stage so far, a count of the output) is not the step's."""
    if not enabled:
        return
    (jobs0, task_cpu0), threads0 = before
    jobs1, task_cpu1 = after or spark_jobs(spark)
    threads1 = _LAST_THREADS[0] or jvm_thread_cpu()
    kinds = ", ".join(f"{k} {threads1[k] - threads0[k]:.1f}" for k in threads1)
    print(f"  {'':<10} {jobs1 - jobs0} Spark jobs, tasks' CPU {task_cpu1 - task_cpu0:.1f} s; "
          f"JVM threads CPU-s: {kinds}", flush=True)


def line(label: str, took: float, records: int, points: int, note: str = "", cpu: float | None = None) -> None:
    cpu_text = "" if cpu is None else f"  {cpu:7.1f} JVM CPU-s ({points / cpu:10,.0f} points/CPU-s)"
    print(f"  {label:<10} {took:8.2f} s  {records / took:10,.0f} records/s  {points / took:12,.0f} points/s"
          + cpu_text + (f"  {note}" if note else ""), flush=True)


_LAST_CPU: list[float | None] = [None]
_LAST_THREADS: list[dict[str, float] | None] = [None]


def timed(fn: Any) -> tuple[float, Any]:
    """Wall seconds of `fn()` and its result; its JVM CPU-seconds are left in `_LAST_CPU[0]`, the JVM threads'
    CPU-seconds as it ended in `_LAST_THREADS[0]`."""
    cpu0 = jvm_cpu_seconds()
    started = time.perf_counter()
    out = fn()
    took = time.perf_counter() - started
    cpu1 = jvm_cpu_seconds()
    _LAST_THREADS[0] = jvm_thread_cpu()
    _LAST_CPU[0] = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
    return took, out


def job_config(args: argparse.Namespace, topic: str, work: Path, extra_source: dict[str, str]) -> Any:
    from kct.aggregation.config import parse_job_config

    return parse_job_config({
        "source": {"bootstrapServers": args.bootstrap, "topic": topic, **extra_source},
        "rules": [{"name": "queue", "metric": "org.apache.kafka.producer.record.queue.time.max", "field": "max",
                   "op": ">", "threshold": 5000, "forSeconds": 180}],
        "parquet": {"path": str(work / "out")},
        "run": {"mode": "batch", "untilDrained": True, "checkpointPath": str(work / "ck")},
        # The status store keeps every job and stage (Spark keeps the last 1,000): `--jobs` counts a step's jobs
        # and tasks' CPU as differences of totals, which went negative once ~60 warm rounds had run.
        "spark": {"master": args.master, "shufflePartitions": args.shuffle_partitions,
                  "conf": {"spark.ui.enabled": "false", "spark.driver.memory": "3g",
                           "spark.ui.retainedJobs": "100000", "spark.ui.retainedStages": "100000"}},
    })


def warm_batches(spark: Any, cfg: Any, args: argparse.Namespace, records: int, figures: dict[str, Any]) -> None:
    """`--warm-rounds`: `run_batch` again over the same topic, each round timed."""
    from kct.aggregation.batch import run_batch

    rates = []
    for k in range(args.warm_rounds):
        before = (spark_jobs(spark), jvm_thread_cpu())
        took, counts = timed(lambda: run_batch(spark, cfg))
        line(f"batch w{k + 1}", took, records, int(counts["points"]), cpu=_LAST_CPU[0])
        jobs_line(spark, before, args.jobs)
        rates.append(int(counts["points"]) / took)
        figures["batch_warm_points_s"] = round(rates[-1])
    steady_line("batch", rates, figures)


def steady_line(kind: str, rates: list[float], figures: dict[str, Any]) -> None:
    """The median points/s of the later half of the warm rounds (4 or more), as `<kind>_steady_points_s`."""
    if len(rates) < 4:
        return
    later = rates[len(rates) // 2:]
    figures[f"{kind}_steady_points_s"] = round(statistics.median(later))
    print(f"  {kind + ' steady':<17} median of rounds w{len(rates) - len(later) + 1}-w{len(rates)}: "
          f"{figures[f'{kind}_steady_points_s']:,} points/s (min {min(later):,.0f}, max {max(later):,.0f})",
          flush=True)


def warm_streams(spark: Any, cfg: Any, args: argparse.Namespace, work: Path, figures: dict[str, Any]) -> None:
    """`--warm-rounds`: a stream on a topic of its own (the batch's topic stays the 1M points the bare
    groupBy reads), each round over `--pushes` new pushes appended to it, on the same checkpoint."""
    from kct.aggregation.stream_writer import run_stream

    filler = TopicFiller(args.bootstrap, args.clients, args.partitions, max(1, args.pushes // args.clients))
    warm = cfg.model_copy(update={
        "source": cfg.source.model_copy(update={"topic": filler.topic}),
        "run": cfg.run.model_copy(update={"checkpoint_path": str(work / "warm-ck")}),
        "parquet": cfg.parquet.model_copy(update={"path": str(work / "warm")})})

    def stream() -> None:
        for query in run_stream(spark, warm):
            query.awaitTermination()

    rates = []
    try:
        for k in range(args.warm_rounds):
            more = filler.fill(args.pushes)
            done = finalized_points(spark, warm) if k else 0
            before = (spark_jobs(spark), jvm_thread_cpu())
            took, _ = timed(stream)
            cpu = _LAST_CPU[0]
            after = spark_jobs(spark) if args.jobs else None  # before the count below, a job of its own
            finalized = finalized_points(spark, warm) - done
            line(f"stream w{k + 1}", took, more, finalized, "(points: those of the windows it finalized)", cpu)
            jobs_line(spark, before, args.jobs, after)
            rates.append(finalized / took)
            figures["stream_warm_points_s"] = round(rates[-1])
        steady_line("stream", rates, figures)
    finally:
        delete_topics(args.bootstrap, [filler.topic])


def finalized_points(spark: Any, cfg: Any) -> int:
    """Data points in the stream's client_metrics table so far (every point is in one window's row)."""
    from pyspark.sql import functions as F

    from kct.aggregation.outputs import table_path

    table = Path(table_path(cfg, "client_metrics"))  # the benchmark writes under a local temporary folder
    if not table.exists():  # no window finalized yet (a few pushes per client)
        return 0
    return int(spark.read.parquet(str(table)).agg(F.sum("points")).first()[0] or 0)


BARE_COLUMNS = ("time", "client_instance_id", "metric", "attributes_key", "value")


def bare_query(spark: Any, flat: Path, out: Path, window_s: int) -> None:
    """The bare groupBy once: pre-flattened Parquet points -> groupBy(window, series) min/max/avg/count ->
    Parquet."""
    from pyspark.sql import functions as F

    df = spark.read.parquet(str(flat))
    agg = df.groupBy(F.window("time", f"{window_s} seconds"), "client_instance_id", "metric", "attributes_key") \
        .agg(F.min("value"), F.max("value"), F.avg("value"), F.count("value"))
    agg.write.mode("overwrite").parquet(str(out))


def bare_groupby(spark: Any, points: Any, work: Path, window_s: int,
                 runs: int) -> tuple[list[tuple[float, float | None]], int]:
    """Spark alone: the points' window-able columns in Parquet (written untimed, to `work/flat`), then timed
    `runs` times (`bare_query`). Returns (each run's seconds and JVM CPU-s, points)."""
    flat = work / "flat"
    points.select(*BARE_COLUMNS).write.mode("overwrite").parquet(str(flat))
    n = int(spark.read.parquet(str(flat)).count())

    def run() -> None:
        bare_query(spark, flat, work / "bare-out", window_s)

    run()  # same plan once untimed: the job's paths are timed warm too (after the demo-sized run)
    timings = []
    for _ in range(max(1, runs)):
        took, _ = timed(run)
        timings.append((took, _LAST_CPU[0]))
    return timings, n


def bare_in_fresh_jvm(args: argparse.Namespace, work: Path, demo_points: Any, window_s: int) -> dict[str, Any]:
    """The bare groupBy measured as the job's first batch run is: in a JVM of its own (`bare_fresh_jvm.py`),
    a demo-sized run first (the demo topic's points), then runs over the benchmark's points (`work/flat`,
    written by `bare_groupby`). So the job's first run is compared with Spark's own first run too, not only
    with its warm runs. Returns {"demo": [s, cpu], "demo_points", "runs": [[s, cpu], ...], "points"}."""
    import subprocess

    demo_points.select(*BARE_COLUMNS).write.mode("overwrite").parquet(str(work / "flat-demo"))
    command = [sys.executable, str(Path(__file__).with_name("bare_fresh_jvm.py")), "--work", str(work),
               "--master", args.master, "--shuffle-partitions", str(args.shuffle_partitions),
               "--window-seconds", str(window_s), "--runs", "3"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    lines = [text for text in done.stdout.splitlines() if text.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"bare groupBy in a fresh JVM failed ({done.returncode}): {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def stages(spark: Any, cfg: Any, raw: Any, work: Path, records: int, points: int) -> None:
    """--stages: the job's parts timed one by one over the cached records."""
    from pyspark.sql import functions as F

    from kct.aggregation.client_windows import client_metrics_from_records
    from kct.aggregation.decode import jvm_points
    from kct.aggregation.rollups_jvm import rollups_on_jvm
    from kct.aggregation.source import read_records

    took, _ = timed(lambda: read_records(spark, cfg, streaming=False).count())
    line("read", took, records, points, cpu=_LAST_CPU[0])
    took, _ = timed(lambda: jvm_points(raw).where(F.col("value").isNotNull()).count())
    line("decode", took, records, points, cpu=_LAST_CPU[0])
    took, _ = timed(lambda: client_metrics_from_records(raw).write.format("noop").mode("overwrite").save())
    line("aggregate", took, records, points, "(ClientWindows over the records)", _LAST_CPU[0])
    metrics = client_metrics_from_records(raw).persist()
    metrics.count()
    for run in ("first", "again"):  # the second: warm
        took, _ = timed(lambda: rollups_on_jvm(metrics).write.format("noop").mode("overwrite").save())
        line("rollups", took, records, points, f"(on the JVM, from cached client_metrics, {run})", _LAST_CPU[0])
    took, _ = timed(lambda: metrics.write.mode("overwrite").parquet(str(work / "stage-cm")))
    line("write", took, records, points, "(cached client_metrics -> Parquet)", _LAST_CPU[0])
    metrics.unpersist()


def ratios(figures: dict[str, Any]) -> None:
    """Each end-to-end figure divided by bare's (points/s), and bare's JVM CPU-s by theirs; printed, kept."""
    print()
    for kind in ("batch", "stream"):
        if f"{kind}_points_s" not in figures:
            continue
        figures[f"ratio_{kind}"] = round(figures[f"{kind}_points_s"] / figures["bare_points_s"], 3)
        print(f"  ratio      {kind} / bare = {figures[f'ratio_{kind}']:.3f}", flush=True)
        if figures.get(f"{kind}_cpu_s") and figures.get("bare_cpu_s"):
            figures[f"cpu_ratio_{kind}"] = round(figures["bare_cpu_s"] / figures[f"{kind}_cpu_s"], 3)
            print(f"  ratio      bare / {kind} JVM CPU-s = {figures[f'cpu_ratio_{kind}']:.3f}", flush=True)
        if kind == "batch" and "bare_first_points_s" in figures:
            figures["ratio_batch_first"] = round(figures["batch_points_s"] / figures["bare_first_points_s"], 3)
            print(f"  ratio      batch / bare, each the first run after a demo-sized run in a fresh JVM = "
                  f"{figures['ratio_batch_first']:.3f}", flush=True)
        if f"{kind}_steady_points_s" in figures:
            figures[f"ratio_{kind}_steady"] = round(figures[f"{kind}_steady_points_s"] / figures["bare_points_s"], 3)
            print(f"  ratio      {kind} steady / bare = {figures[f'ratio_{kind}_steady']:.3f}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:19092"))
    parser.add_argument("--pushes", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=46, help="per-partition series per push (2 points each)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--shuffle-partitions", type=int, default=4)
    parser.add_argument("--source", action="append", default=[], metavar="KEY=VALUE",
                        help="extra key of the job's source config (repeatable)")
    parser.add_argument("--no-stream", action="store_true", help="skip the Structured Streaming run")
    parser.add_argument("--stages", action="store_true", help="also time read, decode and aggregate alone")
    parser.add_argument("--jobs", action="store_true",
                        help="after batch and stream: Spark jobs, their tasks' CPU, JIT/GC/task thread CPU")
    parser.add_argument("--warm-rounds", type=int, default=0, metavar="N",
                        help="then N more batch runs over the same topic, and N more stream runs each over "
                             "--pushes new pushes on the same checkpoint: the figures of a JVM past its warm-up")
    parser.add_argument("--bare-runs", type=int, default=5, metavar="N",
                        help="time the bare groupBy N times (after one untimed run); the ratios use the median")
    parser.add_argument("--no-bare-fresh-jvm", action="store_true",
                        help="skip the bare groupBy's first run in a JVM of its own (and the ratio of first runs)")
    parser.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    args = parser.parse_args()
    extra_source = dict(kv.split("=", 1) for kv in args.source)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from kct.aggregation.batch import run_batch
    from kct.aggregation.decode import jvm_points
    from kct.aggregation.session import build_session, require_jvm_engine
    from kct.aggregation.source import read_records
    from kct.aggregation.stream_writer import run_stream

    t0 = time.perf_counter()
    filler, records = fill_topic(args.bootstrap, args.pushes, args.clients, args.partitions)
    demo_filler, demo_records = fill_topic(args.bootstrap, 24, 4, 10)
    topic, demo_topic = filler.topic, demo_filler.topic
    print(f"topic {topic}: {records} pushes, topic {demo_topic}: {demo_records} pushes (demo-sized), "
          f"produced in {time.perf_counter() - t0:.1f}s", flush=True)

    work = Path(tempfile.mkdtemp(prefix="kct-bench-"))
    figures: dict[str, Any] = {}
    try:
        cfg = job_config(args, topic, work, extra_source)
        demo_cfg = job_config(args, demo_topic, work / "demo", extra_source)
        t0 = time.perf_counter()
        spark = build_session(cfg)
        spark.sparkContext.setLogLevel("ERROR")
        _JVM_CPU.append(int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()))
        print(f"JVM and SparkSession started in {time.perf_counter() - t0:.1f}s", flush=True)
        require_jvm_engine(spark)
        plan = jvm_points(read_records(spark, cfg, streaming=False))._jdf.queryExecution().executedPlan()
        text = plan.toString()
        source = "python (kct_kafka)" if "kct_kafka" in text or "PythonDataSource" in text else "spark-sql-kafka"
        decoder = "jvm" if "kct_otlp_points" in text else "unknown"
        print(f"spark {spark.version}, master {args.master}, kafka source: {source}, decoder: {decoder}", flush=True)

        took, counts = timed(lambda: run_batch(spark, demo_cfg))
        demo_points = int(counts["points"])
        print(f"\n{records} pushes; demo-sized: {demo_records} pushes, {demo_points} points\n", flush=True)
        line("demo", took, demo_records, demo_points, "(run_batch, first job after JVM start)", _LAST_CPU[0])
        figures["demo_seconds"] = round(took, 2)

        before = (spark_jobs(spark), jvm_thread_cpu())
        took, counts = timed(lambda: run_batch(spark, cfg))
        points = int(counts["points"])
        line("batch", took, records, points, cpu=_LAST_CPU[0])
        jobs_line(spark, before, args.jobs)
        figures["batch_points_s"] = round(points / took)
        figures["batch_cpu_s"] = _LAST_CPU[0] and round(_LAST_CPU[0], 1)
        warm_batches(spark, cfg, args, records, figures)

        if not args.no_stream:
            stream_cfg = cfg.model_copy(update={"run": cfg.run.model_copy(update={"mode": "stream"}),
                                                "parquet": cfg.parquet.model_copy(update={"path": str(work / "s")})})

            def stream() -> None:
                for query in run_stream(spark, stream_cfg):
                    query.awaitTermination()

            before = (spark_jobs(spark), jvm_thread_cpu())
            took, _ = timed(stream)
            line("stream", took, records, points, cpu=_LAST_CPU[0])
            jobs_line(spark, before, args.jobs)
            figures["stream_points_s"] = round(points / took)
            figures["stream_cpu_s"] = _LAST_CPU[0] and round(_LAST_CPU[0], 1)
            warm_streams(spark, stream_cfg, args, work, figures)

        raw = read_records(spark, cfg, streaming=False).persist()
        raw.count()
        decoded = jvm_points(raw).persist()
        decoded.count()
        bare_runs, bare_points = bare_groupby(spark, decoded, work, cfg.window.size_seconds, args.bare_runs)
        if len(bare_runs) > 1:
            for k, (took, cpu) in enumerate(bare_runs):
                line(f"bare r{k + 1}", took, records, bare_points, cpu=cpu)
        # The median run: a single run of ~2 s gave 366 k and 590 k points/s in two runs of the same code.
        bare_took, bare_cpu = sorted(bare_runs, key=lambda run: run[0])[len(bare_runs) // 2]
        line("bare", bare_took, records, bare_points, "(Parquet points -> groupBy(window, series) -> Parquet; "
             f"the median of {len(bare_runs)} runs)", bare_cpu)
        figures["bare_points_s"] = round(bare_points / bare_took)
        figures["bare_cpu_s"] = bare_cpu and round(bare_cpu, 1)
        if not args.no_bare_fresh_jvm:
            fresh = bare_in_fresh_jvm(args, work, jvm_points(read_records(spark, demo_cfg, streaming=False)),
                                      cfg.window.size_seconds)
            line("bare new", fresh["demo"][0], demo_records, fresh["demo_points"],
                 "(a JVM of its own: the demo-sized points first)", fresh["demo"][1])
            for k, (took, cpu) in enumerate(fresh["runs"]):
                line(f"bare new{k + 1}", took, records, fresh["points"],
                     "(then the benchmark's points; the first compares with batch's first run)", cpu)
            figures["bare_first_points_s"] = round(fresh["points"] / fresh["runs"][0][0])
        if args.stages:
            stages(spark, cfg, raw, work, records, points)
        raw.unpersist()
        decoded.unpersist()

        ratios(figures)
        figures.update(spark=spark.version, kafka_source=source, decoder=decoder, points=points, pushes=records)
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
        delete_topics(args.bootstrap, [topic, demo_topic])
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
