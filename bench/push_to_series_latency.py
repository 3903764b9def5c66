#!/usr/bin/env python3
"""End to end: a push answered 200 by the receiver -> its window's series queryable in Prometheus.

    .venv/bin/python bench/push_to_series_latency.py [--clients 4] [--interval 1] [--windows 6]
        [--window 10] [--watermark 20] [--trigger 10]

Every part runs as it does in production, as local processes on free loopback ports: a Kafka broker (the
stack's release, started as bench/receiver_slow_senders.py starts it), `kct receiver` writing to it, the
aggregation job in Structured Streaming (`kct aggregate`, its own Spark JVM, `local[2]`) reading that topic
and exporting each finalized window over OTLP, and the Prometheus of dev/stack/prometheus.py with its OTLP
receiver on. The defaults are the demo's (examples/demo/telemetryreceiver.yaml: 10 s windows, a 20 s
watermark, a 10 s trigger).

`--clients` synthetic producers (kct.aggregation.synthetic) push every `--interval` seconds with the headers
the broker's plugin adds (posted to the receiver as the plugin posts them; the plugin's own leg, produce ->
POST, is bench/plugin_produce_latency.py's). Each 200 is timed. Prometheus is polled (every 0.1 s) for the
newest window end of the clients' series; a window is visible when every client's series has a sample stamped
with its end. Printed per window, then p50 / max over the windows measured:

  window end -> visible   what the watermark, the trigger and the micro-batch add to a window's end
  push -> visible         from each push's 200 to its window's series (the window's first pushes wait longest)

Windows that ended before the first window became visible are left out (the job's JVM start, not the flow).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "dev" / "stack"))
sys.path.insert(0, str(REPO / "bench"))

import _proc  # noqa: E402  (dev/stack)
import prometheus  # noqa: E402  (dev/stack)
import receiver_slow_senders as local  # noqa: E402  (its broker, topic and receiver helpers)

S = 1_000_000_000
JOB = "kct-push-to-series"  # the export's service.name: the series' `job`
SERIES = "kafka_producer_record_queue_time_max_milliseconds"  # one series per client and window


@dataclass
class Pushes:
    """Each push's 200 time (wall clock, s) by the window end (s) its data point falls in; failures counted."""

    window_s: int
    answered: dict[int, list[float]] = field(default_factory=dict)
    failed: int = 0

    def add(self, point_s: float, answered_s: float) -> None:
        end = (int(point_s) // self.window_s + 1) * self.window_s
        self.answered.setdefault(end, []).append(answered_s)


def _post(port: int, body: bytes, headers: list[tuple[str, bytes]]) -> int:
    from kct.otlp import labels as L

    by_name = {label.name: label.http_header for label in L.BROKER_LABELS}
    http = {by_name[name]: L.encode_header_value(value.decode()) for name, value in headers if name in by_name}
    http.update({"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {local.TOKEN}"})
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/metrics", data=body, headers=http, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def push_until(stop: threading.Event, port: int, clients: int, interval_s: float, pushes: Pushes) -> None:
    """`clients` producers pushing every `interval_s` until `stop`; each push's data points stamped now."""
    from kct.aggregation.synthetic import SyntheticClient

    fleet = [SyntheticClient(f"bench-producer-{i}", started_ns=time.time_ns(), seed=i + 1) for i in range(clients)]
    next_at = time.monotonic()
    while not stop.is_set():
        for client in fleet:
            now_ns = time.time_ns()
            record = client.push(now_ns)
            status = _post(port, record.value, record.headers)
            if status == 200:
                pushes.add(now_ns / S, time.time())
            else:
                pushes.failed += 1
        next_at += interval_s
        stop.wait(max(0.0, next_at - time.monotonic()))  # duration: the push interval


@contextlib.contextmanager
def aggregation_job(workdir: Path, bootstrap: str, topic: str, endpoint: str, window_s: int, watermark_s: int,
                    trigger_s: int) -> Iterator[subprocess.Popen[bytes]]:
    """`kct aggregate` in stream mode with the export to `endpoint`; SIGTERM to its process group on exit."""
    config = {
        "source": {"bootstrapServers": bootstrap, "topic": topic},
        "parquet": {"path": str(workdir / "aggregates")},
        "window": {"sizeSeconds": window_s, "watermarkSeconds": watermark_s, "counterLookbackWindows": 3},
        "run": {"mode": "stream", "triggerSeconds": trigger_s},
        "spark": {"master": "local[2]", "shufflePartitions": 2, "conf": {"spark.ui.enabled": "false"}},
        "export": {"endpoint": endpoint, "resourceAttributes": {"service.name": JOB}},
    }
    path = workdir / "aggregation.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    log = workdir / "aggregation.log"
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "kct.cli", "aggregate", "--config", str(path)],
                                   env=dict(os.environ, SPARK_LOCAL_IP="127.0.0.1"), stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield process
    finally:
        _proc.stop_group(process, timeout=60)


