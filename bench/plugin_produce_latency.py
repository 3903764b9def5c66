#!/usr/bin/env python3
"""Produce latency with the broker plugin forwarding, with its endpoint down, and without the plugin.

What it does (all on loopback, nothing else on the machine is touched):

1. Starts its own single-node KRaft broker *with* the plugin (dev/stack/kafka_broker.py, state under
   build/bench/, ports 39092/39093 so it never collides with `make stack-up`), pointed at an HTTP sink
   this script runs. A CLIENT_METRICS subscription asks every client for all metrics every 100 ms
   (the broker's minimum), and `--telemetry-clients` idle producers push on top of the measured one,
   so the plugin forwards a few hundred pushes per second (KIP-714's sizing example is ~14 per broker).
2. Mode "plugin, endpoint live": `--messages` sequential produce requests (acks=all, 100-byte values,
   one in flight), latency = produce() to delivery report.
3. Mode "plugin, endpoint down": the sink is shut down (connection refused), same measurement, then a
   `--soak-seconds` soak (default 60 s) producing and consuming continuously to show the broker keeps
   serving produce and fetch while every push fails.
4. Mode "no plugin": the broker is restarted on the same data without `metric.reporters` (so it does
   not advertise the telemetry APIs and clients do not push at all), same measurement.

    .venv/bin/python bench/plugin_produce_latency.py [--messages 3000] [--soak-seconds 60]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import shutil
import socket
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing.sharedctypes import Synchronized
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, Producer
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "dev" / "stack"))
import kafka_broker  # noqa: E402  (dev/stack is not a package)

STATE = REPO / "build" / "bench" / "plugin-latency"
PORT, CONTROLLER_PORT, SINK_PORT = 39092, 39093, 39318
BOOTSTRAP = f"127.0.0.1:{PORT}"
SINK_URL = f"http://127.0.0.1:{SINK_PORT}/v1/metrics"


def _serve_sink(counter: Synchronized[int]) -> None:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with counter.get_lock():
                counter.value += 1
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", SINK_PORT), Handler)
    server.daemon_threads = True
    server.serve_forever()


def plugin_counters() -> dict[str, float]:
    """forwarded/dropped/failed... totals of the broker's plugin, read over JMX; {} if unavailable."""
    return kafka_broker.plugin_counters(STATE)


def _show_counters(when: str, c: dict[str, float]) -> None:
    keys = ("forwarded-total", "dropped-total", "dropped-queue-full-total", "dropped-expired-total",
            "failed-total", "retries-total", "endpoint-unavailable-total", "queue-depth", "send-latency-avg",
            "send-latency-max")
    print(f"plugin JMX {when}: " + ", ".join(f"{k}={c[k]:.1f}" for k in keys if k in c), flush=True)


class Sink:
    """The OTLP/HTTP endpoint the plugin forwards to: answers 200 and counts.

    A separate process, so it neither competes for the measuring loop's GIL nor survives `stop()`:
    killing it closes the plugin's keep-alive connections too (an in-process server's shutdown() would
    leave them served, and the endpoint would not really be down).
    """

    def __init__(self) -> None:
        self.counter: Synchronized[int] = multiprocessing.Value("q", 0)
        self.process: multiprocessing.Process | None = None

    @property
    def pushes(self) -> int:
        return int(self.counter.value)

    def start(self) -> None:
        self.process = multiprocessing.Process(target=_serve_sink, args=(self.counter,), daemon=True)
        self.process.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", SINK_PORT), timeout=0.2):
                return
            time.sleep(0.05)
        raise RuntimeError(f"sink did not listen on {SINK_PORT}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.join()
            self.process = None


@dataclass(frozen=True)
class Result:
    mode: str
    samples: list[float]
    pushes_per_s: float | None

    def pct(self, q: float) -> float:
        ordered = sorted(self.samples)
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(topic: str, messages: int, warmup: int = 300) -> list[float]:
    """Sequential acks=all produce latency in ms (one message in flight, so each sample is a round trip)."""
    producer = Producer({"bootstrap.servers": BOOTSTRAP, "acks": "all", "linger.ms": 0,
                         "client.id": "bench-measured"})
    samples: list[float] = []
    value = b"x" * 100
    try:
        for i in range(warmup + messages):
            done: list[float] = []

            def on_delivery(err: KafkaError | None, _msg: Message, done: list[float] = done) -> None:
                if err is not None:
                    raise RuntimeError(f"delivery failed: {err}")
                done.append(time.perf_counter())

            started = time.perf_counter()
            producer.produce(topic, value, on_delivery=on_delivery)
            while not done:
                producer.poll(0.05)
            if i >= warmup:
                samples.append((done[0] - started) * 1000)
    finally:
        producer.flush(10)
        producer.close()
    return samples


@contextlib.contextmanager
def telemetry_clients(count: int) -> Iterator[None]:
    """Idle producers that only push telemetry (when the broker advertises it)."""
    clients = [Producer({"bootstrap.servers": BOOTSTRAP, "client.id": f"bench-telemetry-{i}"}) for i in range(count)]
    try:
        yield
    finally:
        for c in clients:
            c.close()


def subscribe_all_metrics() -> None:
    admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP, client_id="bench-admin")
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.CLIENT_METRICS, "bench-all",
                                            {"metrics": "*", "interval.ms": "100"})])
    finally:
        admin.close()


