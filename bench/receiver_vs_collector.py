#!/usr/bin/env python3
"""The receiver side by side with its peer, the OpenTelemetry Collector (otlp receiver -> kafka exporter).

    .venv/bin/python bench/receiver_vs_collector.py --prepare       # on the host: build what is missing
    .venv/bin/python bench/receiver_vs_collector.py [--full]        # measure (run it in a network namespace)
    mkdir /tmp/base && git archive main operator | tar -x -C /tmp/base
    cp operator/kct/receiver/_otlpscan*.so /tmp/base/operator/kct/receiver/
    .venv/bin/python bench/receiver_vs_collector.py --baseline /tmp/base/operator   # old and new, interleaved
    (--baseline may be repeated: the receivers are named base, base2, ...)

`--prepare` needs the network: it builds the Collector with its builder (ocb) from Go modules at one
release (COLLECTOR_RELEASE: otlpreceiver, the contrib kafkaexporter and bearertokenauthextension, plus the
contrib k8sattributesprocessor, enabled only by `--attributed`), the
load generator (bench/loadgen, Go) and Kafka's jars (dev/stack/kafka_broker.py), all cached under
~/.cache/kct. A measuring run builds nothing that needs a download.

Both servers get the same Kafka (a broker of their own, started here on loopback, no plugin), the same
token, the same pushes (~9 KB OTLP protobuf, 100 points, each with the broker plugin's headers and its
own client instance id), and both answer 200 only after Kafka acknowledged the record: the receiver by
design, the Collector with its sending queue and retries off, `acks=all` (franz-go: idempotent).
Both producers use lz4 and their own default linger (the receiver's librdkafka 1 ms, the Collector's
franz-go 10 ms). The receiver runs with every feature on (auth, limits, privacy deny list, push-interval
rate limit, KIP-13/257 quotas with non-binding rates).

Both servers run for the whole benchmark, pinned to the same core (taskset); only one is loaded at a time,
the load generator on the other core. Trials alternate which server goes first. Per scenario it prints
pushes per CPU-second of the server process (user + system from /proc/<pid>/stat, all its threads),
the ratio receiver / Collector, the p99 ratio receiver / Collector (below 1: the receiver's tail is
shorter), latency p50/p99 (at the fixed rate: from each push's scheduled time), peak
RSS during the run, voluntary context switches per push (all threads: the wake-ups and thread hand-offs a
push costs, a figure that barely moves with the shared machine's load), and checks that the records in
each server's topic match the 200s it answered.

    .venv/bin/python bench/receiver_vs_collector.py --attributed [--pods 1000]   # in a network namespace

`--attributed` runs the attributed scenarios instead (issue 42): both servers add the Kubernetes identity of
the client to each push, against a private etcd + kube-apiserver (bench/k8s_attribution.py: `--pods` pods in
Deployments, status.podIP written, no kubelet) read with one least-rights service account token. The receiver
runs its attribution (pod index fed by its watch) and finds the pod from the broker plugin's source-address
header; the Collector runs `k8s_attributes` and finds it from the resource attribute k8s.pod.ip each push
also carries. Pushes cycle through the pods' addresses. Besides records == 200s, a sample of each topic's
records is checked: the k8s.* attributes are those of the pod of the push's address.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "dev" / "stack"))
sys.path.insert(0, str(REPO / "bench"))

import k8s_attribution  # noqa: E402
import kafka_broker  # noqa: E402  (dev/stack is not a package)
from receiver_throughput import build_push  # noqa: E402

COLLECTOR_RELEASE = "0.160.0"  # the newest whose whole module set resolves from the Go module proxy here
CACHE = Path(os.environ.get("KCT_CACHE", Path.home() / ".cache" / "kct"))
COLLECTOR_DIR = CACHE / "otelcol" / COLLECTOR_RELEASE
COLLECTOR_BIN = COLLECTOR_DIR / "build" / "otelcol-kct-bench"
BUILDER_BIN = CACHE / "otelcol" / "bin" / "builder"
LOADGEN_SRC = REPO / "bench" / "loadgen"
STATE = REPO / "build" / "bench" / "receiver-vs-collector"
KAFKA_PORT, KAFKA_CONTROLLER_PORT = 29092, 29093
BOOTSTRAP = f"127.0.0.1:{KAFKA_PORT}"
TOKEN = "bench-token"
CLK_TCK = os.sysconf("SC_CLK_TCK")
SERVER_CORE, LOADGEN_CORE = "0", "1"

_CONTRIB = "github.com/open-telemetry/opentelemetry-collector-contrib"
_MANIFEST = f"""\
dist:
  name: otelcol-kct-bench
  description: OpenTelemetry Collector for the kct receiver benchmark
  output_path: ./build