def visible_windows(server: prometheus.PrometheusServer, clients: int, windows: int,
                    job: subprocess.Popen[bytes], log: Path, timeout_s: float) -> dict[int, float]:
    """Window end (s) -> when every client's series had a sample stamped with it, polled every 0.1 s, until
    `windows` windows that ended after the first visible one are visible."""
    seen: dict[int, float] = {}
    first: float | None = None
    deadline = time.monotonic() + timeout_s
    # Every client series' samples of the last 5 minutes (a range selector: a window exported in the same
    # micro-batch as the next one is seen too, not hidden behind it as the newest sample would hide it).
    query = f'{SERIES}{{job="{JOB}",client_instance_id!=""}}[5m]'
    while time.monotonic() < deadline:
        if job.poll() is not None:
            raise RuntimeError(f"the aggregation job exited {job.returncode}: {log.read_text()[-3000:]}")
        now = time.time()
        series_at: dict[int, int] = {}
        for series in server.query(query):
            for stamp, _ in series["values"]:
                series_at[round(float(stamp))] = series_at.get(round(float(stamp)), 0) + 1
        for end, count in series_at.items():
            if end not in seen and count >= clients:
                seen[end] = now
                first = now if first is None else first
        measured = [end for end in seen if first is not None and end > first]
        if len(measured) >= windows:
            return seen
        time.sleep(0.1)  # duration: the poll interval
    raise RuntimeError(f"{len(seen)} windows visible after {timeout_s:.0f} s; the job's log: {log}")


def _p50_max(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} / {max(values):.1f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between a client's pushes")
    parser.add_argument("--windows", type=int, default=6, help="windows to measure")
    parser.add_argument("--window", type=int, default=10, help="window size, seconds (the demo's)")
    parser.add_argument("--watermark", type=int, default=20, help="watermark, seconds (the demo's)")
    parser.add_argument("--trigger", type=int, default=10, help="micro-batch trigger, seconds (the demo's)")
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args()

    print(f"{args.clients} clients pushing every {args.interval:g} s; windows {args.window} s, watermark "
          f"{args.watermark} s, trigger {args.trigger} s; {os.cpu_count()} cores, load "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    pushes = Pushes(args.window)
    with tempfile.TemporaryDirectory(prefix="kct-push-to-series-") as tmp:
        workdir = Path(tmp)
        port = local.free_port()
        topic = "kct-push-to-series"
        with local.kafka_broker_on_free_ports(workdir) as bootstrap, prometheus.started() as server:
            local.create_topic(bootstrap, topic)
            with local.receiver_process(workdir, bootstrap, topic, port), \
                    aggregation_job(workdir, bootstrap, topic, server.otlp_metrics_url, args.window,
                                    args.watermark, args.trigger) as job:
                stop = threading.Event()
                pusher = threading.Thread(target=push_until, args=(stop, port, args.clients, args.interval, pushes),
                                          daemon=True)
                pusher.start()
                try:
                    seen = visible_windows(server, args.clients, args.windows, job,
                                           workdir / "aggregation.log", args.timeout)
                finally:
                    stop.set()
                    pusher.join(timeout=30)
    first = min(seen.values())
    measured = sorted(end for end in seen if end > first)
    end_to_visible, push_to_visible = [], []
    print("window end (UTC)   pushes  window end -> visible  push -> visible (min..max)")
    for end in measured:
        answered = pushes.answered.get(end, [])
        lags = [seen[end] - t for t in answered]
        end_to_visible.append(seen[end] - end)
        push_to_visible += lags
        print(f"{time.strftime('%H:%M:%S', time.gmtime(end)):>16}  {len(answered):>6}  {seen[end] - end:>20.1f} s  "
              f"{min(lags, default=float('nan')):.1f}..{max(lags, default=float('nan')):.1f} s")
    print(f"window end -> series visible, p50 / max over {len(measured)} windows: {_p50_max(end_to_visible)}")
    print(f"push (200) -> series visible, p50 / max over {len(push_to_visible)} pushes: "
          f"{_p50_max(push_to_visible)}")
    print(f"pushes refused: {pushes.failed}")
    return 0 if pushes.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