def soak(seconds: float, topic: str, rate: float = 500.0) -> dict[str, float]:
    """Produce (acks=all, `rate` messages/s) and consume continuously; count what went through and errors."""
    producer = Producer({"bootstrap.servers": BOOTSTRAP, "acks": "all", "client.id": "bench-soak-producer"})
    consumer = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": f"bench-soak-{uuid.uuid4().hex[:6]}",
                         "client.id": "bench-soak-consumer", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    delivered = errors = consumed = 0

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        nonlocal delivered, errors
        if err is None:
            delivered += 1
        else:
            errors += 1

    started = time.monotonic()
    sent = 0
    while (now := time.monotonic()) < started + seconds:
        while sent < (now - started) * rate:
            producer.produce(topic, b"soak", on_delivery=on_delivery)
            sent += 1
        producer.poll(0)
        msg = consumer.poll(0.005)
        if msg is not None:
            if msg.error() is None:
                consumed += 1
            else:
                errors += 1
    producer.flush(10)
    for _ in range(50):  # read what is left
        msg = consumer.poll(0.1)
        if msg is not None and msg.error() is None:
            consumed += 1
    producer.close()
    consumer.close()
    return {"delivered": delivered, "consumed": consumed, "errors": errors}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=3000, help="measured messages per mode")
    parser.add_argument("--rounds", type=int, default=3, help="live/down alternations (each messages/rounds)")
    parser.add_argument("--warmup", type=int, default=2000, help="unmeasured messages after each broker start")
    parser.add_argument("--telemetry-clients", type=int, default=20)
    parser.add_argument("--soak-seconds", type=float, default=60)
    args = parser.parse_args()

    shutil.rmtree(STATE, ignore_errors=True)
    kafka_broker.install()
    sink = Sink()
    live: list[float] = []
    down: list[float] = []
    none: list[float] = []
    forwarded = 0
    live_seconds = 0.0
    per_round = max(1, args.messages // args.rounds)
    try:
        sink.start()
        kafka_broker.up(STATE, SINK_URL, port=PORT, controller_port=CONTROLLER_PORT)
        subscribe_all_metrics()
        with telemetry_clients(args.telemetry_clients):
            time.sleep(3)  # let every client fetch its subscription
            measure("bench", args.warmup, warmup=0)
            for _ in range(args.rounds):
                before, t0 = sink.pushes, time.monotonic()
                live += measure("bench", per_round, warmup=50)
                forwarded += sink.pushes - before
                live_seconds += time.monotonic() - t0
                sink.stop()
                time.sleep(1)
                down += measure("bench", per_round, warmup=50)
                sink.start()
                time.sleep(1)
            _show_counters("after the live/down rounds", plugin_counters())
            sink.stop()
            print(f"soak: endpoint down for {args.soak_seconds:.0f}s while producing (500 msg/s, acks=all) "
                  "and consuming ...", flush=True)
            soaked = soak(args.soak_seconds, "bench-soak")
            print(f"soak: delivered={soaked['delivered']:.0f} consumed={soaked['consumed']:.0f} "
                  f"errors={soaked['errors']:.0f}", flush=True)
            _show_counters("after the soak", plugin_counters())
        kafka_broker.down(STATE)

        kafka_broker.up(STATE, SINK_URL, plugin=False, port=PORT, controller_port=CONTROLLER_PORT)
        with telemetry_clients(args.telemetry_clients):
            time.sleep(3)
            measure("bench", args.warmup, warmup=0)
            for _ in range(args.rounds):
                none += measure("bench", per_round, warmup=50)
    finally:
        sink.stop()
        kafka_broker.down(STATE)

    results = [Result("plugin, endpoint live", live, forwarded / live_seconds),
               Result("plugin, endpoint down", down, 0.0), Result("no plugin", none, None)]
    log = (STATE / "logs" / "kafka.log").read_text(errors="replace")
    print()
    print(f"produce latency: acks=all, 100 B values, one message in flight, {len(live)} samples per mode, "
          f"{args.telemetry_clients} idle clients + the measured one pushing all metrics every 100 ms")
    print(f"{'mode':<24} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'max ms':>8} {'pushes/s forwarded':>19}")
    for r in results:
        shown = "-" if r.pushes_per_s is None else f"{r.pushes_per_s:.0f}"
        print(f"{r.mode:<24} {r.pct(0.5):8.2f} {r.pct(0.99):8.2f} {statistics.fmean(r.samples):8.2f} "
              f"{max(r.samples):8.2f} {shown:>19}")
    print("plugin warnings in the broker log (rate-limited to one per 30 s):")
    for line in log.splitlines():
        if "WARN" in line and "dev.kct" in line:
            print("  " + line[:200])
    return 0


if __name__ == "__main__":
    sys.exit(main())