receivers:
  - gomod: go.opentelemetry.io/collector/receiver/otlpreceiver v{COLLECTOR_RELEASE}
exporters:
  - gomod: {_CONTRIB}/exporter/kafkaexporter v{COLLECTOR_RELEASE}
extensions:
  - gomod: {_CONTRIB}/extension/bearertokenauthextension v{COLLECTOR_RELEASE}
# Built in, not enabled in the bench's pipelines: one binary also serves a side-by-side run with
# Kubernetes attributes (issue 42) without a second build.
processors:
  - gomod: {_CONTRIB}/processor/k8sattributesprocessor v{COLLECTOR_RELEASE}
"""


@dataclass(frozen=True)
class Scenario:
    name: str
    connections: int
    gzip: bool = False
    rate: float = 0.0  # pushes/s; 0 = closed loop
    attributed: bool = False  # pushes from the bench pods' addresses, both servers attributing (--attributed)


QUICK = (
    Scenario("32 conn", 32),
    Scenario("32 conn gzip", 32, gzip=True),
    Scenario("256 conn", 256),
    Scenario("500/s fixed rate", 64, rate=500.0),
    Scenario("2000/s fixed rate", 128, rate=2000.0),
    Scenario("1024 conn (overload)", 1024),
)
ATTRIBUTED = (
    Scenario("32 conn attributed", 32, attributed=True),
    Scenario("256 conn attributed", 256, attributed=True),
)


@dataclass
class Tally:
    ok: int = 0
    cpu_s: float = 0.0
    seconds: float = 0.0
    p50: list[float] = field(default_factory=list)
    p99: list[float] = field(default_factory=list)
    rss_peak_mb: float = 0.0
    statuses: dict[str, int] = field(default_factory=dict)
    errors: int = 0
    late: int = 0
    switches: int = 0

    def switches_per_push(self) -> float:
        return self.switches / self.ok if self.ok else 0.0

    def per_cpu_s(self) -> float:
        return self.ok / self.cpu_s if self.cpu_s else 0.0


# -- building -------------------------------------------------------------------------------------------


def _run(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    print(f"    $ {' '.join(cmd)}", flush=True)
    subprocess.run(cmd, cwd=cwd, env=env, check=True)


def collector_binary(*, build: bool) -> Path:
    if COLLECTOR_BIN.exists():
        return COLLECTOR_BIN
    if not build:
        raise SystemExit(f"no Collector build at {COLLECTOR_BIN}: run this script with --prepare first (network)")
    go = shutil.which("go")
    if go is None:
        raise SystemExit("`go` is not on PATH: the Collector and the load generator are built from Go sources")
    if not BUILDER_BIN.exists():
        print(f"==> the Collector's builder (ocb) v{COLLECTOR_RELEASE}", flush=True)
        _run([go, "install", f"go.opentelemetry.io/collector/cmd/builder@v{COLLECTOR_RELEASE}"],
             env=dict(os.environ, GOBIN=str(BUILDER_BIN.parent)))
    COLLECTOR_DIR.mkdir(parents=True, exist_ok=True)
    (COLLECTOR_DIR / "manifest.yaml").write_text(_MANIFEST)
    print(f"==> OpenTelemetry Collector v{COLLECTOR_RELEASE} (otlp receiver, kafka exporter, bearertokenauth,"
          " k8sattributes built in)",
          flush=True)
    _run([str(BUILDER_BIN), "--config", "manifest.yaml"], cwd=COLLECTOR_DIR)
    return COLLECTOR_BIN


def loadgen_binary() -> Path:
    digest = hashlib.sha256()
    for path in sorted(LOADGEN_SRC.glob("*")):
        digest.update(path.name.encode() + path.read_bytes())
    target = CACHE / "bench" / f"loadgen-{digest.hexdigest()[:16]}"
    if not target.exists():
        go = shutil.which("go")
        if go is None:
            raise SystemExit("`go` is not on PATH: the load generator is built from bench/loadgen")
        target.parent.mkdir(parents=True, exist_ok=True)
        print("==> load generator (bench/loadgen)", flush=True)
        _run([go, "build", "-o", str(target), "."], cwd=LOADGEN_SRC)
    return target


def prepare() -> None:
    collector_binary(build=True)
    loadgen_binary()
    kafka_broker.install()


# -- servers --------------------------------------------------------------------------------------------


def _collector_config(port: int, topic: str, *, attributed: bool = False) -> str:
    processors = f"processors:\n{k8s_attribution.collector_processor()}" if attributed else ""
    pipeline_processors = "      processors: [k8s_attributes]\n" if attributed else ""
    return f"""\
{processors}extensions:
  bearertokenauth:
    token: "{TOKEN}"
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{port}
        auth:
          authenticator: bearertokenauth
