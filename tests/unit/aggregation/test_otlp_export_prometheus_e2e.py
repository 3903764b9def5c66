"""The batch job's OTLP export into a real Prometheus (its OTLP receiver), checked with PromQL against the
Parquet the same run wrote; and an endpoint that is down, which the job retries boundedly and counts without
failing. Loopback processes only: the Prometheus of dev/stack/prometheus.py and the tests' local Spark (the
records are handed to the job as a DataFrame, as the topic would give them: no Kafka broker, no kube stack)."""

from __future__ import annotations

import datetime as dt
import json
import math
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from script_loader import load_script

from kct.aggregation.batch import run_batch
from kct.aggregation.config import AggregationConfig, parse_job_config
from kct.aggregation.outputs import export_status_path
from kct.aggregation.synthetic import PREFIX, SyntheticClient

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

prometheus_stack = load_script(Path(__file__).resolve().parents[3] / "dev" / "stack" / "prometheus.py")

S = 1_000_000_000
CLIENTS = 3
PUSHES = 30  # every 10 s: 5 one-minute windows, all ended a minute before the test runs


@pytest.fixture(scope="module")
def prometheus() -> Iterator[Any]:
    with prometheus_stack.started() as server:
        yield server


def _records(spark: Any) -> tuple[Any, list[SyntheticClient]]:
    """CLIENTS producers pushing every 10 s for 5 minutes that ended at the last minute boundary but one."""
    from kct.aggregation.decode import RAW_SCHEMA_DDL

    end = (time.time_ns() // (60 * S) - 1) * 60 * S
    begin = end - PUSHES * 10 * S
    clients = [SyntheticClient(f"p-{i}", started_ns=begin - 3 * S, seed=i + 1) for i in range(CLIENTS)]
    rows = []
    for k in range(PUSHES):
        for c in clients:
            record = c.push(begin + k * 10 * S + S)
            stamp = dt.datetime.fromtimestamp((begin + k * 10 * S + S) / S, tz=dt.UTC)
            rows.append((record.key, record.value, "client-telemetry", 0, len(rows), stamp, record.headers))
    return spark.createDataFrame(rows, RAW_SCHEMA_DDL), clients


def _config(tmp_path: Path, endpoint: str, **export: Any) -> AggregationConfig:
    """The batch job's config; each test's series under a `job` of its own (the resource's service.name)."""
    return parse_job_config({
        "source": {"bootstrapServers": "unused:9092"}, "parquet": {"path": str(tmp_path / "aggregates")},
        "run": {"mode": "batch"},
        "export": {"endpoint": endpoint, "resourceAttributes": {"service.name": _job(tmp_path)}, **export},
    })


def _job(tmp_path: Path) -> str:
    return f"kct-e2e-{tmp_path.name}"


def _value(prometheus: Any, promql: str, at: float) -> float:
    (sample,) = prometheus.query(promql, at=at)
    return float(sample["value"][1])


def test_per_client_series_in_prometheus_equal_the_parquet_aggregates(
        jvm_decoder: Any, prometheus: Any, tmp_path: Path) -> None:
    """Given 3 producers' pushes over 5 minutes,
    When the batch job aggregates them and exports to Prometheus's OTLP receiver,
    Then for every client and window, PromQL at the window's end returns the Parquet row's values: the queue
    time gauge (milliseconds), the records-sent counter (the client's cumulative count), the per-broker latency
    (node_id kept by the default labels) and the request-time p95; and the export's own counters say nothing
    failed or was dropped."""
    spark = jvm_decoder
    records, clients = _records(spark)
    cfg = _config(tmp_path, prometheus.otlp_metrics_url)

    counts = run_batch(spark, cfg, records)

    assert counts["client_metrics"] > 0
    rows = spark.read.parquet(f"{cfg.parquet.path}/client_metrics").collect()
    windows = sorted({r["window_end"] for r in rows})
    assert len(windows) >= 5
    job = _job(tmp_path)
    checked = 0
    for r in rows:
        at = r["window_end"].timestamp()
        selector = f'job="{job}",client_instance_id="{r["client_instance_id"]}"'
        if r["metric"] == PREFIX + "producer.record.queue.time.max":
            promql = f"kafka_producer_record_queue_time_max_milliseconds{{{selector}}}"
            expected = r["value_last"]
        elif r["metric"] == PREFIX + "producer.record.sent.total":
            promql = f"kafka_producer_record_sent_total{{{selector}}}"
            expected = r["value_last"]
        elif r["metric"] == PREFIX + "producer.node.request.latency.avg":
            node = r["attributes"]["node_id"]
            promql = f'kafka_producer_node_request_latency_avg_milliseconds{{{selector},node_id="{node}"}}'
            expected = r["value_last"]
        elif r["metric"] == PREFIX + "client.request.rtt" and r["p95"] is not None:
            promql = f'kafka_client_request_rtt_milliseconds{{{selector},quantile="0.95"}}'
            expected = r["p95"]
        else:
            continue
        assert math.isclose(_value(prometheus, promql, at), expected, rel_tol=1e-12), (promql, at)
        checked += 1
    # 3 clients x 5+ windows x (1 + 1 + 3 brokers + 1) series at least
    assert checked >= CLIENTS * 5 * 6
    series = prometheus.api("series", **{"match[]": f'{{__name__=~"kafka_.+",job="{job}"}}',
                                         "start": f"{windows[0].timestamp() - 60}"})
    # Per client, and per workload: the synthetic clients have no pod, so one unattributed workload, whose
    # series have neither an instance id nor workload labels and count every client.
    assert {s.get("client_instance_id") for s in series} == {*(c.instance_id for c in clients), None}
    assert all("client_source_address" not in s and "principal" not in s for s in series)
    instances = f'kct_aggregation_workload_instances{{job="{job}",k8s_workload_name=""}}'
    assert _value(prometheus, instances, windows[-1].timestamp()) == CLIENTS
    now = time.time()
    assert _value(prometheus, f'max(kct_aggregation_export_failures_total{{job="{job}"}})', now) == 0
    assert _value(prometheus, f'max(kct_aggregation_export_series_dropped_total{{job="{job}"}})', now) == 0
    status = json.loads(Path(export_status_path(cfg)).read_text())
    assert (status["windows_failed"], status["windows_sent"]) == (0, len(windows))


def test_a_second_run_over_the_same_windows_does_not_double_a_counter(
        jvm_decoder: Any, prometheus: Any, tmp_path: Path) -> None:
    """Given the job run twice over the same pushes (a replay), When the counter is read at each window's end,
    Then it equals the Parquet value once, not twice (the same sample was sent again and not added)."""
    spark = jvm_decoder
    records, _ = _records(spark)
    cfg = _config(tmp_path, prometheus.otlp_metrics_url)
    run_batch(spark, cfg, records)
    run_batch(spark, cfg, records)
    rows = [r for r in spark.read.parquet(f"{cfg.parquet.path}/client_metrics").collect()
            if r["metric"] == PREFIX + "producer.record.sent.total"]
    assert len(rows) >= CLIENTS * 5
    job = _job(tmp_path)
    for r in rows:
        at = r["window_end"].timestamp()
        promql = f'kafka_producer_record_sent_total{{job="{job}",client_instance_id="{r["client_instance_id"]}"}}'
        assert _value(prometheus, promql, at) == r["value_last"]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port  # closed again when the socket is: nothing listens there


def test_an_endpoint_that_is_down_is_retried_boundedly_and_counted_without_failing_the_job(
        jvm_decoder: Any, tmp_path: Path) -> None:
    """Given an export endpoint nothing listens on, 2 attempts per window,
    When the batch job runs, Then it writes its tables as usual, and the export's status counts every window
    as failed (2 attempts each) with the connection error."""
    spark = jvm_decoder
    records, _ = _records(spark)
    cfg = _config(tmp_path, f"http://127.0.0.1:{_closed_port()}/v1/metrics", maxAttempts=2, backoffSeconds=0.05,
                  timeoutSeconds=2)

    counts = run_batch(spark, cfg, records)

    windows = {r["window_end"] for r in spark.read.parquet(f"{cfg.parquet.path}/client_metrics").collect()}
    assert counts["client_metrics"] > 0
    status = json.loads(Path(export_status_path(cfg)).read_text())
    assert (status["windows_sent"], status["windows_failed"]) == (0, len(windows))
    assert status["requests_failed"] == 2 * len(windows)
    assert "refused" in status["last_error"].lower()


def test_the_stream_exports_each_finalized_window_once_per_batch_even_when_replayed(
        jvm_decoder: Any, prometheus: Any, tmp_path: Path) -> None:
    """Given the streaming job's foreachBatch with an export, micro-batch 0 (windows 0 and 1) and micro-batch 1
    (window 2, which finalizes window 1), batch 1 run twice (a replay),
    When Prometheus is queried at each finalized window's end, Then it returns the Parquet row's value, and the
    export's status counts each finalized window once."""
    from aggregation_helpers import T0, point, records_df

    from kct.aggregation.config import RunConfig, WindowConfig
    from kct.aggregation.stream_writer import metrics_batch_writer

    spark = jvm_decoder
    base = (time.time_ns() // (60 * S) - 5) * 60 - T0 // S  # seconds after T0 of a minute 5 minutes ago
    cfg = _config(tmp_path, prometheus.otlp_metrics_url).model_copy(update={
        "run": RunConfig(checkpoint_path=str(tmp_path / "checkpoints")),
        "window": WindowConfig(size_seconds=60, watermark_seconds=0)})
    qtime = PREFIX + "producer.record.queue.time.max"
    write = metrics_batch_writer(spark, cfg)
    write(records_df(spark, [point(qtime, base + t, 1.0 + t) for t in (10, 40, 70, 100)]), 0)
    second = records_df(spark, [point(qtime, base + t, 1.0 + t) for t in (130, 160)])
    write(second, 1)
    write(second, 1)

    rows = spark.read.parquet(f"{cfg.parquet.path}/client_metrics").collect()
    assert len(rows) == 2
    job = _job(tmp_path)
    for r in rows:
        promql = f'kafka_producer_record_queue_time_max_milliseconds{{job="{job}",client_instance_id="inst-1"}}'
        assert _value(prometheus, promql, r["window_end"].timestamp()) == r["value_last"]
    status = json.loads(Path(export_status_path(cfg)).read_text())
    assert (status["windows_sent"], status["windows_failed"]) == (2, 0)
