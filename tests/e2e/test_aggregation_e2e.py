"""The aggregation job on the real Kafka broker: realistic OTLP push records in a topic -> `kct aggregate`
(local mode) -> Parquet tables whose values match what the clients themselves counted."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aggregation_support import (
    consume_json,
    create_topic,
    delete_topics,
    produce,
    read_table,
    run_aggregation,
    write_config,
)

from kct.aggregation.synthetic import PREFIX, SyntheticClient

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

S = 1_000_000_000
INTERVAL_S = 10
PUSHES = 90  # 15 minutes of pushes, so that streaming finalizes the older windows


@pytest.fixture(scope="module")
def telemetry(stack: Any) -> Iterator[dict[str, Any]]:
    """4 producers (client ids p-0, p-0, p-1, p-2) pushing every 10 s for 15 minutes into a fresh topic;
    the third has its queue time stuck at 7000 ms; the first terminates with a reason at the end."""
    topic = create_topic(stack.kafka_bootstrap)
    begin = (time.time_ns() // (60 * S)) * 60 * S - PUSHES * INTERVAL_S * S
    clients = [
        SyntheticClient(f"p-{max(i - 1, 0)}", started_ns=begin - 3 * S, seed=i + 1, partitions=4,
                        queue_time_max_ms=7000.0 if i == 2 else None)
        for i in range(4)
    ]
    records = []
    for k in range(PUSHES):
        last = k == PUSHES - 1
        for c in clients:
            records.append(c.push(begin + k * INTERVAL_S * S + S, terminating=last and c is clients[0],
                                  reason="Producer closed by application"))
    produce(stack.kafka_bootstrap, topic, records)
    created: list[str] = [topic]
    yield {"topic": topic, "clients": clients, "bootstrap": stack.kafka_bootstrap, "created": created}
    delete_topics(stack.kafka_bootstrap, created)


RULE = {"name": "producer-queue-latency", "metric": PREFIX + "producer.record.queue.time.max", "field": "max",
        "op": ">", "threshold": 5000, "forSeconds": 180}


def totals(rows: list[dict[str, Any]], metric: str, field: str) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for r in rows:
        if r["metric"] == metric and r[field] is not None:
            out[r["client_instance_id"]] += r[field]
    return dict(out)


def test_batch_run_matches_the_clients_own_counts(telemetry: dict[str, Any], tmp_path: Path) -> None:
    """Given 360 pushes in a topic,
    When `kct aggregate --mode batch` runs in local mode,
    Then per instance the summed per-window deltas of records sent equal the client's own count, the
    latency histograms' counts equal the observations made, roll-ups sum the instances of p-0, the
    terminating push is a termination with its reason, only the stuck producer raises the alert, and the
    aggregates topic holds one JSON record per client_metrics row."""
    out = tmp_path / "out"
    aggregates_topic = create_topic(telemetry["bootstrap"], prefix="kct-agg-e2e-out")
    telemetry["created"].append(aggregates_topic)
    config = write_config(tmp_path / "job.yaml", telemetry["topic"], out, mode="batch", rules=[RULE], extra={
        "kafkaOutput": {"bootstrapServers": "${KAFKA_BOOTSTRAP_SERVERS}", "topic": aggregates_topic}})
    log = run_aggregation(telemetry["bootstrap"], config)
    assert "points=" in log
    clients: list[SyntheticClient] = telemetry["clients"]
    metrics = read_table(out, "client_metrics")
    sent = totals(metrics, PREFIX + "producer.record.sent.total", "delta")
    assert sent == {c.instance_id: float(c.records_sent) for c in clients}
    observed = totals(metrics, PREFIX + "client.request.rtt", "count")
    assert observed == {c.instance_id: float(sum(c.latency_buckets)) for c in clients}
    per_partition = totals(metrics, PREFIX + "producer.partition.record.sent.total", "delta")
    assert per_partition == {c.instance_id: float(sum(c.partition_sent)) for c in clients}

    rollups = read_table(out, "rollups")
    p0 = sum(r["delta"] for r in rollups if r["dimension"] == "client_id" and r["dimension_value"] == "p-0"
             and r["metric"] == PREFIX + "producer.record.sent.total")
    assert p0 == clients[0].records_sent + clients[1].records_sent

    (ended,) = read_table(out, "terminations")
    assert (ended["client_instance_id"], ended["reason"]) == (clients[0].instance_id, "Producer closed by application")

    alerts = read_table(out, "alerts")
    assert alerts and {a["client_instance_id"] for a in alerts} == {clients[2].instance_id}
    assert all(a["breach_seconds"] > 180 and a["value"] == 7000.0 for a in alerts)

    published = consume_json(telemetry["bootstrap"], aggregates_topic, len(metrics))
    assert len(published) == len(metrics)
    assert {r["client_instance_id"] for r in published} == {c.instance_id for c in clients}


def test_streaming_run_stops_when_drained_and_agrees_with_batch(telemetry: dict[str, Any], tmp_path: Path) -> None:
    """Given the same topic,
    When the job runs as Structured Streaming with the availableNow trigger (stop once drained),
    Then it stops by itself, and every window it finalized equals the batch result for that window."""
    stream_out, batch_out = tmp_path / "stream", tmp_path / "batch"
    run_aggregation(telemetry["bootstrap"],
                    write_config(tmp_path / "stream.yaml", telemetry["topic"], stream_out, mode="stream"))
    run_aggregation(telemetry["bootstrap"],
                    write_config(tmp_path / "batch.yaml", telemetry["topic"], batch_out, mode="batch"))

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return (r["client_instance_id"], r["metric"], r["attributes_key"], r["window_start"])

    streamed = {key(r): r for r in read_table(stream_out, "client_metrics")}
    batch = {key(r): r for r in read_table(batch_out, "client_metrics")}
    assert len(streamed) >= len(batch) // 3  # windows older than watermark + look-back are final
    assert set(streamed) <= set(batch)
    for k, row in streamed.items():
        for field in ("points", "delta", "value_last", "value_max", "count", "p50"):
            assert row[field] == pytest.approx(batch[k][field]), (k, field)
    assert read_table(stream_out, "terminations")  # the stream's micro-batches wrote the terminations