exporters:
  kafka:
    brokers: ["{BOOTSTRAP}"]
    metrics:
      topic: {topic}
      encoding: otlp_proto
    producer:
      required_acks: -1
      compression: lz4
    sending_queue:
      enabled: false
    retry_on_failure:
      enabled: false
service:
  extensions: [bearertokenauth]
  telemetry:
    logs:
      level: warn
    metrics:
      level: none
  pipelines:
    metrics:
      receivers: [otlp]
{pipeline_processors}      exporters: [kafka]
"""


def _receiver_config(port: int, topic: str) -> dict[str, Any]:
    return {
        "listen": {"host": "127.0.0.1", "port": port},
        "auth": {"bearerTokenEnv": "KCT_BENCH_TOKEN"},
        # every feature on; quota rates far above the load so that they are measured, never binding
        "quotas": {"enabled": True, "defaultByteRate": 1e12, "defaultPushRate": 1e9},
        "rateLimit": {"enabled": True},
        "privacy": {"checkDataPointAttributes": True},
        "validation": {"checkDataPoints": True},
        "kafka": {"bootstrapServers": BOOTSTRAP, "topic": topic},
        "logging": {"level": "WARNING", "format": "json"},
    }


@dataclass
class Server:
    name: str
    port: int
    topic: str
    proc: subprocess.Popen[bytes]
    log: Path

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def context_switches(self) -> int:
        """Voluntary context switches of all the server's threads so far: each is a thread going to sleep to
        wait (for a socket, a timer, a queue, a lock), so per push they count the hand-offs between threads
        and the wake-ups; unlike CPU time they barely depend on how loaded the shared machine is."""
        total = 0
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            try:
                for line in (task / "status").read_text().splitlines():
                    if line.startswith("voluntary_ctxt_switches:"):
                        total += int(line.split()[1])
            except OSError:  # a thread that just ended
                continue
        return total

    def thread_cpu_s(self) -> dict[str, float]:
        """CPU seconds so far per thread name (threads sharing a name added up): where a push's CPU goes,
        e.g. the event loop vs librdkafka's broker and main threads vs the delivery-report poller."""
        totals: dict[str, float] = {}
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            try:
                name = (task / "comm").read_text().strip()
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # a thread that just ended
                continue
            totals[name] = totals.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / CLK_TCK
        return totals

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(server: Server, ready_path: str | None, timeout: float = 60.0) -> None:
    """Until the server answers HTTP at all, or 200 on `ready_path` (the receiver: Kafka reachable)."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    url = f"http://127.0.0.1:{server.port}{ready_path or '/'}"
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise SystemExit(f"{server.name} exited ({server.proc.returncode}): {server.log.read_text()[-3000:]}")
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except urllib.error.HTTPError:
            if ready_path is None:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{server.name} not ready on {server.port}: {server.log.read_text()[-3000:]}")


def _start(name: str, cmd: list[str], env: dict[str, str], port: int, topic: str, tmp: Path,
           ready_path: str | None = None) -> Server:
    log = tmp / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(["taskset", "-c", SERVER_CORE, *cmd], env=env, stdout=out, stderr=subprocess.STDOUT)
    server = Server(name, port, topic, proc, log)
    _wait_ready(server, ready_path)
    return server


# The receiver reads its service account where a pod has it mounted; here from the bench's directory.
_RECEIVER_IN_BENCH_POD = (
    "import sys, kct.attribution.kube_source as ks; ks.SERVICE_ACCOUNT_DIR = sys.argv.pop(1); "
    "from kct.cli import main; sys.exit(main(sys.argv[1:]))"
)


def start_receiver(tmp: Path, name: str, operator_dir: Path, service_account: Path | None = None) -> Server:
    """A receiver running the `kct` package found in `operator_dir` (this checkout's, or a baseline's); with
    `service_account` (attributed scenarios), attributing from the bench's API server as if in a pod."""
    port, topic = _free_port(), f"bench-{name}"
    cfg = tmp / f"{name}.json"  # JSON is YAML
    config = _receiver_config(port, topic)
    env = dict(os.environ, KCT_BENCH_TOKEN=TOKEN, PYTHONPATH=str(operator_dir))
    cmd = [sys.executable, "-m", "kct.cli"]
    if service_account is not None:
        config["attribution"] = {"enabled": True, "namespaces": [k8s_attribution.NAMESPACE]}
        # The pushes carry their address as k8s.pod.ip for the Collector's pod association; the receiver's
        # privacy deny list drops a client's own k8s.* (a claim), which would make it rewrite every push and
        # leave nothing to check the record against: kept, as the only change to its config.
        config["privacy"] = {**config["privacy"], "allow": ["k8s.pod.ip"]}
        env.update(KUBERNETES_SERVICE_HOST=k8s_attribution.API_HOST,
                   KUBERNETES_SERVICE_PORT=str(k8s_attribution.API_PORT))
        cmd = [sys.executable, "-c", _RECEIVER_IN_BENCH_POD, str(service_account)]
    cfg.write_text(json.dumps(config))
    return _start(name, [*cmd, "receiver", "--config", str(cfg)], env, port, topic, tmp, "/readyz")


