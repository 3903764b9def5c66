"""Spark aggregation throughput: data points/s end to end (topic -> aggregates) on this machine.

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:19092 .venv/bin/python bench/spark_throughput.py [--pushes 10000]
        [--decoder auto|jvm|python]

Fills a fresh topic with realistic pushes (~100 data points each: the standard producer metrics plus
46 partitions' series, like KIP-714's sizing example), then measures, in one local[2] SparkSession:

  read      the topic -> raw records (Kafka source only)
  decode    cached records -> data points (`--decoder`: the JVM function, or mapInArrow in Python)
  python    the same decoding in this process without Spark (the per-core ceiling of that step)
  aggregate cached points -> client_metrics (the Spark SQL windowed aggregation, noop sink)
  batch     end to end: `kct aggregate --mode batch` (read, decode, aggregate, roll-ups, alerts, Parquet)
  stream    end to end: Structured Streaming, availableNow trigger, to Parquet

Each line prints seconds, records/s and data points/s, so the output says where the time goes. The
figures are for this 2-core machine shared with other work: compare runs, not absolute values.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
S = 1_000_000_000


def fill_topic(bootstrap: str, pushes: int, clients: int, partitions: int) -> tuple[str, int]:
    import uuid

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from kct.aggregation.synthetic import SyntheticClient

    topic = f"kct-bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.metrics.push": False, "linger.ms": 50,
                         "compression.type": "lz4", "queue.buffering.max.messages": 200_000})
    rounds = max(1, pushes // clients)
    begin = (time.time_ns() // (60 * S)) * 60 * S - rounds * 10 * S
    fleet = [SyntheticClient(f"bench-{i % 50}", started_ns=begin - S, seed=i + 1, partitions=partitions)
             for i in range(clients)]
    sent = 0
    for k in range(rounds):
        for c in fleet:
            rec = c.push(begin + k * 10 * S)
            producer.produce(topic, key=rec.key, value=rec.value, headers=rec.headers)
            producer.poll(0)
            sent += 1
    producer.flush(120)
    return topic, sent


def timed(label: str, records: int, points: int, fn: Any) -> float:
    started = time.perf_counter()
    fn()
    took = time.perf_counter() - started
    print(f"  {label:<10} {took:8.1f} s  {records / took:10,.0f} records/s  {points / took:12,.0f} points/s",
          flush=True)
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:19092"))
    parser.add_argument("--pushes", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=46, help="per-partition series per push (2 points each)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--decoder", choices=("auto", "jvm", "python"), default="auto",
                        help="source.decoder of the job (auto: the JVM decoder when its jar is built)")
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from kct.aggregation.config import parse_config
    from kct.aggregation.decode import decode_arrow_batches
    from kct.aggregation.job import build_session, decode_records, read_records, run_batch, run_stream
    from kct.aggregation.transforms import aggregate_client_metrics

    t0 = time.perf_counter()
    topic, records = fill_topic(args.bootstrap, args.pushes, args.clients, args.partitions)
    print(f"topic {topic}: {records} pushes produced in {time.perf_counter() - t0:.1f}s", flush=True)

    work = Path(tempfile.mkdtemp(prefix="kct-bench-"))
    cfg = parse_config({
        "source": {"bootstrapServers": args.bootstrap, "topic": topic, "decoder": args.decoder},
        "rules": [{"name": "queue", "metric": "org.apache.kafka.producer.record.queue.time.max", "field": "max",
                   "op": ">", "threshold": 5000, "forSeconds": 180}],
        "parquet": {"path": str(work / "out")},
        "run": {"mode": "batch", "untilDrained": True, "checkpointPath": str(work / "ck")},
        "spark": {"master": args.master, "shufflePartitions": 4,
                  "conf": {"spark.ui.enabled": "false", "spark.driver.memory": "3g"}},
    })
    spark = build_session(cfg)
    spark.sparkContext.setLogLevel("ERROR")
    connector = "spark-sql-kafka" if "spark-sql-kafka" in str(spark.conf.get("spark.jars", "")) else "python"
    plan = decode_records(read_records(spark, cfg, streaming=False), cfg)._jdf.queryExecution().executedPlan()
    decoder = "python" if "MapInArrow" in plan.toString() else "jvm"
    print(f"spark {spark.version}, master {args.master}, kafka source: {connector}, decoder: {decoder}", flush=True)

    raw = read_records(spark, cfg, streaming=False).persist()
    n_records = raw.count()  # warms the JVM and the Python workers; timed again below
    n_points = decode_records(raw.limit(200), cfg).count()  # warm-up of the decoding workers
    started = time.perf_counter()
    n_points = decode_records(raw, cfg).count()
    decode_took = time.perf_counter() - started
    print(f"{n_records} records, {n_points} data points ({n_points / max(n_records, 1):.0f} per push)\n", flush=True)
    timed("read", n_records, n_points, lambda: read_records(spark, cfg, streaming=False).count())
    print(f"  {'decode':<10} {decode_took:8.1f} s  {n_records / decode_took:10,.0f} records/s  "
          f"{n_points / decode_took:12,.0f} points/s", flush=True)
    points_df = decode_records(raw, cfg).persist()
    points_df.count()
    batch = raw.limit(2000).toArrow()
    one = batch.num_rows
    started = time.perf_counter()
    produced = sum(b.num_rows for b in decode_arrow_batches(batch.to_batches(max_chunksize=1000)))
    took = time.perf_counter() - started
    print(f"  {'python':<10} {took:8.2f} s  {one / took:10,.0f} records/s  {produced / took:12,.0f} points/s"
          "  (1 core, no Spark)", flush=True)
    timed("aggregate", n_records, n_points,
          lambda: aggregate_client_metrics(points_df, watermark_seconds=None).write.format("noop")
          .mode("overwrite").save())
    raw.unpersist()
    points_df.unpersist()
    timed("batch", n_records, n_points, lambda: run_batch(spark, cfg))
    stream_cfg = cfg.model_copy(update={"run": cfg.run.model_copy(update={"mode": "stream"})})

    def stream() -> None:
        for query in run_stream(spark, stream_cfg):
            query.awaitTermination()

    timed("stream", n_records, n_points, stream)
    spark.stop()
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": args.bootstrap})  # kept alive until the deletion is answered
    admin.delete_topics([topic])[topic].result(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
