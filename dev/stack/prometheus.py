"""A Prometheus server for tests and the local tooling: built from its Go module, run on a free loopback port.

Standard library only, like the rest of dev/stack. `prometheus` and `promtool` are built with
`go install github.com/prometheus/prometheus/cmd/<tool>@v<PROMETHEUS_MODULE_VERSION>` (Prometheus 3.x is
published as Go module versions `v0.3MM.P` for release `3.MM.P`; its go.mod has no `replace` directive, so
`go install` accepts it) and cached under `~/.cache/kct/prometheus/<version>/bin/`. The web UI's assets are
not embedded (the `builtinassets` build tag is left off): the tests use the HTTP API only.

`started()` runs a throwaway server: its own temporary TSDB, a free loopback port, the OTLP receiver on
(`--web.enable-otlp-receiver`, accepting OTLP/HTTP on `/api/v1/otlp/v1/metrics`), stopped and removed on exit;
`scrape` adds static scrape jobs (job name -> host:port targets, /metrics every `scrape_interval`), with
`target_labels` (job name -> labels) on their targets, e.g. the `namespace` Kubernetes discovery would add.
Delta sums are stored as they come (`--enable-feature=otlp-native-delta-ingestion`): KIP-714 clients send
delta sums when the broker asks, and the export forwards a window's delta as one sample at the window's end
(kct.aggregation.otlp_metrics), which a replay sends again unchanged; Prometheus otherwise refuses deltas, and
its delta-to-cumulative conversion would add a replayed window twice.
The aggregation job's exporter sends samples stamped with each window's end, which can be older than the
server's clock; the out-of-order window lets such samples in after newer ones.

`node_up()` runs the node stack's server (stack.py node-up, inside the node's namespaces, like its Kafka): OTLP
receiver on 0.0.0.0:9090 there (pods post the aggregation's export to `http://<node IP>:9090`), scraping the
receiver and operator pods it discovers through the node stack's kubeconfig; the host reaches it through the
stack's forwarder.

    python3 dev/stack/prometheus.py install | path [prometheus|promtool] | run   (run: until Ctrl-C)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _proc

__all__ = [
    "NODE_PORT",
    "PROMETHEUS_MODULE_VERSION",
    "PROMETHEUS_VERSION",
    "PrometheusServer",
    "binary",
    "install",
    "node_config_text",
    "node_down",
    "node_status",
    "node_up",
    "started",
]

PROMETHEUS_VERSION = "3.16.0"
PROMETHEUS_MODULE_VERSION = "0.316.0"
_MODULE = "github.com/prometheus/prometheus"
TOOLS = ("prometheus", "promtool")
HOST = "127.0.0.1"
# Samples stamped with a window's end arrive after newer ones of other windows (a replayed micro-batch, a
# late window): the server accepts them within this window instead of dropping them as out of order.
OUT_OF_ORDER_WINDOW = "2h"


def _ldflags() -> str:
    # The version ldflags make `prometheus --version` and /api/v1/status/buildinfo report the release.
    common = "github.com/prometheus/common/version"
    return f"-s -w -X {common}.Version={PROMETHEUS_VERSION} -X {common}.Branch=HEAD -X {common}.Revision=kct"


def binary(tool: str = "prometheus") -> Path:
    """Where the cached `tool` (prometheus or promtool) lives; `install()` puts it there."""
    if tool not in TOOLS:
        raise ValueError(f"unknown Prometheus tool {tool!r}; known: {', '.join(TOOLS)}")
    return _proc.cache_dir("prometheus", PROMETHEUS_VERSION) / "bin" / tool


def _go() -> str:
    go = shutil.which("go") or next((p for p in ("/usr/local/go/bin/go",) if os.access(p, os.X_OK)), None)
    if go is None:
        raise _proc.InstallError("prometheus", PROMETHEUS_VERSION, "the `go` toolchain is not on PATH (Go >= 1.26.7)")
    return go


def install() -> Path:
    """Build (or find cached) prometheus and promtool; atomic per binary (a failed build leaves nothing)."""
    missing = [tool for tool in TOOLS if not binary(tool).is_file()]
    if not missing:
        print(f"==> prometheus {PROMETHEUS_VERSION}: cached in {binary().parent}", flush=True)
        return binary()
    out = binary().parent
    out.mkdir(parents=True, exist_ok=True)
    go = _go()
    with _proc.step(f"prometheus {PROMETHEUS_VERSION}: go install {' '.join(missing)} (~8 min when cold)"), \
            tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        env = dict(os.environ, GOBIN=tmp, CGO_ENABLED="0", GOFLAGS="-buildvcs=false")
        packages = [f"{_MODULE}/cmd/{tool}@v{PROMETHEUS_MODULE_VERSION}" for tool in missing]
        # Outside any module (cwd is the temporary folder), so no go.mod of ours plays a part.
        _proc.run([go, "install", "-trimpath", "-p", "2", f"-ldflags={_ldflags()}", *packages],
                  tool="prometheus", version=PROMETHEUS_VERSION, cwd=Path(tmp), env=env)
        for tool in missing:
            built = Path(tmp, tool)
            if not built.is_file():
                raise _proc.InstallError("prometheus", PROMETHEUS_VERSION, f"go install produced no {tool}")
            built.replace(binary(tool))
    return binary()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class PrometheusServer:
    """A running server: its base URL, where OTLP is posted, and a PromQL helper over the HTTP API."""

    url: str
    data_dir: Path
    log: Path

    @property
    def otlp_metrics_url(self) -> str:
        return f"{self.url}/api/v1/otlp/v1/metrics"

    def api(self, path: str, **params: str) -> Any:
        """GET `/api/v1/<path>` and return its `data`; raises on an error status."""
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as resp:
            body = json.load(resp)
        if body.get("status") != "success":
            raise RuntimeError(f"Prometheus {path} {params}: {body}")
        return body["data"]

    def query(self, promql: str, *, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query's result vector (each item: `metric` labels and `value` [time, "string"])."""
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self.api("query", **params)
        result: list[dict[str, Any]] = data["result"]
        return result


