#!/usr/bin/env python3
"""Receiver throughput: ~10 KB OTLP pushes of ~100 data points over keep-alive connections.

    # against the real local Kafka (the stack: `set -a; . build/stack.env; set +a` or KAFKA_BOOTSTRAP_SERVERS)
    .venv/bin/python bench/receiver_throughput.py --seconds 20 --connections 32
    # the same pipeline with an in-memory sink (HTTP + pipeline cost only, no Kafka)
    .venv/bin/python bench/receiver_throughput.py --sink memory
    # the HTTP server choice: aiohttp vs a bare asyncio protocol, both answering 200 without work
    .venv/bin/python bench/receiver_throughput.py --compare-http

The receiver runs as a separate process (`kct receiver --config ...`, or an equivalent with a memory sink);
this script is the load generator: raw asyncio sockets with pre-built requests, so it costs far less CPU
than the server. Each push carries the broker plugin's headers with a distinct client instance id (the
rate limiter tracks every one of them, as with a large fleet). Figures printed: pushes/s, data points/s,
both per core of receiver CPU (user + system time of the receiver process, all threads, librdkafka's
included), latency p50/p99, receiver RSS (current and peak), and the status codes seen.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "operator"))

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (  # noqa: E402
    ExportMetricsServiceRequest,
)

CLK_TCK = os.sysconf("SC_CLK_TCK")

METRIC_NAMES = [
    "org.apache.kafka.producer.record.queue.time.avg",
    "org.apache.kafka.producer.record.queue.time.max",
    "org.apache.kafka.producer.request.latency.avg",
    "org.apache.kafka.producer.request.latency.max",
    "org.apache.kafka.producer.queue.bytes",
    "org.apache.kafka.producer.queue.messages",
    "org.apache.kafka.producer.partition.queue.bytes",
    "org.apache.kafka.producer.partition.queue.latency.avg",
    "org.apache.kafka.producer.partition.record.retries",
    "org.apache.kafka.producer.partition.record.failures",
]


def build_push(points: int = 100, spoil: str = "") -> bytes:
    """A KIP-714-like push: librdkafka resource labels, 10 metrics x `points/10` points with attributes.
    `spoil`: "invalid-point" makes the first point valueless (partial success: rejected), "private-attribute"
    adds a private key to the resource (dropped): either way the receiver decodes and rewrites the push."""
    req = ExportMetricsServiceRequest()
    rm = req.resource_metrics.add()
    for key, value in (
        ("client_rack", "rack-a"),
        ("group_id", "bench-group"),
        ("transactional_id", ""),
        ("service.name", "bench-producer"),
    ):
        kv = rm.resource.attributes.add()
        kv.key, kv.value.string_value = key, value
    if spoil == "private-attribute":
        kv = rm.resource.attributes.add()
        kv.key, kv.value.string_value = "host.name", "bench-host"
    sm = rm.scope_metrics.add()
    sm.scope.name = "librdkafka"
    sm.scope.version = "2.16.0"
    per_metric = max(1, points // len(METRIC_NAMES))
    now = time.time_ns()
    for m_index, name in enumerate(METRIC_NAMES):
        metric = sm.metrics.add()
        metric.name = name
        metric.description = "bench metric"
        metric.unit = "1"
        dps = metric.sum.data_points if m_index % 2 else metric.gauge.data_points
        if m_index % 2:
            metric.sum.aggregation_temporality = 2
            metric.sum.is_monotonic = True
        for p in range(per_metric):
            dp = dps.add()
            dp.start_time_unix_nano = now - 60_000_000_000
            dp.time_unix_nano = now
            dp.as_double = p * 1.5 + m_index
            for key, value in (("topic", f"orders-{p % 4}"), ("partition", str(p)), ("node_id", str(p % 3))):
                kv = dp.attributes.add()
                kv.key, kv.value.string_value = key, value
    if spoil == "invalid-point":
        sm.metrics[0].gauge.data_points[0].ClearField("as_double")
    return bytes(req.SerializeToString())


# -- load generator -------------------------------------------------------------------------------------


def _request_bytes(body: bytes, encoding: str, token: str, instance_id: str) -> bytes:
    headers = [
        "POST /v1/metrics HTTP/1.1",
        "Host: bench",
        "Content-Type: application/x-protobuf",
        f"Content-Length: {len(body)}",
        f"Authorization: Bearer {token}",
        f"kct-client-instance-id: {instance_id}",
        "kct-client-id: bench-producer",
        "kct-client-software-name: librdkafka",
        "kct-client-software-version: 2.16.0",
        "kct-client-source-address: 10.0.0.7",
        "kct-client-source-port: 51234",
        "kct-principal: User:bench",
        "kct-broker-id: 1",
        "kct-terminating: false",
        "kct-push-interval-ms: 60000",
    ]
    if encoding:
        headers.append(f"Content-Encoding: {encoding}")
    return ("\r\n".join(headers) + "\r\n\r\n").encode() + body


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    if length:
        await reader.readexactly(length)
    return status


async def _connection(
    host: str, port: int, body: bytes, encoding: str, token: str, conn: int, deadline: float,
    latencies: list[float], statuses: dict[int, int],
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    i = 0
    try:
        while time.monotonic() < deadline:
            payload = _request_bytes(body, encoding, token, f"bench-{os.getpid()}-{conn}-{i}")
            i += 1
            started = time.perf_counter()
            writer.write(payload)
            status = await _read_response(reader)
            latencies.append(time.perf_counter() - started)
            statuses[status] = statuses.get(status, 0) + 1
            if status in (429, 503):
                await asyncio.sleep(0.05)
    finally:
        writer.close()


def _proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _proc_rss_mb(pid: int) -> tuple[float, float]:
    rss = hwm = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024
        elif line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) / 1024
    return rss, hwm


async def drive(
    host: str, port: int, pid: int, *, seconds: float, connections: int, body: bytes, encoding: str,
    token: str, warmup: float = 2.0,
) -> dict[str, float | dict[int, int]]:
    # Warm-up (connections, caches, producer) is not measured.
    if warmup:
        w_lat: list[float] = []
        w_st: dict[int, int] = {}
        end = time.monotonic() + warmup
        await asyncio.gather(*(
            _connection(host, port, body, encoding, token, 10_000 + c, end, w_lat, w_st) for c in range(connections)
        ))
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    own0 = time.process_time()
    cpu0, t0 = _proc_cpu_s(pid), time.monotonic()
    deadline = t0 + seconds
    await asyncio.gather(*(
        _connection(host, port, body, encoding, token, c, deadline, latencies, statuses) for c in range(connections)
    ))
    elapsed = time.monotonic() - t0
    cpu = _proc_cpu_s(pid) - cpu0
    own = time.process_time() - own0
    latencies.sort()
    ok = statuses.get(200, 0)
    rss, hwm = _proc_rss_mb(pid)

    def pct(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000 if latencies else 0.0

    return {
        "seconds": elapsed,
        "pushes_ok": ok,
        "pushes_per_s": ok / elapsed,
        "receiver_cpu_s": cpu,
        "receiver_cores_used": cpu / elapsed,
        "loadgen_cores_used": own / elapsed,
        "pushes_per_core_s": ok / cpu if cpu else 0.0,
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "rss_mb": rss,
        "rss_peak_mb": hwm,
        "statuses": statuses,
    }


# -- servers under test ---------------------------------------------------------------------------------

_MEMORY_SERVER = """
import asyncio, sys
sys.path.insert(0, {operator!r})
from kct.receiver.config import load_receiver_config
from kct.receiver.jsonlog import configure_logging
from kct.receiver.server import ReceiverServer
from kct.receiver.sink import MemorySink

