"""The streaming aggregation survives a driver kill on the node: the driver of a TelemetryReceiver's
SparkApplication is killed (SIGKILL to its container, through the node's containerd) in the middle of a
micro-batch, after that batch appended its client_metrics rows and before Spark committed it; the
spark-operator resubmits the application (the rendered `restartPolicy: Always`), the new driver replays the
uncommitted batch from the checkpoint on the PersistentVolume and goes on. Once a last push moved the
watermark past every window of the input, the tables equal those of an uninterrupted run over the same
topic (`kct aggregate` in batch mode, in this process): no window lost, none appended twice.

The input is fixed (seeded synthetic clients, fixed timestamps, a counter per client and per partition, so
deltas cross windows and micro-batches); `maxRecordsPerTrigger` makes it several micro-batches. Uses the
`spark_on_node` fixture of test_spark_operator_e2e (its own spark-operator release and namespace). The kill
to driver-back time and the micro-batch counts are printed (`-s`), never asserted.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from aggregation_support import produce, read_table, run_aggregation, write_config
from helpers import eventually
from test_spark_operator_e2e import (  # noqa: F401 (spark_on_node: the module fixture this module reuses)
    SparkOnNode,
    _diagnostics,
    _pods,
    _receiver,
    _topic_exists,
    spark_on_node,
)

from kct.aggregation.synthetic import SyntheticClient

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

S = 1_000_000_000
WINDOW_S = 60
WATERMARK_S = 60
START_S = 1_767_225_600      # 2026-01-01T00:00:00Z: fixed event times, a deterministic input
PUSHES = 36                  # per client, every 10 s: 6 windows
PER_TRIGGER = 24             # records per micro-batch: 8 pushes of 3 clients, 80 s of event time (5 batches)
TERMINATES_AT = 20           # the third client's last push says client.terminating
COMPARED = ("client_metrics", "rollups", "terminations")


def _clients() -> list[SyntheticClient]:
    return [SyntheticClient(f"kill-e2e-{i}", started_ns=(START_S - 30) * S, seed=101 + i, partitions=2,
                            instance_id=str(uuid.UUID(int=0xC0FFEE00 + i)))
            for i in range(3)]


def _input(clients: list[SyntheticClient]) -> list[Any]:
    records = []
    for k in range(PUSHES):
        for i, client in enumerate(clients):
            if i == 2 and k > TERMINATES_AT:
                continue
            records.append(client.push((START_S + 10 * k + 1) * S, terminating=i == 2 and k == TERMINATES_AT,
                                       reason="Producer closed by application"))
    return records


class Checkpoint:
    """The streaming query's checkpoint and the job's per-batch output marks, read from the host side of
    the volume (Spark writes offsets/<id> when it plans a batch, commits/<id> when it is done)."""

    def __init__(self, volume: Path, query: str) -> None:
        self.query = volume / "_checkpoints" / query
        self.marks = volume / "_checkpoints" / f"{query}_state" / "outputs"

    def _ids(self, folder: str) -> set[int]:
        path = self.query / folder
        return {int(p.name) for p in path.iterdir() if p.name.isdigit()} if path.is_dir() else set()

    def committed(self) -> set[int]:
        return self._ids("commits")

    def planned(self) -> set[int]:
        return self._ids("offsets")

    def end_offset(self, batch: int) -> int:
        """The end offset (exclusive) batch `batch` reads to, summed over the topic's partitions."""
        lines = (self.query / "offsets" / str(batch)).read_text().splitlines()
        return sum(sum(int(o) for o in partitions.values()) for partitions in json.loads(lines[-1]).values())

    def drained(self, total: int) -> bool:
        """Whether a committed batch read up to offset `total` (the topic has one partition)."""
        return any(self.end_offset(b) == total for b in self.committed())

    def written_not_committed(self) -> int | None:
        """A batch after the first committed one that appended client_metrics and is not committed yet."""
        committed = self.committed()
        for batch in sorted(self.planned() - committed):
            if committed and (self.marks / str(batch) / "client_metrics").exists():
                return batch
        return None


