#!/usr/bin/env python3
"""Slow senders against the receiver: what real pushes get while thousands of connections trickle bodies
byte by byte and a connection flood runs.

    .venv/bin/python bench/receiver_slow_senders.py                  # its own Kafka broker on free ports
    .venv/bin/python bench/receiver_slow_senders.py --bootstrap 127.0.0.1:19092 --seconds 30

The receiver runs as a process (`kct receiver --config ...`) in front of a real Kafka broker (started here
on free loopback ports without the telemetry plugin, unless `--bootstrap` names one). This script is the
attacker and the legitimate clients, in one asyncio loop:

- `--trickle` connections write a valid head with the right token, then the body one byte every
  `--pace` seconds (a quarter trickle the head itself); when the receiver closes one, it reconnects;
- `--flood` connections are opened and held without sending anything, each reopened after the receiver
  closes it (no faster than every `--flood-pace` seconds);
- `--workers` legitimate clients, each on a keep-alive connection opened before the attack (as brokers
  keep theirs), push a distinct record every `--push-pace` seconds.

Printed: the legitimate pushes' success rate and latency p50/p99 during the attack, the receiver's peak
RSS, how the attackers were answered, and the receiver's closes by reason. The e2e test
(tests/e2e/test_receiver_slow_senders_e2e.py) runs the same attack and asserts correctness: every push
answered 200, RSS under the default memory limit, every acknowledged push a record on the topic.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "operator"))
sys.path.insert(0, str(REPO / "dev" / "stack"))

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (  # noqa: E402
    ExportMetricsServiceRequest,
)

HOST = "127.0.0.1"
Ending = asyncio.Future[Any]  # a connection's close by the receiver, or the attack's end
TOKEN = "slow-senders-token"
# The attack's receiver settings: the defaults, but timeouts and the cap small enough that a short run
# sees every one of them fire (trickles outlive the body timeout, the flood goes over the cap).
CONNECTIONS = {"maxOpen": 3000, "headerTimeoutMs": 3000, "bodyTimeoutMs": 5000}
# Sockets this process and the receiver may open: trickle + flood + workers, with room to spare.
OPEN_FILES = 16384


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def raise_open_files(wanted: int = OPEN_FILES) -> int:
    """Raise this process's soft RLIMIT_NOFILE (children inherit it) to `wanted`, or the hard limit if lower."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _body(instance: str, points: int = 20) -> bytes:
    req = ExportMetricsServiceRequest()
    rm = req.resource_metrics.add()
    kv = rm.resource.attributes.add()
    kv.key, kv.value.string_value = "client_instance_id", instance
    metric = rm.scope_metrics.add().metrics.add()
    metric.name = "org.apache.kafka.producer.queue.bytes"
    for i in range(points):
        dp = metric.gauge.data_points.add()
        dp.time_unix_nano = 1_700_000_000_000_000_000 + i
        dp.as_int = i
    return bytes(req.SerializeToString())