def start_servers(tmp: Path, collector: Path, credentials: tuple[Path, Path] | None = None) -> tuple[Server, Server]:
    """The receiver and the Collector; with `credentials` (service-account dir, kubeconfig) both attributing."""
    kct = start_receiver(tmp, "kct", REPO / "operator", credentials[0] if credentials else None)
    col_port = _free_port()
    col_cfg = tmp / "collector.yaml"
    col_cfg.write_text(_collector_config(col_port, "bench-otelcol", attributed=credentials is not None))
    env = dict(os.environ, GOMAXPROCS="1")
    if credentials is not None:
        env["KUBECONFIG"] = str(credentials[1])
    col = _start("otelcol", [str(collector), "--config", str(col_cfg)], env, col_port, "bench-otelcol", tmp)
    return kct, col


# -- Kafka ----------------------------------------------------------------------------------------------


def create_topics(topics: list[str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    existing = admin.list_topics(timeout=10).topics
    wanted = [NewTopic(t, num_partitions=1, replication_factor=1) for t in topics if t not in existing]
    for future in admin.create_topics(wanted).values() if wanted else ():
        future.result(timeout=30)


def records_in(topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": "kct-bench-count"})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return int(high)
    finally:
        consumer.close()


def write_sources(tmp: Path, raw: bytes, pods: list[k8s_attribution.BenchPod]) -> Path:
    """Per pod, the push with its address as the resource attribute k8s.pod.ip; the load generator's
    `-sources` file pairs each with the address it sends as the source-address header."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    lines = []
    for number, pod in enumerate(pods):
        req = ExportMetricsServiceRequest.FromString(raw)
        kv = req.resource_metrics[0].resource.attributes.add()
        kv.key, kv.value.string_value = "k8s.pod.ip", pod.address
        path = tmp / f"push-{number}.pb"
        path.write_bytes(req.SerializeToString())
        lines.append(f"{pod.address} {path}")
    sources = tmp / "sources.txt"
    sources.write_text("\n".join(lines) + "\n")
    return sources


def sampled_attributes(topic: str, count: int) -> list[dict[str, str]]:
    """The resource attributes (string values) of the last `count` records of `topic`."""
    from confluent_kafka import Consumer, TopicPartition
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    consumer = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": "kct-bench-sample",
                         "enable.auto.commit": False})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, max(low, high - count))])
        out: list[dict[str, str]] = []
        deadline = time.monotonic() + 30
        while len(out) < min(count, high - low) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None or msg.error():
                continue
            for rm in ExportMetricsServiceRequest.FromString(msg.value()).resource_metrics:
                out.append({kv.key: kv.value.string_value for kv in rm.resource.attributes})
        return out
    finally:
        consumer.close()


def check_attribution(servers: list[Server], pods: list[k8s_attribution.BenchPod], count: int = 500) -> bool:
    """Each server's last `count` records carry the k8s.* attributes of the pod of their address."""
    by_address = {pod.address: pod for pod in pods}
    good = True
    for server in servers:
        records = sampled_attributes(server.topic, count)
        problems = k8s_attribution.mismatches(by_address, records)
        verdict = "all match their pod" if records and not problems else "MISMATCH"
        good = good and bool(records) and not problems
        print(f"{server.name}: {len(records)} sampled records' k8s.* attributes: {verdict}"
              + "".join(f"\n    {p}" for p in problems[:5]), flush=True)
    return good


# -- one measured run -----------------------------------------------------------------------------------


def _peak_rss(server: Server, stop: threading.Event, peak: list[float]) -> None:
    while not stop.wait(0.2):
        peak[0] = max(peak[0], server.rss_mb())


def drive(loadgen: Path, server: Server, scenario: Scenario, body: Path, seconds: float) -> dict[str, Any]:
    """Run the load generator against `server`; its CPU between the generator's MEASURE and DONE lines.
    `body`: the push, or for an attributed scenario the file of lines "ADDRESS BODY-FILE" it cycles through."""
    cmd = ["taskset", "-c", LOADGEN_CORE, str(loadgen), "-addr", f"127.0.0.1:{server.port}", "-token", TOKEN,
           "-sources" if scenario.attributed else "-body", str(body), "-connections", str(scenario.connections),
           "-seconds", str(seconds),
           "-rate", str(scenario.rate), "-warmup", "2"]
    if scenario.gzip:
        cmd.append("-gzip")
    peak = [server.rss_mb()]
    stop = threading.Event()
    sampler = threading.Thread(target=_peak_rss, args=(server, stop, peak), daemon=True)
    sampler.start()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    cpu0 = cpu1 = 0.0
    sw0 = sw1 = 0
    threads0: dict[str, float] = {}
    threads1: dict[str, float] = {}
    last = ""
    for line in proc.stdout:
        if line.startswith("MEASURE"):
            cpu0, sw0, threads0 = server.cpu_s(), server.context_switches(), server.thread_cpu_s()
        elif line.startswith("DONE"):
            cpu1, sw1, threads1 = server.cpu_s(), server.context_switches(), server.thread_cpu_s()
        elif line.startswith("{"):
            last = line
    proc.wait()
    stop.set()
    sampler.join()
    if proc.returncode != 0 or not last:
        raise SystemExit(f"load generator failed ({proc.returncode}) against {server.name}")
    figures: dict[str, Any] = json.loads(last)
    figures["cpu_s"] = cpu1 - cpu0
    figures["switches"] = sw1 - sw0
    figures["rss_peak_mb"] = peak[0]
    figures["threads"] = {name: cpu - threads0.get(name, 0.0) for name, cpu in threads1.items()}
    return figures


def _add(tally: Tally, figures: dict[str, Any]) -> None:
    tally.ok += int(figures["ok"])
    tally.cpu_s += float(figures["cpu_s"])
    tally.seconds += float(figures["seconds"])
    tally.p50.append(float(figures["p50_ms"]))
    tally.p99.append(float(figures["p99_ms"]))
    tally.rss_peak_mb = max(tally.rss_peak_mb, float(figures["rss_peak_mb"]))
    tally.errors += int(figures["errors"])
    tally.late += int(figures["late"])
    tally.switches += int(figures["switches"])
    for status, n in figures["statuses"].items():
        tally.statuses[status] = tally.statuses.get(status, 0) + int(n)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else 0.0


def _p99_ratio(kct: Tally, col: Tally) -> float:
    """The receiver's p99 over the Collector's (below 1: a shorter tail), medians over the trials."""
    return _median(kct.p99) / _median(col.p99) if _median(col.p99) else 0.0


def _row(scenario: Scenario, kct: Tally, col: Tally) -> str:
    ratio = kct.per_cpu_s() / col.per_cpu_s() if col.per_cpu_s() else 0.0
    latency = (f"{_median(kct.p50):.1f}/{_median(kct.p99):.1f} vs {_median(col.p50):.1f}/{_median(col.p99):.1f}")
    return (f"{scenario.name:22s} {kct.per_cpu_s():9,.0f} {col.per_cpu_s():10,.0f} {ratio:6.2f} "
            f"{_p99_ratio(kct, col):9.2f}   "
            f"{kct.ok / kct.seconds if kct.seconds else 0:7,.0f} {col.ok / col.seconds if col.seconds else 0:7,.0f}"
            f"   {latency:26s} {kct.rss_peak_mb:6.0f} {col.rss_peak_mb:6.0f}"
            f"   {kct.switches_per_push():5.1f} {col.switches_per_push():5.1f}")


def _load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def measure(args: argparse.Namespace, servers: list[Server], loadgen: Path, tmp: Path) -> dict[str, Any]:
    raw = build_push(100)
    bodies = {False: tmp / "push.pb", True: tmp / "push.pb.gz"}
    bodies[False].write_bytes(raw)
    bodies[True].write_bytes(gzip.compress(raw))
    sources = write_sources(tmp, raw, args.bench_pods) if args.bench_pods else tmp / "no-sources"
    print(f"push: {len(raw)} bytes protobuf ({len(gzip.compress(raw))} gzip), 100 data points; "
          f"{args.trials} interleaved trials x {args.seconds:.0f} s per scenario and server", flush=True)
    tallies = {(s.name, srv.name): Tally() for s in args.scenarios for srv in servers}
    before = {srv.name: records_in(srv.topic) for srv in servers}
    answered = {srv.name: 0 for srv in servers}
    for trial in range(args.trials):
        for scenario in args.scenarios:
            shift = (trial + args.scenarios.index(scenario)) % len(servers)  # who goes first rotates
            for server in servers[shift:] + servers[:shift]:
                body = sources if scenario.attributed else bodies[scenario.gzip]
                figures = drive(loadgen, server, scenario, body, args.seconds)
                _add(tallies[(scenario.name, server.name)], figures)
                answered[server.name] += int(figures["ok"]) + int(figures["warmup_ok"])
                print(f"  trial {trial + 1} {scenario.name:22s} {server.name:8s} "
                      f"{figures['ok'] / figures['cpu_s'] if figures['cpu_s'] else 0:8,.0f} pushes/CPU-s  "
                      f"p50/p99 {figures['p50_ms']:.1f}/{figures['p99_ms']:.1f} ms "
                      f"(max {figures.get('max_ms', 0.0):.0f}, connections' first push p99 "
                      f"{figures.get('first_p99_ms', 0.0):.0f})  "
                      f"{figures['switches'] / figures['ok'] if figures['ok'] else 0:.1f} switches/push  "
                      f"statuses {figures['statuses']}  "
                      f"load {_load_average()}", flush=True)
                if args.threads and figures["ok"]:
                    print("      us/push by thread: " + ", ".join(
                        f"{name} {1e6 * cpu / figures['ok']:.0f}"
                        for name, cpu in sorted(figures["threads"].items(), key=lambda kv: -kv[1]) if cpu > 0),
                        flush=True)
    time.sleep(1.0)
    stored = {srv.name: records_in(srv.topic) - before[srv.name] for srv in servers}
    return {"tallies": tallies, "answered": answered, "stored": stored}


def report(args: argparse.Namespace, result: dict[str, Any]) -> dict[str, Any]:
    """One table per receiver (this checkout's `kct`, and `base`, `base2`, ... with --baseline), each against the
    Collector."""
    tallies: dict[tuple[str, str], Tally] = result["tallies"]
    print(f"\nload average after the run: {_load_average()} ({os.cpu_count()} cores, shared)")
    summary: dict[str, Any] = {}
    receivers = [name for name in result["answered"] if name != "otelcol"]
    for receiver in receivers:
        print(f"\n{receiver}:")
        print(f"{'scenario':22s} {'kct/CPU-s':>9s} {'otelcol/CPU-s':>10s} {'ratio':>6s} {'p99 ratio':>9s}   "
              f"{'kct/s':>7s} {'otel/s':>7s}   {'p50/p99 ms kct vs otelcol':26s} {'RSS MB kct':>6s} {'otelcol':>6s}"
              f"   {'switches/push kct otelcol'}")
        for scenario in args.scenarios:
            kct, col = tallies[(scenario.name, receiver)], tallies[(scenario.name, "otelcol")]
            print(_row(scenario, kct, col))
            prefix = "" if receiver == "kct" else f"{receiver}:"
            summary[prefix + scenario.name] = {
                "kct_per_cpu_s": kct.per_cpu_s(), "otelcol_per_cpu_s": col.per_cpu_s(),
                "ratio": kct.per_cpu_s() / col.per_cpu_s() if col.per_cpu_s() else 0.0,
                "kct_p50_ms": _median(kct.p50), "otelcol_p50_ms": _median(col.p50),
                "kct_p99_ms": _median(kct.p99), "otelcol_p99_ms": _median(col.p99), "p99_ratio": _p99_ratio(kct, col),
                "kct_rss_peak_mb": kct.rss_peak_mb, "otelcol_rss_peak_mb": col.rss_peak_mb,
                "kct_statuses": kct.statuses, "otelcol_statuses": col.statuses,
                "kct_late": kct.late, "otelcol_late": col.late,
                "kct_switches_per_push": kct.switches_per_push(),
                "otelcol_switches_per_push": col.switches_per_push(),
            }
    for name in result["answered"]:
        answered, stored = result["answered"][name], result["stored"][name]
        verdict = "match" if answered == stored else "MISMATCH"
        print(f"{name}: {answered} pushes answered 200, {stored} records in its topic: {verdict}")
    summary["records"] = {"answered": result["answered"], "stored": result["stored"]}
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prepare", action="store_true", help="only build/download what is missing (network)")
    parser.add_argument("--full", action="store_true", help="longer runs, more trials")
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--trials", type=int, default=None)
    parser.add_argument("--only", default="", help="comma-separated scenario names (prefix match)")
    parser.add_argument("--json", action="store_true", help="also print the summary as one JSON line")
    parser.add_argument("--threads", action="store_true",
                        help="per trial, also print each server's CPU per push by thread name")
    parser.add_argument("--attributed", action="store_true",
                        help="run the attributed scenarios (both servers adding pods' k8s.* attributes; needs "
                             "the Kubernetes binaries of dev/stack/kube.py) instead of the others")
    parser.add_argument("--pods", type=int, default=1000, help="pods in the bench's API server (--attributed)")
    parser.add_argument("--baseline", type=Path, action="append", default=[], metavar="OPERATOR_DIR",
                        help="also run the receiver of another checkout (its `operator` directory, e.g. from "
                             "`git archive main operator`) as server `base`, interleaved with the others")
    args = parser.parse_args()
    if args.prepare:
        prepare()
        return 0
    args.seconds = args.seconds or (15.0 if args.full else 5.0)
    args.trials = args.trials or (3 if args.full else 2)
    wanted = [w.strip() for w in args.only.split(",") if w.strip()]
    args.scenarios = [s for s in (ATTRIBUTED if args.attributed else QUICK)
                      if not wanted or any(s.name.startswith(w) for w in wanted)]
    collector, loadgen = collector_binary(build=True), loadgen_binary()
    STATE.mkdir(parents=True, exist_ok=True)
    kafka_broker.up(STATE, "", plugin=False, name="kafka-bench", port=KAFKA_PORT,
                    controller_port=KAFKA_CONTROLLER_PORT)
    servers: list[Server] = []
    cluster = k8s_attribution.Cluster(STATE / "kube") if args.attributed else None
    args.bench_pods = []
    try:
        create_topics(["bench-kct", "bench-otelcol", "bench-base",
                       *(f"bench-base{n}" for n in range(2, len(args.baseline) + 1))])
        with tempfile.TemporaryDirectory(prefix="kct-bench-") as tmp:
            credentials = None
            if cluster is not None:
                cluster.up()
                started = time.monotonic()
                args.bench_pods = cluster.populate(args.pods, max(1, args.pods // 20))
                print(f"API server: {len(args.bench_pods)} pods in Deployments, status.podIP written "
                      f"({time.monotonic() - started:.0f} s)", flush=True)
                credentials = cluster.write_credentials(Path(tmp))
            kct, col = start_servers(Path(tmp), collector, credentials)
            servers = [kct, col]
            for number, baseline in enumerate(args.baseline, start=1):
                name = "base" if number == 1 else f"base{number}"
                servers.append(start_receiver(Path(tmp), name, baseline.resolve(),
                                              credentials[0] if credentials else None))
            result = measure(args, servers, loadgen, Path(tmp))
            summary = report(args, result)
            if args.bench_pods:
                summary["attribution_checked"] = check_attribution(servers, args.bench_pods)
            for server in servers:
                server.stop()
    finally:
        for server in servers:
            server.stop()
        kafka_broker.down(STATE, name="kafka-bench")
        if cluster is not None:
            cluster.down()
    if args.json:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