class CountingSink(MemorySink):
    async def send(self, key, value, headers):
        self.count = getattr(self, "count", 0) + 1

cfg = load_receiver_config(sys.argv[1])
configure_logging("WARNING", "json")
asyncio.run(ReceiverServer(cfg, CountingSink(), token="bench-token").run_until_signalled())
"""

_BARE_HTTP = """
import asyncio
OK = b"HTTP/1.1 200 OK\\r\\nContent-Type: application/x-protobuf\\r\\nContent-Length: 0\\r\\n\\r\\n"
class P(asyncio.Protocol):
    def connection_made(self, t):
        self.t = t; self.buf = b""; self.need = -1
    def data_received(self, data):
        self.buf += data
        while True:
            if self.need < 0:
                i = self.buf.find(b"\\r\\n\\r\\n")
                if i < 0: return
                head = self.buf[:i].lower(); self.buf = self.buf[i + 4:]
                j = head.find(b"content-length:")
                k = head.find(b"\\r\\n", j)
                self.need = int(head[j + 15:k if k > 0 else None]) if j >= 0 else 0
            if len(self.buf) < self.need: return
            self.buf = self.buf[self.need:]; self.need = -1
            self.t.write(OK)
async def main():
    srv = await asyncio.get_running_loop().create_server(P, "127.0.0.1", {port})
    await srv.serve_forever()
asyncio.run(main())
"""

_AIOHTTP_TRIVIAL = """
from aiohttp import web
async def h(request):
    await request.read()
    return web.Response(body=b"", content_type="application/x-protobuf")
app = web.Application(client_max_size=1 << 20)
app.router.add_post("/v1/metrics", h)
web.run_app(app, host="127.0.0.1", port={port}, access_log=None, print=None, auto_decompress=False)
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, timeout: float = 30.0) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listening on {port}")