def _request(instance: str, body: bytes) -> tuple[bytes, bytes]:
    head = (f"POST /v1/metrics HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/x-protobuf\r\n"
            f"Authorization: Bearer {TOKEN}\r\nkct-client-instance-id: {instance}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    return head, body


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class Figures:
    """What the attack saw. `acked` are the record keys answered 200 (each push's client instance id)."""

    attempted: int = 0
    acked: list[str] = field(default_factory=list)  # before the attack too
    counted_acked: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    latencies_s: list[float] = field(default_factory=list)
    peak_rss_mb: float = 0.0
    attacker_answers: Counter[str] = field(default_factory=Counter)
    attacker_connections: int = 0
    peak_attackers_open: int = 0

    def percentile_ms(self, q: float) -> float:
        ordered = sorted(self.latencies_s)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else float("nan")

    @property
    def success_rate(self) -> float:
        return self.counted_acked / self.attempted if self.attempted else 0.0


class _Attack:
    def __init__(self, port: int, pid: int, figures: Figures, stop: asyncio.Event) -> None:
        self.port, self.pid, self.figures, self.stop = port, pid, figures, stop
        self.open = 0

    def _opened(self) -> None:
        self.open += 1
        self.figures.attacker_connections += 1
        self.figures.peak_attackers_open = max(self.figures.peak_attackers_open, self.open)

    def _answered(self, data: bytes) -> None:
        match = re.match(rb"HTTP/1\.1 (\d+)", data)
        self.figures.attacker_answers[match.group(1).decode() if match else "closed"] += 1

    async def _paced(self, seconds: float) -> None:
        """Wait `seconds`, or less if the attack is stopped."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), seconds)

    async def _connections(self, pace_s: float,
                           use: Callable[[asyncio.StreamWriter, Ending, Ending],
                                         Awaitable[None]]) -> None:
        """Open a connection, `use` it (given the futures of its close by the receiver and of the attack's
        end), note how the receiver ended it, and again, no more often than every `pace_s`, until the end."""
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                reader, writer = await asyncio.open_connection(HOST, self.port)
            except OSError:
                self.figures.attacker_answers["connect_error"] += 1
                await self._paced(pace_s)
                continue
            self._opened()
            closed = asyncio.ensure_future(reader.read(-1))
            stopped = asyncio.ensure_future(self.stop.wait())
            try:
                await use(writer, closed, stopped)
                if closed.done() and closed.exception() is None:
                    self._answered(closed.result())
                elif closed.done():
                    self.figures.attacker_answers["reset"] += 1
            except (ConnectionError, OSError):
                self.figures.attacker_answers["reset"] += 1
            finally:
                closed.cancel()
                stopped.cancel()
                writer.close()
                self.open -= 1
            await self._paced(max(0.0, pace_s - (time.monotonic() - started)))

    async def trickler(self, n: int, pace_s: float) -> None:
        head, body = _request(f"trickle-{n}", _body(f"trickle-{n}", points=60))
        # a quarter trickle the head, the rest send the head whole and trickle the body
        whole, trickled = (b"", head + body) if n % 4 == 0 else (head, body)

        async def trickle(writer: asyncio.StreamWriter, closed: Ending,
                          stopped: Ending) -> None:
            writer.write(whole)
            for i in range(len(trickled)):
                if closed.done() or stopped.done():
                    return
                writer.write(trickled[i:i + 1])
                # the pace of the trickle, cut short when the receiver closes the connection
                await asyncio.wait({closed, stopped}, timeout=pace_s, return_when=asyncio.FIRST_COMPLETED)

        await self._connections(pace_s, trickle)

    async def flooder(self, pace_s: float) -> None:
        async def hold(_writer: asyncio.StreamWriter, closed: Ending,
                       stopped: Ending) -> None:
            await asyncio.wait({closed, stopped}, return_when=asyncio.FIRST_COMPLETED)

        await self._connections(pace_s, hold)

    async def worker(self, n: int, pace_s: float, all_open: asyncio.Event, go: asyncio.Event, opened: list[int],
                     total: int) -> None:
        """A legitimate client: one keep-alive connection, opened before the attack (`all_open` once every
        client has one), a push every `pace_s` from `go` (the attack in full swing) to the end."""
        figures = self.figures
        reader, writer = await asyncio.open_connection(HOST, self.port)
        seq = 0
        try:
            while not self.stop.is_set():
                key = f"legit-{n}-{seq}-{uuid.uuid4().hex[:6]}"
                seq += 1
                head, body = _request(key, _body(key))
                # pushing from the start, as brokers do, but counted only while the attack is in full swing
                counted = go.is_set()
                figures.attempted += counted
                started = time.perf_counter()
                try:
                    writer.write(head + body)
                    answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
                    length = int(re.search(rb"Content-Length: (\d+)", answer).group(1))  # type: ignore[union-attr]
                    await reader.readexactly(length)
                except (OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
                    figures.failures[type(exc).__name__] += counted
                    writer.close()
                    reader, writer = await asyncio.open_connection(HOST, self.port)
                    continue
                status = answer.split(b" ", 2)[1].decode()
                if status == "200":
                    figures.acked.append(key)  # every acknowledged push must be on the topic, counted or not
                if counted:
                    figures.latencies_s.append(time.perf_counter() - started)
                    figures.failures[status] += status != "200"
                    figures.counted_acked += status == "200"
                if len(opened) < total and n not in opened:
                    opened.append(n)
                    if len(opened) == total:
                        all_open.set()
                await self._paced(pace_s)
        finally:
            writer.close()

    async def watch_rss(self) -> None:
        while not self.stop.is_set():
            self.figures.peak_rss_mb = max(self.figures.peak_rss_mb, rss_mb(self.pid))
            await self._paced(0.25)


async def _attack_only(port: int, seconds: float, trickle: int, flood: int, pace_s: float,
                       flood_pace_s: float) -> None:
    """The attacker process: trickle and flood `port` for `seconds`; prints `full <n>` once `trickle`
    connections are open at once, and a JSON line of what the receiver answered at the end."""
    figures, stop = Figures(), asyncio.Event()
    run = _Attack(port, 0, figures, stop)
    tasks = [asyncio.ensure_future(run.trickler(n, pace_s)) for n in range(trickle)]
    tasks += [asyncio.ensure_future(run.flooder(flood_pace_s)) for _ in range(flood)]

    async def announce_full() -> None:
        while run.open < trickle and not stop.is_set():
            await run._paced(0.05)
        print(f"full {run.open}", flush=True)

    tasks.append(asyncio.ensure_future(announce_full()))
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)  # the attack's length
    stop.set()
    await asyncio.gather(*tasks)
    print(json.dumps({"answers": dict(figures.attacker_answers), "connections": figures.attacker_connections,
                      "peak_open": figures.peak_attackers_open}), flush=True)


async def attack(port: int, pid: int, *, seconds: float, trickle: int = 2000, flood: int = 1500,
                 workers: int = 4, pace_s: float = 1.0, flood_pace_s: float = 0.5,
                 push_pace_s: float = 0.05) -> Figures:
    """Attack the receiver on `port` (process `pid`) for `seconds` from a process of its own (so the
    attack's own CPU does not slow the legitimate clients' loop), with legitimate pushes from this one,
    from the moment the attack is in full swing (`trickle` connections open at once) to its end. The
    legitimate clients connect before the attack starts."""
    figures, stop = Figures(), asyncio.Event()
    run = _Attack(port, pid, figures, stop)
    all_open, go, opened = asyncio.Event(), asyncio.Event(), list[int]()
    tasks = [asyncio.ensure_future(run.worker(n, push_pace_s, all_open, go, opened, workers)) for n in range(workers)]
    await asyncio.wait_for(all_open.wait(), 30)
    tasks.append(asyncio.ensure_future(run.watch_rss()))
    attacker = await asyncio.create_subprocess_exec(
        sys.executable, str(Path(__file__).resolve()), "--attack-only", str(port), "--seconds", str(seconds),
        "--trickle", str(trickle), "--flood", str(flood), "--pace", str(pace_s), "--flood-pace", str(flood_pace_s),
        stdout=asyncio.subprocess.PIPE,
    )
    assert attacker.stdout is not None
    try:
        full = await asyncio.wait_for(attacker.stdout.readline(), seconds + 60)
        if not full.startswith(b"full "):
            raise RuntimeError(f"the attacker never had {trickle} connections open: {full!r}")
        go.set()
        summary = await asyncio.wait_for(attacker.stdout.readline(), seconds + 120)
        await attacker.wait()
    finally:
        stop.set()
        if attacker.returncode is None:
            attacker.kill()
            await attacker.wait()
    await asyncio.gather(*tasks)
    report = json.loads(summary)
    figures.attacker_answers.update(report["answers"])
    figures.attacker_connections, figures.peak_attackers_open = report["connections"], report["peak_open"]
    return figures


def closes_by_reason(port: int) -> dict[str, float]:
    """kct_receiver_connections_closed_total by reason, from the receiver's /metrics."""
    with urllib.request.urlopen(f"http://{HOST}:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {m.group(1): float(m.group(2)) for m in
            re.finditer(r'^kct_receiver_connections_closed_total\{reason="([^"]+)"\} (\S+)$', text, re.M)}


def topic_keys(bootstrap: str, topic: str, wanted: set[str], *, timeout_s: float = 120.0) -> set[str]:
    """Keys of the topic's records (from the beginning), read until every `wanted` key is seen or nothing new
    comes for 10 s, within `timeout_s`."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"kct-slow-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "enable.metrics.push": False})
    consumer.subscribe([topic])
    keys: set[str] = set()
    deadline, last_new = time.monotonic() + timeout_s, time.monotonic()
    try:
        while time.monotonic() < deadline and not wanted <= keys and time.monotonic() - last_new < 10:
            for msg in consumer.consume(1000, 0.5):
                key = msg.key()
                if msg.error() is None and key is not None:
                    keys.add(bytes(key).decode())
                    last_new = time.monotonic()
    finally:
        consumer.close()
    return keys


@contextlib.contextmanager
def kafka_broker_on_free_ports(workdir: Path) -> Iterator[str]:
    """A Kafka broker of the stack's release without the plugin, on free loopback ports; stopped on exit."""
    import kafka_broker

    name = f"kafka-slow-{uuid.uuid4().hex[:6]}"
    env = kafka_broker.up(workdir, "http://127.0.0.1:9/v1/metrics", plugin=False, name=name, port=free_port(),
                          controller_port=free_port(), jvm=("-Xms64m", "-Xmx256m", "-XX:TieredStopAtLevel=1"))
    try:
        yield env["KAFKA_BOOTSTRAP_SERVERS"]
    finally:
        kafka_broker.down(workdir, name=name)


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)]).values():
        future.result(timeout=60)