def _ready(url: str) -> bool:
    with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:
        return bool(resp.status == 200)


def config_text(scrape: Mapping[str, Sequence[str]] | None = None, scrape_interval: str = "1s",
                target_labels: Mapping[str, Mapping[str, str]] | None = None) -> str:
    """prometheus.yml: the out-of-order window (a TSDB setting of the config) and one static job per `scrape`
    entry (job -> host:port targets, labelled with `target_labels[job]`). JSON is YAML, so no YAML library."""
    config: dict[str, Any] = {"global": {}, "storage": {"tsdb": {"out_of_order_time_window": OUT_OF_ORDER_WINDOW}}}
    if scrape:
        config["scrape_configs"] = [
            {"job_name": job, "scrape_interval": scrape_interval, "scrape_timeout": scrape_interval,
             "static_configs": [{"targets": list(targets), "labels": dict((target_labels or {}).get(job, {}))}]}
            for job, targets in scrape.items()
        ]
    return json.dumps(config, indent=2) + "\n"


@contextlib.contextmanager
def started(
    *, timeout: float = 60.0, scrape: Mapping[str, Sequence[str]] | None = None, scrape_interval: str = "1s",
    target_labels: Mapping[str, Mapping[str, str]] | None = None,
) -> Iterator[PrometheusServer]:
    """A Prometheus on a free loopback port with the OTLP receiver on and a temporary TSDB, scraping `scrape`'s
    targets; stopped after."""
    prometheus = install()
    with tempfile.TemporaryDirectory(prefix="kct-prometheus-") as tmp:
        root = Path(tmp)
        config = root / "prometheus.yml"
        config.write_text(config_text(scrape, scrape_interval, target_labels))
        port = _free_port()
        log = root / "prometheus.log"
        argv = [
            str(prometheus), f"--config.file={config}", f"--storage.tsdb.path={root / 'data'}",
            f"--web.listen-address={HOST}:{port}", "--web.enable-otlp-receiver",
            "--enable-feature=otlp-native-delta-ingestion", "--log.level=warn",
        ]
        with log.open("ab") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        try:
            url = f"http://{HOST}:{port}"
            _proc.wait_until(lambda: _ready(url), timeout=timeout, what="prometheus", log=log,
                             alive=lambda: proc.poll() is None)
            yield PrometheusServer(url=url, data_dir=root / "data", log=log)
        finally:
            _proc.stop_group(proc, timeout=20)


# ------------------------------------------------------------------------ the node stack's Prometheus

NODE_NAME = "prometheus"
NODE_PORT = 9090  # inside the node stack's network namespace, on every address: pods dial <node IP>:9090

# Scrape jobs of the node stack: the pods Kubernetes discovery finds, kept by their labels and port name (as the
# chart's ServiceMonitor and PodMonitor select them), with the `namespace` and `pod` labels the rules and the
# dashboards group by.
_POD_LABELS = [
    {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
]


# The receivers serve TLS by default: their pods say so in `prometheus.io/scheme` (and the metrics path in
# `prometheus.io/path`), which the receiver job follows. Their certificates name the receiver's Service, not the
# pod addresses discovery yields, and the issued CA reaches the stack's files only once a receiver is Ready, so
# this development Prometheus does not verify them (it reads metrics, it sends nothing secret).
_ANNOTATED_SCHEME_AND_PATH = [
    {"source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_scheme"], "regex": "(https?)",
     "target_label": "__scheme__"},
    {"source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_path"], "regex": "(.+)",
     "target_label": "__metrics_path__"},
]