def _driver(spark: SparkOnNode) -> dict[str, Any] | None:
    running = [p for p in _pods(spark.stack, spark.namespace, "driver") if p["status"].get("phase") == "Running"]
    return running[0] if running else None


def _kill_command(spark: SparkOnNode, pod: dict[str, Any]) -> list[str]:
    """SIGKILL to the driver container's task in the node's containerd (as the kernel's OOM killer would):
    no shutdown hook, no graceful stop of the streaming queries. Built before the moment to kill comes."""
    (status,) = [c for c in pod["status"]["containerStatuses"] if c["name"] == "spark-kubernetes-driver"]
    container = status["containerID"].removeprefix("containerd://")
    socket = spark.stack.node_exec[0].rsplit("/", 1)[0] + "/node/containerd/containerd.sock"
    return [*spark.stack.node_exec, "ctr", f"--address={socket}", "--namespace=k8s.io", "tasks", "kill",
            "--signal", "SIGKILL", container]


def _driver_gone(spark: SparkOnNode, uid: str) -> bool:
    for pod in _pods(spark.stack, spark.namespace, "driver"):
        if pod["metadata"]["uid"] == uid:
            return any("terminated" in c.get("state", {}) for c in pod["status"].get("containerStatuses", []))
    return True


Key = tuple[tuple[str, Any], ...]


def _hashable(value: Any) -> Any:
    return json.dumps(value, sort_keys=True, default=str) if isinstance(value, (list, dict, tuple)) else value


def _final_rows(folder: Path, table: str, before: dt.datetime) -> dict[Key, list[dict[str, float]]]:
    """The table's rows of the windows the stream finalized (window_start before `before`), by their
    non-float columns (labels, window, metric, attributes, counts); the float columns are the values."""
    rows = read_table(folder, table)
    if table != "terminations":
        rows = [r for r in rows if r["window_start"].replace(tzinfo=None) < before]
    out: dict[Key, list[dict[str, float]]] = {}
    for row in rows:
        key = tuple(sorted((k, _hashable(v)) for k, v in row.items() if not isinstance(v, float)))
        out.setdefault(key, []).append({k: v for k, v in row.items() if isinstance(v, float)})
    return out


def _assert_same_rows(table: str, streamed: dict[Key, list[dict[str, float]]],
                      expected: dict[Key, list[dict[str, float]]]) -> None:
    repeated = [key for key, values in streamed.items() if len(values) > 1]
    assert not repeated, f"{table}: {len(repeated)} rows appended more than once, e.g. {dict(repeated[0])}"
    missing, extra = expected.keys() - streamed.keys(), streamed.keys() - expected.keys()
    assert not missing and not extra, (
        f"{table}: {len(missing)} rows missing, {len(extra)} unexpected, e.g. {dict(next(iter(missing or extra)))}")
    for key, (values,) in expected.items():
        # Sums may add up in another order in the two runs: floats within 1e-12.
        assert streamed[key] == [pytest.approx(values, rel=1e-12, nan_ok=True)], (table, dict(key))


