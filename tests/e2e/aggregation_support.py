"""Helpers to run the aggregation job against a real Kafka topic and read its Parquet tables.

Reusable by any end-to-end test (the full chain clients -> broker -> plugin -> receiver -> topic -> job):
`run_aggregation(stack, topic, out)` runs `kct aggregate` exactly as a user does (a subprocess with a
YAML config), and `read_table(out, name)` returns a table's rows as dicts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
KCT = Path(sys.executable).with_name("kct")


def create_topic(bootstrap: str, partitions: int = 2, prefix: str = "kct-agg-e2e", replication: int = 1) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, replication)])[name].result(timeout=30)
    return name


def delete_topics(bootstrap: str, topics: list[str]) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics(topics).values():
        future.result(timeout=30)


def produce(bootstrap: str, topic: str, records: list[Any]) -> None:
    """Records with .key, .value, .headers (e.g. kct.aggregation.synthetic.TelemetryRecord)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.metrics.push": False, "linger.ms": 20,
                         "acks": "all"})
    for rec in records:
        producer.produce(topic, key=rec.key, value=rec.value, headers=rec.headers)
        producer.poll(0)
    assert producer.flush(60) == 0


def write_config(path: Path, topic: str, out: Path, *, mode: str, rules: list[dict[str, Any]] | None = None,
                 extra: dict[str, Any] | None = None) -> Path:
    cfg: dict[str, Any] = {
        "source": {"bootstrapServers": "${KAFKA_BOOTSTRAP_SERVERS}", "topic": topic},
        "window": {"sizeSeconds": 60, "watermarkSeconds": 120, "counterLookbackWindows": 5},
        "rules": rules or [],
        "parquet": {"path": str(out)},
        "run": {"mode": mode, "untilDrained": True, "checkpointPath": str(out / "_checkpoints")},
        "spark": {"master": "local[2]", "shufflePartitions": 2,
                  "conf": {"spark.ui.enabled": "false", "spark.driver.memory": "1g"}},
    }
    if extra:
        cfg.update(extra)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def run_aggregation(bootstrap: str, config: Path, *, timeout: float = 600) -> str:
    """`kct aggregate --config FILE`; returns its output, fails with its tail on a non-zero exit."""
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=bootstrap)
    proc = subprocess.run([str(KCT), "aggregate", "--config", str(config)], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    return output


def consume_json(bootstrap: str, topic: str, expected: int, timeout: float = 60) -> list[dict[str, Any]]:
    """Up to `expected` JSON records from the start of `topic` (fewer if `timeout` passes first)."""
    import json
    import time

    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"kct-e2e-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.metrics.push": False})
    consumer.subscribe([topic])
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                out.append(json.loads(msg.value()))
    finally:
        consumer.close()
    return out


def read_table(out: Path, name: str) -> list[dict[str, Any]]:
    """Rows of one Parquet table (partition columns included); [] when the job wrote none."""
    import pyarrow.dataset as ds

    path = out / name
    if not path.exists():
        return []
    return list(ds.dataset(str(path), format="parquet", partitioning="hive").to_table().to_pylist())