def _pod_job(job: str, kubeconfig: Path, keep: Mapping[str, str], port_name: str, interval: str,
             annotated: bool = False) -> dict[str, Any]:
    relabel: list[dict[str, Any]] = [
        {"source_labels": [f"__meta_kubernetes_pod_label_{_label_name(key)}"], "regex": value, "action": "keep"}
        for key, value in keep.items()
    ]
    relabel += [
        {"source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": port_name, "action": "keep"},
        {"source_labels": ["__meta_kubernetes_pod_phase"], "regex": "Running", "action": "keep"},
        *(_ANNOTATED_SCHEME_AND_PATH if annotated else []),
        *_POD_LABELS,
    ]
    job_config: dict[str, Any] = {
        "job_name": job, "scrape_interval": interval, "metrics_path": "/metrics",
        "kubernetes_sd_configs": [{"role": "pod", "kubeconfig_file": str(kubeconfig)}], "relabel_configs": relabel}
    if annotated:
        job_config["tls_config"] = {"insecure_skip_verify": True}
    return job_config


def _label_name(key: str) -> str:
    """A Kubernetes label key as Prometheus's discovery names it (app.kubernetes.io/name: app_kubernetes_io_name)."""
    return "".join(c if c.isalnum() else "_" for c in key)


def node_config_text(kubeconfig: Path, scrape_interval: str = "5s") -> str:
    """The node stack's prometheus.yml: the receivers (job kct-receiver, port http-otlp) and the operator (job
    kct-operator, port metrics) found by Kubernetes discovery through `kubeconfig`, and the out-of-order window
    the export needs. JSON is YAML."""
    config = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "storage": {"tsdb": {"out_of_order_time_window": OUT_OF_ORDER_WINDOW}},
        "scrape_configs": [
            _pod_job("kct-receiver", kubeconfig, {"app.kubernetes.io/name": "kct-receiver",
                                                  "app.kubernetes.io/managed-by": "kct-operator"},
                     "http-otlp", scrape_interval, annotated=True),
            _pod_job("kct-operator", kubeconfig, {"app.kubernetes.io/name": "kct",
                                                  "app.kubernetes.io/component": "operator"},
                     "metrics", scrape_interval),
        ],
    }
    return json.dumps(config, indent=2) + "\n"


def node_up(state: Path, kubeconfig: Path, *, port: int = NODE_PORT) -> dict[str, str]:
    """Start the node stack's Prometheus (idempotent) on 0.0.0.0:`port` of the caller's network namespace (the
    node's: stack.py calls it inside), OTLP receiver on, its TSDB under `state`; wait until ready."""
    prometheus = install()
    root = state / NODE_NAME
    root.mkdir(parents=True, exist_ok=True)
    config = root / "prometheus.yml"
    wanted = node_config_text(kubeconfig)
    url = f"http://{HOST}:{port}"
    log = state / "logs" / f"{NODE_NAME}.log"
    if _proc.is_running(state, NODE_NAME) and config.exists() and config.read_text() == wanted:
        _proc.wait_until(lambda: _ready(url), timeout=60, what="prometheus", log=log,
                         alive=lambda: _proc.is_running(state, NODE_NAME))
        return {"KCT_NODE_PROMETHEUS_PORT_IN_NODE": str(port)}
    _proc.stop_daemon(state, NODE_NAME)
    config.write_text(wanted)
    with _proc.step(f"start Prometheus {PROMETHEUS_VERSION} on 0.0.0.0:{port} (OTLP receiver on)"):
        _proc.start_daemon(state, NODE_NAME, [
            str(prometheus), f"--config.file={config}", f"--storage.tsdb.path={root / 'data'}",
            f"--web.listen-address=0.0.0.0:{port}", "--web.enable-otlp-receiver",
            "--enable-feature=otlp-native-delta-ingestion", "--log.level=warn",
        ])
        _proc.wait_until(lambda: _ready(url), timeout=60, what="prometheus", log=log,
                         alive=lambda: _proc.is_running(state, NODE_NAME))
    return {"KCT_NODE_PROMETHEUS_PORT_IN_NODE": str(port)}


def node_down(state: Path) -> None:
    _proc.stop_daemon(state, NODE_NAME)


def node_status(state: Path, port: int = NODE_PORT) -> list[str]:
    if not _proc.is_running(state, NODE_NAME):
        return [f"prometheus {PROMETHEUS_VERSION}: stopped"]
    return [f"prometheus {PROMETHEUS_VERSION}: running (pid {_proc.read_pid(state, NODE_NAME)}) on "
            f"0.0.0.0:{port}, OTLP on /api/v1/otlp/v1/metrics"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("install", help="build prometheus and promtool (cached)")
    path = sub.add_parser("path", help="print a tool's path, building it when missing")
    path.add_argument("tool", nargs="?", default="prometheus", choices=TOOLS)
    sub.add_parser("run", help="run a throwaway server until interrupted")
    args = parser.parse_args(argv)
    try:
        if args.command == "install":
            install()
        elif args.command == "path":
            install()
            print(binary(args.tool))
        else:
            with started() as server:
                print(f"prometheus: {server.url} (OTLP: {server.otlp_metrics_url}); Ctrl-C stops it", flush=True)
                with contextlib.suppress(KeyboardInterrupt):
                    signal.pause()
    except _proc.InstallError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