@pytest.mark.timeout(3600)
def test_a_killed_driver_resumes_from_the_checkpoint_without_losing_or_repeating_a_window(
        spark_on_node: SparkOnNode, tmp_path: Path) -> None:  # noqa: F811 (the imported fixture, by name)
    """Given a streaming TelemetryReceiver aggregation reading a fixed input in micro-batches of 24 records,
    when its driver is SIGKILLed after a batch appended client_metrics and before Spark committed it, then
    the spark-operator brings a new driver, which replays that batch and drains the topic; after a push
    past the watermark, client_metrics, rollups and terminations equal an uninterrupted batch run's: every
    window once."""
    spark, stack = spark_on_node, spark_on_node.stack
    started = time.monotonic()
    topic = f"kct-spark-kill-{uuid.uuid4().hex[:6]}"
    receiver = _receiver(spark, topic)
    receiver["spec"]["aggregation"].update({
        "window": {"sizeSeconds": WINDOW_S, "watermarkSeconds": WATERMARK_S}, "maxRecordsPerTrigger": PER_TRIGGER,
        "triggerSeconds": 2,
    })
    checkpoint = Checkpoint(spark.volume, "client_metrics")  # the stream's one query (terminations included)
    clients = _clients()
    records = _input(clients)
    stack.kubectl("apply", "-f", "-", stdin=json.dumps(receiver))
    try:
        eventually(lambda: _topic_exists(stack.kafka_bootstrap, topic), timeout=240, interval=1,
                   what=f"the operator to create the topic {topic}")
        produce(stack.kafka_bootstrap, topic, records)
        (application,) = eventually(lambda: stack.get("sparkapplications", "-n", spark.namespace)["items"],
                                    timeout=120, what="the SparkApplication")
        assert application["spec"]["restartPolicy"]["type"] == "Always"

        driver = eventually(lambda: _driver(spark), timeout=600, interval=1, what="a running driver")
        kill = _kill_command(spark, driver)
        batch = eventually(checkpoint.written_not_committed, timeout=900, interval=0.1,
                           what="a micro-batch that appended client_metrics and is not committed yet")
        subprocess.run(kill, capture_output=True, text=True, timeout=60, check=True)
        killed = time.monotonic()
        eventually(lambda: _driver_gone(spark, driver["metadata"]["uid"]), timeout=60, interval=0.2,
                   what="the killed driver container to be terminated")
        committed_before = checkpoint.committed()
        assert batch not in committed_before, (
            f"the kill came after batch {batch} was committed: the replay of an appended batch was not tested")
        assert checkpoint.end_offset(batch) < len(records), "the input was drained before the kill"

        back = eventually(lambda: (d := _driver(spark)) and d["metadata"]["uid"] != driver["metadata"]["uid"] and d,
                          timeout=900, interval=1, what="the spark-operator to run a new driver")
        driver_back = time.monotonic() - killed
        eventually(lambda: batch in checkpoint.committed(), timeout=1500, interval=1,
                   what=f"the new driver to replay and commit batch {batch}")
        replayed = time.monotonic() - killed

        # A last push far enough later: every window of the input is then before the watermark.
        last_ns = (START_S + 10 * PUSHES + WINDOW_S + WATERMARK_S + 1) * S
        produce(stack.kafka_bootstrap, topic, [clients[0].push(last_ns)])
        total = len(records) + 1
        eventually(lambda: checkpoint.drained(total), timeout=1500, interval=2,
                   what="the streaming query to commit a batch ending at the topic's end")
    except BaseException:
        print(_diagnostics(spark))
        raise
    committed_after = checkpoint.committed()

    reference = tmp_path / "reference"
    config = write_config(tmp_path / "batch.yaml", topic, reference, mode="batch",
                          extra={"window": {"sizeSeconds": WINDOW_S, "watermarkSeconds": WATERMARK_S,
                                            "counterLookbackWindows": 5}})
    run_aggregation(stack.kafka_bootstrap, config)

    # Windows the stream finalized: those ending WATERMARK_S before the last push, or earlier.
    final_before = dt.datetime.fromtimestamp((last_ns // S - WATERMARK_S) // WINDOW_S * WINDOW_S, dt.UTC)
    final_before = final_before.replace(tzinfo=None)
    windows = {r["window_start"] for r in read_table(spark.volume, "client_metrics")}
    assert len([w for w in windows if w.replace(tzinfo=None) < final_before]) == PUSHES // 6
    compared = {}
    for table in COMPARED:
        expected = _final_rows(reference, table, final_before)
        assert expected, f"the uninterrupted run wrote {table}"
        streamed = _final_rows(spark.volume, table, final_before)
        _assert_same_rows(table, streamed, expected)
        compared[table] = len(streamed)
    print(f"\n[spark-kill-e2e] killed the driver in batch {batch} ({len(committed_before)} batches committed "
          f"before); new driver running {driver_back:.0f} s after the kill, batch {batch} committed "
          f"{replayed:.0f} s after; {len(committed_after)} batches in all ({back['metadata']['name']}); rows "
          f"equal to the uninterrupted run: {compared}; test {time.monotonic() - started:.0f} s")