def _bench_config(port: int, sink: str, bootstrap: str | None, topic: str) -> dict[str, object]:
    return {
        "listen": {"host": "127.0.0.1", "port": port},
        "auth": {"bearerTokenEnv": "KCT_BENCH_TOKEN"},
        "quotas": {"enabled": True, "defaultByteRate": 1e12, "defaultPushRate": 1e9},
        "kafka": {"bootstrapServers": bootstrap or "unused:9092", "topic": topic,
                  # the local stack's broker creates the bench topic on first use (no operator here)
                  "producerProperties": {"linger.ms": 5, "allow.auto.create.topics": True}},
        "logging": {"level": "WARNING", "format": "json"},
        "limits": {"maxInflightRequests": 4096},
    }


def _start(cmd: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    # The receiver's log goes to a file: an unread pipe would fill up and block the receiver.
    log = tempfile.NamedTemporaryFile(prefix="kct-bench-receiver-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=log)
    proc.log_path = log.name  # type: ignore[attr-defined]
    log.close()
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> str:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    path = Path(proc.log_path)  # type: ignore[attr-defined]
    tail = path.read_text(errors="replace")[-2000:]
    path.unlink(missing_ok=True)
    return tail


def _print(title: str, figures: dict[str, float | dict[int, int]], points: int) -> None:
    print(f"\n== {title}")
    for key, value in figures.items():
        if isinstance(value, float):
            print(f"  {key:22s} {value:12.1f}")
        else:
            print(f"  {key:22s} {value}")
    if "pushes_per_s" in figures:
        pps, ppc = figures["pushes_per_s"], figures["pushes_per_core_s"]
        assert isinstance(pps, float) and isinstance(ppc, float)
        print(f"  {'points_per_s':22s} {pps * points:12.0f}")
        print(f"  {'points_per_core_s':22s} {ppc * points:12.0f}")


def compare_http(args: argparse.Namespace, body: bytes) -> None:
    env = dict(os.environ)
    for name, template in (("bare asyncio protocol", _BARE_HTTP), ("aiohttp (trivial handler)", _AIOHTTP_TRIVIAL)):
        port = _free_port()
        proc = _start([sys.executable, "-c", template.format(port=port)], env)
        try:
            _wait_port(port)
            figures = asyncio.run(drive("127.0.0.1", port, proc.pid, seconds=args.seconds,
                                        connections=args.connections, body=body, encoding="", token="x"))
        finally:
            _stop(proc)
        _print(name, figures, args.points)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--points", type=int, default=100)
    parser.add_argument("--encoding", choices=["", "gzip"], default="", help="'' = as the plugin sends")
    parser.add_argument("--sink", choices=["kafka", "memory"], default="kafka")
    parser.add_argument("--topic", default="client-telemetry-bench")
    parser.add_argument("--compare-http", action="store_true")
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    parser.add_argument("--spoil", choices=["", "invalid-point", "private-attribute"], default="",
                        help="'' = a clean push (stored as sent); else one the receiver must rewrite")
    args = parser.parse_args()

    raw = build_push(args.points, args.spoil)
    body = gzip.compress(raw) if args.encoding == "gzip" else raw
    print(f"push: {len(raw)} bytes protobuf, {args.points} data points, sent {len(body)} bytes "
          f"({args.encoding or 'identity'}), {args.spoil or 'clean'}, {args.connections} keep-alive connections, "
          f"{args.seconds:.0f} s")
    if args.compare_http:
        compare_http(args, body)
        return 0

    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    stack_env = REPO / "build" / "stack.env"
    if bootstrap is None and stack_env.exists():
        for line in stack_env.read_text().splitlines():
            if line.startswith("KAFKA_BOOTSTRAP_SERVERS="):
                bootstrap = line.split("=", 1)[1].strip()
    if args.sink == "kafka" and not bootstrap:
        print("no Kafka: set KAFKA_BOOTSTRAP_SERVERS or start the stack (build/stack.env)", file=sys.stderr)
        return 2

    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        cfg_path = Path(tmp) / "receiver.json"  # JSON is YAML
        cfg_path.write_text(json.dumps(_bench_config(port, args.sink, bootstrap, args.topic)))
        env = dict(os.environ, KCT_BENCH_TOKEN="bench-token", PYTHONPATH=str(REPO / "operator"))
        if args.sink == "kafka":
            cmd = [sys.executable, "-m", "kct.cli", "receiver", "--config", str(cfg_path)]
        else:
            cmd = [sys.executable, "-c", _MEMORY_SERVER.format(operator=str(REPO / "operator")), str(cfg_path)]
        proc = _start(cmd, env)
        try:
            _wait_port(port)
            figures = asyncio.run(drive("127.0.0.1", port, proc.pid, seconds=args.seconds,
                                        connections=args.connections, body=body, encoding=args.encoding,
                                        token="bench-token"))
        finally:
            tail = _stop(proc)
        _print(f"receiver -> {args.sink}" + (f" ({bootstrap}, topic {args.topic})" if args.sink == "kafka" else ""),
               figures, args.points)
        if proc.returncode not in (0, None) or "Traceback" in tail:
            print(f"receiver exit {proc.returncode}; stderr tail:\n{tail}")
        if args.json:
            print(json.dumps({k: v for k, v in figures.items()}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