@contextlib.contextmanager
def receiver_process(workdir: Path, bootstrap: str, topic: str, port: int) -> Iterator[subprocess.Popen[bytes]]:
    """`kct receiver` with the attack's connection settings (CONNECTIONS), ready; SIGTERM on exit."""
    config = {
        "listen": {"host": HOST, "port": port},
        "auth": {"bearerTokenEnv": "KCT_RECEIVER_TOKEN"},
        "kafka": {"bootstrapServers": bootstrap, "topic": topic, "readinessIntervalMs": 500},
        "connections": CONNECTIONS,
        "logging": {"level": "WARNING", "format": "json"},
    }
    path = workdir / "receiver.json"
    path.write_text(json.dumps(config))
    env = dict(os.environ, KCT_RECEIVER_TOKEN=TOKEN, PYTHONPATH=str(REPO / "operator"))
    with (workdir / "receiver.log").open("wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "kct.cli", "receiver", "--config", str(path)],
                                   env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"receiver exited: {(workdir / 'receiver.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://{HOST}:{port}/readyz", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the receiver did not become ready in 90 s")
            time.sleep(0.2)  # the poll interval of the readiness check
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def report(figures: Figures, closes: dict[str, float], records: int, open_files: int) -> str:
    lines = [
        f"open-file limit (soft, this process and the receiver): {open_files}",
        f"legitimate pushes during the attack: {figures.attempted} attempted, {figures.counted_acked} answered 200 "
        f"(success rate {figures.success_rate:.2%}), failures {dict(+figures.failures) or 'none'}",
        f"legitimate push latency p50 / p99: {figures.percentile_ms(0.5):.1f} / {figures.percentile_ms(0.99):.1f} ms",
        f"acknowledged pushes (before and during the attack) found on the topic: {records} of {len(figures.acked)}",
        f"receiver peak RSS: {figures.peak_rss_mb:.0f} MiB",
        f"attacker connections opened: {figures.attacker_connections} (peak open {figures.peak_attackers_open}); "
        f"answers: {dict(figures.attacker_answers)}",
        f"receiver closes by reason: {closes}",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", help="an existing Kafka (default: a broker of its own on free ports)")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--trickle", type=int, default=2000)
    parser.add_argument("--flood", type=int, default=1500)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--pace", type=float, default=1.0, help="seconds between two trickled bytes")
    parser.add_argument("--flood-pace", type=float, default=0.5)
    parser.add_argument("--push-pace", type=float, default=0.05)
    parser.add_argument("--attack-only", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    open_files = raise_open_files()
    if args.attack_only:
        asyncio.run(_attack_only(args.attack_only, args.seconds, args.trickle, args.flood, args.pace,
                                 args.flood_pace))
        return 0
    with tempfile.TemporaryDirectory(prefix="kct-slow-") as tmp, contextlib.ExitStack() as stack:
        workdir = Path(tmp)
        bootstrap = args.bootstrap or stack.enter_context(kafka_broker_on_free_ports(workdir))
        topic = f"kct-slow-senders-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, topic)
        port = free_port()
        process = stack.enter_context(receiver_process(workdir, bootstrap, topic, port))
        figures = asyncio.run(attack(port, process.pid, seconds=args.seconds, trickle=args.trickle,
                                     flood=args.flood, workers=args.workers, pace_s=args.pace,
                                     flood_pace_s=args.flood_pace, push_pace_s=args.push_pace))
        closes = closes_by_reason(port)
        keys = topic_keys(bootstrap, topic, set(figures.acked))
        print(report(figures, closes, len(set(figures.acked) & keys), open_files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
