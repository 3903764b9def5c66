#!/usr/bin/env python3
"""`make demo`: the whole system end to end on the node stack (real pods), with real Kafka clients.

    .venv/bin/python dev/demo/demo.py [--duration 60] [--keep-stack] [--narrow-window 20] [--local-aggregation]

Steps (each printed with its duration; the first failing step stops the run, cleanup always runs):

  1. the node stack (`dev/stack/stack.py node-up`: its control plane, a kubelet-backed node, Kafka with the
     plugin, our runtime image in containerd; `make images` builds that image). The loopback stack is not
     used: the node stack has everything the demo needs, so one stack is started, not two.
  2. the operator as users install it: `helm upgrade --install` of helm/kct (the chart's CRDs, ServiceAccount
     and RBAC) with our image and the node stack's Kafka as the default cluster
  3. the Kubeflow spark-operator on the node (dev/stack/spark_on_node.py, as its e2e test installs it): our
     `kct-spark` image and the spark-operator's image (`make images`, `make spark-operator`) imported into
     the node, the claim `aggregates` bound to a hostPath PersistentVolume (storage class kct-local), the
     NetworkPolicy grant Spark 4.2's spark-submit needs, and `helm upgrade --install` of the module's chart
     with the demo namespace as its job namespace
  4. the examples: examples/subscriptions/ and examples/demo/ in namespace kct-telemetry (a subscription
     matching the demo clients, TelemetryReceiver `telemetry`, the one the node stack's broker plugin posts
     to, whose push token is a Secret made from the stack's token; spec.image and spec.aggregation.image set
     to our images): the operator renders its SparkApplication, the spark-operator starts a driver pod, the
     driver an executor pod
  5. the TelemetryReceiver Ready=True: its Deployment's pods run on the node
  6. real Kafka clients for `--duration` seconds: as pods on the node (dev/demo/client_pods.py), a producer
     Deployment `demo-shop-producer` (two librdkafka pods, our runtime image) and a consumer StatefulSet
     `demo-shop-consumer` (a Java kafka-clients pod, the kct-spark image), each with its pod's name as
     client.id, applied with the examples (step 4) and waited for until both workloads pushed; and on the
     host, confluent-kafka producers and consumers each with its own client.id and software name/version,
     against the node stack's Kafka (its loopback forwarder). All push their metrics
     through the broker plugin to the receiver's Service; the receiver attributes the pods' pushes to their
     pod and workload (the host clients' address is no pod's: unattributed)
  7. narrowing: the subscription's `match.clientId` is changed to one client, and pushes are counted
     per client id in the topic after one push interval: only that client may still push
  8. the aggregation on the node: wait (`--aggregate-timeout`) until the Parquet the executor writes to the
     claim has rows for every demo client; the narrowed client keeps pushing meanwhile, since a streaming
     window is final only once points past its end plus the watermark arrived. On timeout: the
     SparkApplication's state, the Spark pods and the driver's last log lines.
  9. the clients stop; the pushes are read from the topic, the Parquet from the host side of the volume
  10. the summary (subscriptions, the receiver with its pods, the SparkApplication with its state and its
     driver and executor pods and the receiver's status.aggregation, clients, pushes, per-client aggregates,
     narrowing) and an HTML report with plots; the operator's, receivers', Spark pods' and spark-operator's
     logs are saved under logs/

`--local-aggregation` (for development) skips step 3 and replaces step 8 by `kct aggregate` (Spark local mode,
on the host) with the operator's rendered aggregation config, read to the end of the topic, after the clients
stopped.

Outputs go to build/demo/ (report.html, summary.txt, aggregates/, logs/). The exit code is 0 only when every
step succeeded, the receiver was Ready with running pods, the SparkApplication RUNNING with driver and executor
pods on the node, every demo client has aggregates and the narrowing step showed only the chosen client
pushing. The stack is stopped at the end unless `--keep-stack` (or KEEP=1) or it was already running before the
demo started (then it is left as found, and so are the demo's resources and the Helm releases unless
`--remove-resources`).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "dev" / "stack"))

import aggregation_view as agg_view  # noqa: E402
import prometheus_view as prom_view  # noqa: E402
import spark_on_node  # noqa: E402  (dev/stack: the spark-operator on the node, shared with its e2e test)
from client_pods import ClientPods, as_list, render_client_pods, selector  # noqa: E402
from clients import DEMO_CLIENTS, ClientFleet, ensure_topics  # noqa: E402
from report import (  # noqa: E402
    CLIENT_HEADER,
    KEY_METRICS,
    WORKLOAD_HEADER,
    Push,
    client_aggregates,
    client_rows,
    format_table,
    html_report,
    metric_series,
    svg_line_chart,
    svg_push_timeline,
    workload_of,
    workload_rows,
)

KCT = REPO / ".venv" / "bin" / "kct"
STACK = REPO / "dev" / "stack" / "stack.py"
STACK_ENV = REPO / "build" / "node-stack.env"
TOOLS = REPO / "dev" / "tools" / "tools.py"
CHART = REPO / "helm" / "kct"
RELEASE, RELEASE_NAMESPACE = "kct", "kct-system"  # the operator's Helm release
# The node stack's broker plugin posts to the Service of TelemetryReceiver `telemetry` in `kct-telemetry`.
NAMESPACE = "kct-telemetry"
SUBSCRIPTION = "demo-clients"  # examples/demo/subscription.yaml
RECEIVER = "telemetry"  # examples/demo/telemetryreceiver.yaml
RECEIVER_PODS = "app.kubernetes.io/component=receiver,app.kubernetes.io/instance=" + RECEIVER
SPARK_PODS = "spark-role"  # the label Spark on Kubernetes puts on its driver and executor pods
TOKEN_SECRET = "demo-push-token"  # referenced by examples/demo/telemetryreceiver.yaml
KAFKA_SECRET = "demo-kafka-client"  # --kafka-sasl: the node broker's SASL_SSL user and CA, one property per key
NARROW_TO = "demo-orders-producer"
CLIENT_PODS = "demo-shop"  # the client workloads' prefix: demo-shop-producer (Deployment), demo-shop-consumer
CLIENT_PODS_TOPIC = "demo-orders"
IMAGES = REPO / "dev" / "images" / "images.py"
SUBSCRIPTION_COLUMNS = "custom-columns=" + ",".join((
    "NAME:.metadata.name",
    "CLIENT_METRICS:.status.subscriptionName",
    "INTERVAL:.status.appliedConfigs.interval\\.ms",
    "MATCH:.status.appliedConfigs.match",
    'READY:.status.conditions[?(@.type=="Ready")].status',
    'REASON:.status.conditions[?(@.type=="Ready")].reason',
))


class DemoError(RuntimeError):
    """A step failed; the message says what and where to look."""


def log(message: str = "") -> None:
    print(message, flush=True)


class Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out: Path = args.out.resolve()
        self.logs = self.out / "logs"
        self.ns = NAMESPACE
        self.helm: list[str] = []
        self.receiver_pods: list[str] = []
        self.env = dict(os.environ)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.fleet: ClientFleet | None = None
        self.stack_was_running = False
        self.step_no = 0
        self.started = time.monotonic()
        self.run_start_ms = int(time.time() * 1000)
        self.notes: list[str] = []
        self.failures: list[str] = []
        self.interval_ms = 5000
        self.topic = ""
        self.narrow: dict[str, Any] = {}
        self.fleet_started = 0.0
        self.fleet_stopped = 0.0
        self.local = bool(args.local_aggregation)
        self.spark: spark_on_node.Installed | None = None
        self.namespace_ready = False
        self.applied_at = 0.0        # monotonic: `kubectl apply` of the TelemetryReceiver
        self.first_parquet_s: float | None = None  # seconds from that apply to the first client_metrics file
        self.aggregates_s: float | None = None     # ... to Parquet rows for every demo client
        self.spark_sections: list[tuple[str, str, list[str], list[Any]]] = []  # for the HTML report

    # ---------------------------------------------------------------- helpers
    @contextlib.contextmanager
    def step(self, what: str) -> Iterator[None]:
        self.step_no += 1
        log(f"==> [{self.step_no}] {what}")
        t0 = time.monotonic()
        yield
        log(f"    done in {time.monotonic() - t0:.1f}s")

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 120) -> str:
        proc = subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True, env=self.env,
                              timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise DemoError(f"kubectl {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc.stdout

    def kget(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-n", self.ns, "-o", "json"))

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        logfile = (self.logs / f"{name}.log").open("ab")
        proc = subprocess.Popen(argv, stdout=logfile, stderr=subprocess.STDOUT, env=env or self.env, cwd=REPO,
                                start_new_session=True)
        self.procs[name] = proc
        return proc

    def stop(self, name: str, timeout: float = 25) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def alive(self, name: str) -> None:
        proc = self.procs[name]
        if proc.poll() is not None:
            tail = (self.logs / f"{name}.log").read_text(errors="replace").splitlines()[-15:]
            raise DemoError(f"{name} exited with code {proc.returncode}; last lines of "
                            f"{self.logs / (name + '.log')}:\n      " + "\n      ".join(tail))

    def wait_for(self, check: Any, *, timeout: float, what: str, alive: str | None = None) -> Any:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            if alive:
                self.alive(alive)
            with contextlib.suppress(Exception):
                last = check()
                if last:
                    return last
            time.sleep(0.5)
        raise DemoError(f"timed out after {timeout:.0f}s waiting for {what}")

    # ---------------------------------------------------------------- steps
    def stack_up(self) -> None:
        with self.step("node stack (control plane, a node: containerd, kubelet, kube-proxy, CoreDNS; Kafka with "
                       "the plugin)"):
            status = subprocess.run([sys.executable, str(STACK), "node-status"], capture_output=True, text=True,
                                    check=False)
            self.stack_was_running = STACK_ENV.exists() and status.returncode == 0 and "stopped" not in status.stdout
            if self.stack_was_running:
                log("    already running: left as found")
            else:
                # streamed: on a fresh machine this installs (builds) the servers first, which takes minutes
                proc = subprocess.Popen([sys.executable, str(STACK), "node-up"], stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
                assert proc.stdout is not None
                seen: list[str] = []
                for line in proc.stdout:
                    seen.append(line)
                    log("    " + line.rstrip())
                if proc.wait() != 0:
                    raise DemoError("node-up failed:\n" + "".join(seen[-40:]))
            for line in STACK_ENV.read_text().splitlines():
                key, _, value = line.partition("=")
                if key:
                    self.env[key] = value
            if not self.env.get("KCT_NODE_KCT_IMAGE"):
                raise DemoError("the node stack has no runtime image for these sources: run `make images`, then "
                                "`make node-down` if it was running, and `make demo` again")

    def operator(self) -> None:
        image = self.env["KCT_NODE_KCT_IMAGE"]
        with self.step(f"the operator as pods: helm install {_rel(CHART)} (image {image}, the chart's RBAC)"):
            tool = subprocess.run([sys.executable, str(TOOLS), "path", "helm"], capture_output=True, text=True,
                                  timeout=1200, check=False)
            if tool.returncode != 0:
                raise DemoError(f"no helm: {tool.stderr.strip()}")
            self.helm = [tool.stdout.strip().splitlines()[-1], f"--kubeconfig={self.env['KUBECONFIG']}"]
            # As docs/operations.md upgrades: the CRDs first, since helm never updates a chart's crds/ and a kept
            # node stack has those of an older checkout (the API server would prune the new status fields).
            # `--force-conflicts`: an earlier helm install may own them.
            self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CHART / "crds"))
            log(f"    kubectl apply --server-side -f {_rel(CHART / 'crds')} (the CRDs of this checkout)")
            repository, tag = image.rsplit(":", 1)
            values = {"image.repository": repository, "image.tag": tag,
                      "image.pullPolicy": "Never",  # imported into containerd by node-up, never pulled
                      # every broker, the commas escaped: helm's --set splits at a bare one
                      "kafka.bootstrapServers": self.env["KCT_NODE_KAFKA_POD_BOOTSTRAP"].replace(",", "\\,"),
                      "replicas": "1",  # one operator pod is enough to show; the chart's default is 2
                      "operator.resyncSeconds": "10"}
            argv = [*self.helm, "upgrade", "--install", RELEASE, str(CHART), "-n", RELEASE_NAMESPACE,
                    "--create-namespace", "--wait", "--timeout", "300s"]
            for key, value in values.items():
                argv += ["--set", f"{key}={value}"]
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=360, check=False)
            (self.logs / "helm.log").write_text(proc.stdout + proc.stderr)
            if proc.returncode != 0:
                raise DemoError(f"helm install failed: {proc.stderr.strip()}")
            log(f"    helm upgrade --install {RELEASE} {_rel(CHART)} -n {RELEASE_NAMESPACE} "
                + " ".join(f"--set {k}={v}" for k, v in values.items()))
            pods = self.kubectl("get", "pods", "-n", RELEASE_NAMESPACE, "-o",
                                "custom-columns=NAME:.metadata.name,STATUS:.status.phase,"
                                "SERVICEACCOUNT:.spec.serviceAccountName,NODE:.spec.nodeName").rstrip()
            for line in pods.splitlines():
                log("    " + line)

    def _access(self) -> spark_on_node.NodeAccess:
        return spark_on_node.NodeAccess(kubeconfig=Path(self.env["KUBECONFIG"]),
                                        node_exec=Path(self.env["KCT_NODE_EXEC"]))

    def _fresh_namespace(self) -> None:
        """The demo namespace, without an earlier run's subscriptions, receivers and Spark applications (whose
        checkpoint names offsets of the topic that went with its receiver)."""
        if self.namespace_ready:
            return
        existing = self.kubectl("get", "namespace", self.ns, "--ignore-not-found", "-o", "name").strip()
        if existing:
            log(f"    namespace {self.ns} exists from an earlier run: removing its resources first")
            self.kubectl("delete", "clientmetricssubscriptions,telemetryreceivers", "--all", "-n", self.ns,
                         "--wait", "--timeout=90s", timeout=120)
            spark_on_node.remove_applications(self._access(), self.ns)
        else:
            self.kubectl("create", "namespace", self.ns)
        self.namespace_ready = True

    def spark_operator(self) -> None:
        with self.step("the spark-operator on the node: helm upgrade --install of its chart (v2.4.0: controller, "
                       "webhook, CRDs, RBAC), the kct-spark image, a volume for the aggregates"):
            self._fresh_namespace()
            try:
                self.spark = spark_on_node.install(self._access(), self.ns, empty_volume=True,
                                                   progress=lambda line: log("    " + line))
            except spark_on_node.SparkOnNodeError as error:
                raise DemoError(str(error)) from error
            s = self.spark
            for reference, size in s.archive_mb.items():
                took = s.import_seconds.get(reference)
                log(f"    image {reference} ({size} MB): "
                    + (f"imported into the node's containerd in {took:.0f}s" if took is not None else "on the node"))
            log(f"    PersistentVolume {spark_on_node.volume_name(self.ns)} (hostPath {_rel(s.volume)}, storage class "
                f"{spark_on_node.STORAGE_CLASS}, no provisioner) bound to claim {self.ns}/{s.claim}")
            log(f"    Role {spark_on_node.GRANT} in {self.ns}: spark-submit's NetworkPolicy per driver (Spark 4.2), "
                "which the chart's controller Role lacks")
            log(f"    the chart's --set: {' '.join(spark_on_node.helm_values(s.operator_image, self.ns)[1::2])}; "
                f"drivers run as ServiceAccount {s.service_account}")
            pods = self.kubectl("get", "pods", "-n", s.release_namespace, "-o",
                                "custom-columns=NAME:.metadata.name,STATUS:.status.phase,NODE:.spec.nodeName").rstrip()
            for line in pods.splitlines():
                log("    " + line)

    def apply_examples(self) -> None:
        with self.step(f"apply examples/subscriptions/ and examples/demo/ in namespace {self.ns}"):
            self._fresh_namespace()
            token = Path(self.env["KCT_RECEIVER_TOKEN_FILE"]).read_text().strip()
            secret = self.kubectl("create", "secret", "generic", TOKEN_SECRET, "-n", self.ns,
                                  f"--from-literal=token={token}", "--dry-run=client", "-o", "yaml")
            self.kubectl("apply", "-f", "-", stdin=secret)
            log(f"    secret {TOKEN_SECRET}: the stack's push token (the one the broker plugin sends)")
            receiver = yaml.safe_load((REPO / "examples" / "demo" / "telemetryreceiver.yaml").read_text())
            receiver["spec"].update(image=self.env["KCT_NODE_KCT_IMAGE"], imagePullPolicy="Never")
            log(f"    examples/demo/telemetryreceiver.yaml with spec.image {self.env['KCT_NODE_KCT_IMAGE']} "
                "(built by `make images`, imported by node-up)")
            if self.spark is not None:
                receiver["spec"]["aggregation"] = agg_view.receiver_aggregation(
                    receiver["spec"]["aggregation"], image=self.spark.job_image, claim=self.spark.claim,
                    service_account=self.spark.service_account)
                if self.env.get("KCT_NODE_PROMETHEUS_POD_URL"):
                    export = prom_view.export_spec(self.env["KCT_NODE_PROMETHEUS_POD_URL"])
                    receiver["spec"]["aggregation"]["export"] = export
                    log(f"    spec.aggregation.export.endpoint {export['endpoint']} (the node's Prometheus)")
                log(f"    ... and spec.aggregation.image {self.spark.job_image} (`make images`), sinkClaimName "
                    f"{self.spark.claim}, driver.serviceAccount {self.spark.service_account}")
            sub = yaml.safe_load((REPO / "examples" / "demo" / "subscription.yaml").read_text())
            if self.args.kafka_sasl:
                kafka = self._kafka_sasl_secret()
                receiver["spec"]["kafka"] = sub["spec"]["kafka"] = kafka
                log(f"    ... and spec.kafka {kafka} on the receiver and subscription {SUBSCRIPTION}: the operator, "
                    "the receivers and the Spark job connect through SASL_SSL (SCRAM-SHA-512)")
            out = self.kubectl("apply", "-n", self.ns, "-f", str(REPO / "examples" / "subscriptions"))
            out += self.kubectl("apply", "-n", self.ns, "-f", "-", stdin=yaml.safe_dump(sub))
            self.applied_at = time.monotonic()
            out += self.kubectl("apply", "-n", self.ns, "-f", "-", stdin=yaml.safe_dump(receiver))
            for line in out.splitlines():
                log("    " + line)
            self.interval_ms = int(sub["spec"]["intervalMs"])
            self.kubectl("wait", "--for=condition=Ready", "clientmetricssubscriptions", "--all", "-n", self.ns,
                         "--timeout=90s", timeout=100)
            self.kubectl("wait", "--for=condition=TopicReady", f"telemetryreceiver/{RECEIVER}", "-n", self.ns,
                         "--timeout=90s", timeout=100)
            log("    every ClientMetricsSubscription is Ready (configs on the broker); the receiver's topic exists")
            # Started now, not with the host clients: a JVM compiling its client takes tens of seconds on a busy
            # machine, which the receiver's start overlaps.
            ensure_topics(self.env["KAFKA_BOOTSTRAP_SERVERS"], [CLIENT_PODS_TOPIC])
            self._start_client_pods()

    def _kafka_sasl_secret(self) -> dict[str, Any]:
        """The Secret of the node broker's SASL_SSL user (build/node-stack.env names its files); the spec.kafka
        that points at the pods' SASL_SSL listener with it."""
        env = self.env
        secret = self.kubectl(
            "create", "secret", "generic", KAFKA_SECRET, "-n", self.ns, "--dry-run=client", "-o", "yaml",
            "--from-literal=security.protocol=SASL_SSL",
            f"--from-literal=sasl.mechanism={env['KCT_KAFKA_SASL_MECHANISM']}",
            f"--from-literal=sasl.username={env['KCT_KAFKA_SASL_USERNAME']}",
            f"--from-file=sasl.password={env['KCT_KAFKA_SASL_PASSWORD_FILE']}",
            f"--from-file=ssl.ca.pem={env['KCT_KAFKA_CA_FILE']}")
        self.kubectl("apply", "-f", "-", stdin=secret)
        log(f"    secret {KAFKA_SECRET}: the node broker's SCRAM user and the stack's CA (client properties)")
        return {"bootstrapServers": env["KCT_NODE_KAFKA_POD_SASL_SSL_BOOTSTRAP"], "secretRef": {"name": KAFKA_SECRET}}

    def _rendered(self, key: str) -> dict[str, Any]:
        """The config file (ConfigMap key `key`) the operator rendered for the demo TelemetryReceiver."""
        status = self.kget(f"telemetryreceiver/{RECEIVER}").get("status", {})
        for child in status.get("children", []):
            kind, _, name = child.partition("/")
            if kind != "ConfigMap":
                continue
            data = self.kget(f"configmap/{name}").get("data", {})
            if key in data:
                loaded: dict[str, Any] = yaml.safe_load(data[key])
                log(f"    read ConfigMap {self.ns}/{name} (key {key}), rendered by the operator")
                return loaded
        raise DemoError(f"no ConfigMap with key {key} among the children of TelemetryReceiver {RECEIVER}")

    def _running_receiver_pods(self) -> list[str]:
        pods = self.kget("pods", "-l", RECEIVER_PODS)["items"]
        return sorted(p["metadata"]["name"] for p in pods
                      if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
                      and all(c.get("ready") for c in p["status"].get("containerStatuses", [{}])))

    def receiver(self) -> None:
        with self.step(f"TelemetryReceiver {RECEIVER} Ready=True with its pods on the node"):
            def ready() -> bool:
                conditions = self.kget(f"telemetryreceiver/{RECEIVER}").get("status", {}).get("conditions", [])
                return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

            self.wait_for(ready, timeout=300, what=f"TelemetryReceiver {RECEIVER} Ready=True")
            self._publish_receiver_ca()
            self.receiver_pods = self.wait_for(self._running_receiver_pods, timeout=60,
                                               what="running, ready receiver pods")
            config = self._rendered("receiver.yaml")
            self.topic = config["kafka"]["topic"]
            for line in self.kubectl("get", "pods", "-n", self.ns, "-l", RECEIVER_PODS, "-o", "wide").splitlines():
                log("    " + line)
            log(f"    Ready=True; receiver pods {', '.join(self.receiver_pods)} write to topic {self.topic}; the "
                f"broker plugin posts to {self.env.get('KCT_TELEMETRY_ENDPOINT')}")

    def _receiver_ca_file(self) -> Path:
        """The CA bundle the node stack's broker plugin trusts (`kct.telemetry.tls.ca.file`, dev/stack/stack.py)."""
        return Path(self.env.get("KCT_RECEIVER_CA_FILE") or Path(self.env["KUBECONFIG"]).parent / "receiver-ca.pem")

    def _publish_receiver_ca(self) -> None:
        """Write the receiver's published CA bundle (status.tls.caBundleSecret) where the plugin reads it; the plugin
        re-reads the file when it changes. Written whole (a rename): it never reads half of it."""
        where = (self.kget(f"telemetryreceiver/{RECEIVER}").get("status", {}).get("tls") or {}).get("caBundleSecret")
        if not where:
            log("    the receiver publishes no CA bundle (TLS disabled?): the plugin's trust file is left alone")
            return
        name, _, key = where.partition("/")
        bundle = base64.b64decode(self.kget(f"secret/{name}")["data"][key]).decode()
        target = self._receiver_ca_file()
        staged = target.with_name(f".{target.name}.new")
        staged.write_text(bundle)
        os.replace(staged, target)
        log(f"    the receiver's CA bundle ({where}) written to {target} for the broker plugin")

    def clients(self) -> None:
        duration = float(self.args.duration)
        with self.step(f"Kafka clients for {duration:.0f}s, as pods on the node and on the host (pushes every "
                       f"{self.interval_ms / 1000:.0f}s through the broker plugin)"):
            ensure_topics(self.env["KAFKA_BOOTSTRAP_SERVERS"], sorted({c.topic for c in DEMO_CLIENTS}))
            t_pods = time.monotonic()
            self.wait_for(self._client_pods_pushing, timeout=240,
                          what="a push from each client workload's pods on the receiver's topic")
            log(f"    pushes from both client workloads on the topic (waited {time.monotonic() - t_pods:.0f}s)")
            log(f"    on the host: {len(DEMO_CLIENTS)} confluent-kafka clients (not pods: their pushes stay "
                "unattributed)")
            rows = [(c.client_id, c.role, f"{c.software_name} {c.software_version}", c.topic,
                     f"{c.rate:.0f} msg/s" if c.role == "producer" else f"group {c.group}") for c in DEMO_CLIENTS]
            for line in format_table(["client.id", "role", "client.software", "topic", "load"], rows).splitlines():
                log("    " + line)
            self.fleet = ClientFleet(self.env["KAFKA_BOOTSTRAP_SERVERS"], log_file=self.logs / "clients.log")
            self.fleet.start()
            self.fleet_started = time.time()
            t0 = time.monotonic()
            next_report = 15.0
            while (left := duration - (time.monotonic() - t0)) > 0:
                time.sleep(min(1.0, left))
                self._fleet_ok()
                self._watch_aggregation()
                if time.monotonic() - t0 < min(next_report, duration):
                    continue
                next_report += 15
                produced = sum(c.produced for c in self.fleet.counters.values())
                consumed = sum(c.consumed for c in self.fleet.counters.values())
                log(f"    t+{time.monotonic() - t0:3.0f}s  produced {produced}  consumed {consumed}  "
                    f"pushes stored {self._receiver_pushes()}{self._spark_progress()}")

    def _java_image(self) -> str:
        """The kct-spark image (Java, kafka-clients) on the node: the spark-operator step imported it, else (local
        aggregation) it is imported here."""
        if self.spark is not None:
            return self.spark.job_image
        proc = subprocess.run([sys.executable, str(IMAGES), "plan", "kct-spark"], capture_output=True, text=True,
                              timeout=120, check=False)
        archive, _, reference = proc.stdout.strip().rpartition("\n")[2].partition("\t")
        if proc.returncode != 0 or not reference or not Path(archive).is_file():
            raise DemoError("no kct-spark image for these sources (the Java client pod runs it): run `make images`")
        spark_on_node.import_image(self._access(), Path(archive), reference)
        return reference

    def client_pods(self) -> ClientPods:
        return ClientPods(namespace=self.ns, name=CLIENT_PODS, bootstrap=self.env["KCT_NODE_KAFKA_POD_BOOTSTRAP"],
                          topic=CLIENT_PODS_TOPIC, librdkafka_image=self.env["KCT_NODE_KCT_IMAGE"],
                          java_image=self._java_image())

    def _start_client_pods(self) -> None:
        pods = self.client_pods()
        self.kubectl("apply", "-f", "-", stdin=json.dumps(as_list(render_client_pods(pods))))
        log(f"    pods: Deployment {pods.name}-producer ({pods.producer_replicas} librdkafka pods, "
            f"{pods.rate_per_s:.0f} msg/s each) and StatefulSet {pods.name}-consumer ({pods.consumer_replicas} Java "
            f"kafka-clients pod) on topic {pods.topic}; client.id = the pod's name")

    def _fleet_ok(self) -> None:
        assert self.fleet is not None
        if self.fleet.failures:
            raise DemoError("client failed: " + "; ".join(self.fleet.failures))

    def _watch_aggregation(self) -> None:
        """Notes when the first client_metrics Parquet file appears on the claim's volume."""
        if self.spark is not None and self.first_parquet_s is None and agg_view.parquet_files(self.spark.volume):
            self.first_parquet_s = time.monotonic() - self.applied_at

    def _spark_pods(self) -> list[dict[str, Any]]:
        pods: list[dict[str, Any]] = self.kget("pods", "-l", SPARK_PODS)["items"]
        return pods

    def _spark_progress(self) -> str:
        """`  SparkApplication RUNNING, pods driver+executor, 3 Parquet files` for the progress lines."""
        if self.spark is None:
            return ""
        apps = self.kget("sparkapplications")["items"]
        state = apps[0].get("status", {}).get("applicationState", {}).get("state", "-") if apps else "none yet"
        roles = "+".join(sorted(agg_view.running_roles(self._spark_pods()))) or "none running"
        return (f"  SparkApplication {state}, pods {roles}, "
                f"{len(agg_view.parquet_files(self.spark.volume))} Parquet files")

    def _receiver_pushes(self) -> str:
        """The receiver pods' kct_receiver_pushes_total, summed; read in the node's network namespace, where pod
        addresses answer (the host's network has no route to them)."""
        ips = [p["status"].get("podIP", "") for p in self.kget("pods", "-l", RECEIVER_PODS)["items"]]
        # https with the receiver's CA; a pod address is not among the certificate's (Service) names
        script = ("import ssl, sys, urllib.request\n"
                  "ctx = ssl.create_default_context(cafile=sys.argv[1])\n"
                  "ctx.check_hostname = False\n"
                  "for ip in sys.argv[2:]:\n"
                  "    print(urllib.request.urlopen(f'https://{ip}:4318/metrics', timeout=3, context=ctx).read()"
                  ".decode())\n")
        try:
            proc = subprocess.run([self.env["KCT_NODE_EXEC"], sys.executable, "-c", script,
                                   str(self._receiver_ca_file()), *filter(None, ips)],
                                  capture_output=True, text=True, timeout=15, check=True)
        except (OSError, subprocess.SubprocessError):
            return "?"
        total = 0.0
        for line in proc.stdout.splitlines():
            if line.startswith("kct_receiver_pushes_total"):
                total += float(line.rsplit(" ", 1)[1])
        return f"{total:.0f}"

    def narrowing(self) -> None:
        window = float(self.args.narrow_window)
        with self.step(f"narrow subscription {SUBSCRIPTION} to match.clientId={NARROW_TO}"):
            before = self.kget(f"clientmetricssubscription/{SUBSCRIPTION}")
            old_match = before["spec"].get("match", {})
            patch = {"spec": {"match": {"clientId": NARROW_TO}}}
            self.kubectl("patch", "clientmetricssubscription", SUBSCRIPTION, "-n", self.ns, "--type=merge",
                         "-p", json.dumps(patch))
            t_patch = time.time()
            generation = self.kget(f"clientmetricssubscription/{SUBSCRIPTION}")["metadata"]["generation"]

            def reconciled() -> bool:
                doc = self.kget(f"clientmetricssubscription/{SUBSCRIPTION}")
                status = doc.get("status", {})
                ready = [c for c in status.get("conditions", []) if c["type"] == "Ready"]
                return bool(status.get("observedGeneration") == generation and ready and ready[0]["status"] == "True")

            self.wait_for(reconciled, timeout=60, what="the operator to apply the narrowed match")
            t_applied = time.time()
            log(f"    match.clientId {old_match.get('clientId')!r} -> {NARROW_TO!r}: on the broker after "
                f"{t_applied - t_patch:.1f}s (observedGeneration {generation}, Ready)")
            # Clients learn the change on their next push (the broker answers UNKNOWN_SUBSCRIPTION_ID, they
            # fetch the new subscription): allow one interval plus one push in flight, then count.
            settle = 2 * self.interval_ms / 1000 + 2
            start, end = t_applied + settle, t_applied + settle + window
            log(f"    waiting {settle:.0f}s (one push interval plus one in flight), then counting pushes per "
                f"client id for {window:.0f}s")
            while time.time() < end + 2:
                time.sleep(1)
                self._fleet_ok()
                self._watch_aggregation()
            self.narrow = {"t_patch": t_patch, "t_applied": t_applied, "start": start, "end": end,
                           "before_start": t_patch - window, "window": window}

    def aggregation_on_node(self) -> None:
        assert self.spark is not None
        window = yaml.safe_load((REPO / "examples" / "demo" / "telemetryreceiver.yaml").read_text())[
            "spec"]["aggregation"]["window"]
        timeout = float(self.args.aggregate_timeout)
        with self.step(f"the aggregation on the node: the spark-operator runs the SparkApplication (driver and "
                       f"executor pods), Parquet on the claim for every demo client (up to {timeout:.0f}s)"):
            log(f"    a {window['sizeSeconds']}s window is final once points {window['watermarkSeconds']}s past its "
                f"end arrived: {NARROW_TO} keeps pushing meanwhile")
            wanted = {c.client_id for c in DEMO_CLIENTS}
            t0 = time.monotonic()
            next_report = 15.0
            while not wanted <= (have := agg_view.aggregated_client_ids(self.spark.volume)):
                self._fleet_ok()
                self._watch_aggregation()
                if time.monotonic() - t0 > timeout:
                    raise DemoError(f"no aggregates on the claim for {', '.join(sorted(wanted - have))} after "
                                    f"{timeout:.0f}s (have: {', '.join(sorted(have)) or 'none'}):\n"
                                    + _indent(self._spark_diagnostics()))
                if time.monotonic() - t0 >= next_report:
                    next_report += 15
                    log(f"    t+{time.monotonic() - t0:3.0f}s {self._spark_progress()}; clients aggregated: "
                        f"{', '.join(sorted(have)) or 'none yet'}")
                time.sleep(2)
            self.aggregates_s = time.monotonic() - self.applied_at
            self._watch_aggregation()
            log(f"   {self._spark_progress()}; every demo client has client_metrics rows")
            log(f"    kubectl apply of the TelemetryReceiver -> first Parquet file {self.first_parquet_s or 0:.0f}s, "
                f"-> rows for every demo client {self.aggregates_s:.0f}s")

    def _spark_diagnostics(self) -> str:
        """The SparkApplication's state and message, the Spark pods and the driver's last log lines."""
        parts = []
        for app in self.kget("sparkapplications")["items"]:
            state = app.get("status", {}).get("applicationState", {})
            parts.append(f"SparkApplication {app['metadata']['name']}: {state.get('state', '-')} "
                         f"{state.get('errorMessage', '')}".rstrip())
        if not parts:
            receiver = self.kget(f"telemetryreceiver/{RECEIVER}")
            parts.append("no SparkApplication; " + agg_view.AggregationState.of(receiver).line())
        pods = self._spark_pods()
        parts.append(format_table(agg_view.POD_HEADER, agg_view.pod_rows(pods)) if pods else "no Spark pods")
        for pod in pods:
            if pod["metadata"]["labels"].get("spark-role") == "driver":
                tail = self.kubectl("logs", pod["metadata"]["name"], "-n", self.ns, "--tail=30", check=False)
                parts.append(f"last lines of the driver {pod['metadata']['name']}:\n" + tail.rstrip())
        parts.append(f"(every pod's log: {_rel(self.logs)}/spark.log after cleanup)")
        return "\n".join(parts)

    def read_aggregates(self) -> list[dict[str, Any]]:
        assert self.spark is not None
        with self.step("read the Parquet the executors wrote, from the host side of the claim's volume"):
            target = self.out / "aggregates"
            tables = agg_view.copy_tables(self.spark.volume, target)
            rows = agg_view.read_rows(target)
            log(f"    {len(rows)} client_metrics rows; tables {', '.join(tables)} copied from "
                f"{_rel(self.spark.volume)} to {_rel(target)} (the volume goes with the demo's resources)")
            return rows

    def stop_clients(self) -> None:
        with self.step("stop the clients (their last push carries the terminating flag)"):
            assert self.fleet is not None
            self.fleet.stop()
            self.fleet_stopped = time.time()
            for cid, c in self.fleet.counters.items():
                log(f"    {cid:24s} produced {c.produced:6d}  consumed {c.consumed:6d}  errors {c.errors}")
            time.sleep(3)  # the terminating pushes travel broker -> plugin -> receiver -> topic

    def read_topic(self) -> list[Push]:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.env["KAFKA_BOOTSTRAP_SERVERS"], "group.id": "kct-demo-reader",
                             "client.id": "kct-demo-reader", "enable.auto.commit": False, "log_level": 3,
                             "enable.metrics.push": False})
        try:
            meta = consumer.list_topics(self.topic, timeout=10).topics[self.topic]
            parts = [TopicPartition(self.topic, p, 0) for p in meta.partitions]
            ends = {p.partition: consumer.get_watermark_offsets(p, timeout=10)[1] for p in parts}
            consumer.assign(parts)
            pushes: list[Push] = []
            done = {p for p, end in ends.items() if end == 0}
            deadline = time.monotonic() + 60
            while len(done) < len(ends) and time.monotonic() < deadline:
                msg = consumer.poll(1.0)
                if msg is None or msg.error():
                    continue
                partition, offset = int(msg.partition() or 0), int(msg.offset() or 0)
                if offset + 1 >= ends[partition]:
                    done.add(partition)
                headers = msg.headers() or []
                raw_headers = list(headers.items()) if isinstance(headers, dict) else list(headers)
                h = {k: v.decode() if isinstance(v, bytes) else str(v or "") for k, v in raw_headers}
                received = int(h.get("kct.received_ms", "0"))
                if received < self.run_start_ms:
                    continue
                pushes.append(Push(
                    received_ms=received, client_instance_id=h.get("client_instance_id", ""),
                    client_id=h.get("client_id", ""), software_name=h.get("client_software_name", ""),
                    software_version=h.get("client_software_version", ""), principal=h.get("principal", ""),
                    source=f"{h.get('client_source_address', '')}:{h.get('client_source_port', '')}",
                    data_points=int(h.get("kct.data_points", "0") or 0),
                    terminating=h.get("terminating") == "true",
                    **_attribution(msg.value() or b""),
                ))
            return sorted(pushes, key=lambda p: p.received_ms)
        finally:
            consumer.close()

    def aggregate(self) -> list[dict[str, Any]]:
        with self.step("`kct aggregate` (Spark, local mode, on the host; --local-aggregation) with the aggregation "
                       "config the operator rendered"):
            config = self._rendered("aggregation.yaml")
            agg_dir = self.out / "aggregates"
            shutil.rmtree(agg_dir, ignore_errors=True)
            changes = [f"parquet.path {config['parquet']['path']} -> {_rel(agg_dir)}"]
            config["parquet"]["path"] = str(agg_dir)
            config["run"]["checkpointPath"] = None
            host_bootstrap = self.env["KAFKA_BOOTSTRAP_SERVERS"]
            if config["source"].get("clientPropertiesDir"):
                # --kafka-sasl: the same SASL_SSL user, through the forwarder, from the same properties laid out
                # here as the pods get them mounted.
                host_bootstrap = self.env["KAFKA_SASL_SSL_BOOTSTRAP_SERVERS"]
                properties = self.out / "kafka-client"
                properties.mkdir(parents=True, exist_ok=True)
                secret = self.kget(f"secret/{KAFKA_SECRET}")
                for key, value in secret["data"].items():
                    (properties / key).write_bytes(base64.b64decode(value))
                changes.append(f"source.clientPropertiesDir -> {_rel(properties)} (Secret {KAFKA_SECRET})")
                config["source"]["clientPropertiesDir"] = str(properties)
            if config["source"].get("bootstrapServers") != host_bootstrap:
                changes.append(f"source.bootstrapServers {config['source'].get('bootstrapServers')} -> "
                               f"{host_bootstrap} (Spark runs on the host, which reaches the node stack's Kafka "
                               "through its loopback forwarder; the rendered address is the pods' listener)")
                config["source"]["bootstrapServers"] = host_bootstrap
            if config["run"].get("mode") != "batch":
                changes.append(f"run.mode {config['run'].get('mode')} -> batch (read the topic to its end, every "
                               "window included: a streaming run keeps the last windows open for the watermark)")
                config["run"]["mode"] = "batch"
            if str(config["spark"].get("master", "")).startswith("local[*]"):
                changes.append("spark.master local[*] -> local[2]")
                config["spark"]["master"] = "local[2]"
            for change in changes:
                log("    adjusted " + change)
            path = self.out / "aggregation.yaml"
            path.write_text(yaml.safe_dump(config, sort_keys=False))
            t0 = time.monotonic()
            proc = self.start("aggregate", [str(KCT), "aggregate", "--config", str(path)])
            try:
                proc.wait(self.args.aggregate_timeout)
            except subprocess.TimeoutExpired as error:
                self.stop("aggregate")
                raise DemoError(f"kct aggregate did not finish in {self.args.aggregate_timeout}s "
                                f"(log {self.logs / 'aggregate.log'})") from error
            self.procs.pop("aggregate", None)
            lines = (self.logs / "aggregate.log").read_text(errors="replace").splitlines()
            final = [line for line in lines if line.startswith("kct aggregate:")]
            if proc.returncode != 0:
                raise DemoError(f"kct aggregate exited {proc.returncode}; last lines of {self.logs / 'aggregate.log'}"
                                ":\n      " + "\n      ".join(lines[-15:]))
            log(f"    {final[-1] if final else 'finished'} ({time.monotonic() - t0:.0f}s incl. JVM start)")
            log(f"    kct aggregate --config {_rel(path)}")
            import pyarrow.parquet as pq  # type: ignore[import-untyped]

            table = agg_dir / "client_metrics"
            if not table.exists():
                return []
            rows: list[dict[str, Any]] = pq.read_table(table).to_pylist()
            return rows

    # ---------------------------------------------------------------- summary
    def summary(self, pushes: list[Push], rows: list[dict[str, Any]]) -> bool:
        with self.step("summary"):
            ok = True
            text: list[str] = []

            def say(line: str = "") -> None:
                text.append(line)
                log(line)

            instances = {p.client_instance_id for p in pushes}
            rows = [r for r in rows if r["client_instance_id"] in instances]
            demo_ids = [c.client_id for c in DEMO_CLIENTS]
            say("")
            say(f"Subscriptions (kubectl get clientmetricssubscriptions -n {self.ns} -o custom-columns=...: "
                "the configs the operator applied to the broker, and the Ready condition)")
            cms = self.kubectl("get", "clientmetricssubscriptions", "-n", self.ns, "-o", SUBSCRIPTION_COLUMNS).rstrip()
            say(_indent(cms))
            say("")
            ok = self._receiver_summary(say) and ok
            say("")
            if not self.local:
                ok = self._aggregation_summary(say) and ok
                say("")
            say("Workloads (the receiver's attribution: the pod that held each push's source address, and its "
                "owner; from the records' resource attributes)")
            say(_indent(format_table(WORKLOAD_HEADER, workload_rows(pushes))))
            ok = self._client_pods_attributed(pushes, say) and ok
            say("")
            seen = client_rows(pushes)
            say(f"Clients seen (from the {len(pushes)} pushes stored in topic {self.topic} during this run)")
            clients_header = list(CLIENT_HEADER)
            say(_indent(format_table(clients_header, seen)))
            say("")
            workload_by_client = {p.client_id: p.workload for p in pushes}
            pod_ids = sorted({p.client_id for p in pushes if p.client_id.startswith(f"{CLIENT_PODS}-")})
            aggs = client_aggregates(rows, [*demo_ids, *pod_ids])
            rates = {c.client_id: c for c in DEMO_CLIENTS}
            agg_header = ["workload", "client id", "msg/s", "windows", "points", "metrics",
                          *[title for title, _, _ in KEY_METRICS]]
            agg_rows = []
            assert self.fleet is not None
            elapsed = max(1.0, self.fleet_stopped - self.fleet_started)
            for cid in demo_ids:
                c = self.fleet.counters[cid]
                msgs = (c.produced if rates[cid].role == "producer" else c.consumed) / elapsed
                a = aggs[cid]
                agg_rows.append((workload_by_client.get(cid, ""), cid, f"{msgs:.0f}", a["windows"], a["points"],
                                 a["metrics"], *[a[title] for title, _, _ in KEY_METRICS]))
            for cid in pod_ids:  # the pods' message counts are theirs, not the demo's
                a = aggs[cid]
                agg_rows.append((workload_by_client[cid], cid, "", a["windows"], a["points"], a["metrics"],
                                 *[a[title] for title, _, _ in KEY_METRICS]))
            by = "`kct aggregate`, local mode" if self.local else "the SparkApplication's executor on the node"
            say(f"Per-client aggregates ({_rel(self.out / 'aggregates' / 'client_metrics')}, written by {by}; "
                "10 s windows; latencies in ms from the clients' own telemetry; msg/s counted by the host clients)")
            say(_indent(format_table(agg_header, agg_rows)))
            empty = [cid for cid in demo_ids if aggs[cid]["windows"] == "0"]
            if empty:
                ok = False
                self.failures.append(f"no aggregates for {', '.join(empty)}")
                say(f"    FAIL: no aggregates for {', '.join(empty)}")
            missing = [cid for cid in demo_ids if cid not in {p.client_id for p in pushes}]
            if missing:
                ok = False
                self.failures.append(f"no pushes from {', '.join(missing)}")
            say("")
            self._prometheus_summary(say)
            n = self.narrow
            before = Counter(p.client_id for p in pushes if n["before_start"] <= p.received_ms / 1000 < n["t_patch"])
            after = Counter(p.client_id for p in pushes if n["start"] <= p.received_ms / 1000 < n["end"])
            narrow_rows = []
            for cid in demo_ids:
                expected = cid == NARROW_TO
                good = after[cid] > 0 if expected else after[cid] == 0
                ok = ok and good
                narrow_rows.append((cid, before[cid], after[cid], "keeps pushing" if expected else "stopped",
                                    "ok" if good else "FAIL"))
            say(f"Narrowing: {SUBSCRIPTION} match.clientId -> {NARROW_TO} at "
                f"{_clock(n['t_patch'])} (on the broker {n['t_applied'] - n['t_patch']:.1f}s later)")
            say(_indent(format_table(["client id", f"pushes {n['window']:.0f}s before",
                                      f"pushes {_clock(n['start'])}-{_clock(n['end'])}", "expected", "result"],
                                     narrow_rows)))
            if not all(r[-1] == "ok" for r in narrow_rows):
                self.failures.append("narrowing: a client other than the chosen one kept pushing, or it stopped")
            report = self.out / "report.html"
            report.write_text(self._html(pushes, rows, cms, seen, clients_header, agg_header, agg_rows,
                                         narrow_rows))
            (self.out / "summary.txt").write_text("\n".join(text) + "\n")
            say("")
            self._files_summary(say, report)
            return ok

    def _client_workloads(self) -> dict[str, str]:
        """The client pods' workload names -> how `workload_of` names them."""
        return {f"{CLIENT_PODS}-producer": f"Deployment {self.ns}/{CLIENT_PODS}-producer",
                f"{CLIENT_PODS}-consumer": f"StatefulSet {self.ns}/{CLIENT_PODS}-consumer"}

    def _client_pods_pushing(self) -> bool:
        seen = {p.workload for p in self.read_topic()}
        return all(w in seen for w in self._client_workloads().values())

    def _client_pods_attributed(self, pushes: list[Push], say: Any) -> bool:
        """Every push from a client pod (its client.id is its pod's name) attributed to that pod and its workload."""
        expected = self._client_workloads()
        mine = [p for p in pushes if p.client_id.startswith(f"{CLIENT_PODS}-")]

        def owner(client_id: str) -> str | None:
            return next((w for name, w in expected.items() if client_id.startswith(f"{name}-")), None)

        wrong = [p for p in mine if p.pod != f"{self.ns}/{p.client_id}" or p.workload != owner(p.client_id)]
        silent = [w for w in expected.values() if w not in {p.workload for p in mine}]
        if wrong or silent:
            problem = (f"{len(wrong)} of {len(mine)} pushes from the client pods not attributed to their own pod "
                       f"and workload (e.g. {wrong[0].client_id} -> {wrong[0].workload or 'none'})" if wrong else
                       f"no attributed pushes from {', '.join(silent)}")
            self.failures.append(problem)
            say(f"    FAIL: {problem}")
            return False
        say(f"    every one of the {len(mine)} pushes from the {len({p.client_id for p in mine})} client pods is "
            "attributed to its own pod and workload")
        return True

    def _files_summary(self, say: Any, report: Path) -> None:
        say("Files")
        say(f"    HTML report with plots   {_rel(report)}")
        say(f"    this summary             {_rel(self.out / 'summary.txt')}")
        say(f"    aggregates (Parquet)     {_rel(self.out / 'aggregates')}/"
            "{client_metrics,rollups,terminations,alerts}")
        if self.local:
            say(f"    aggregation config       {_rel(self.out / 'aggregation.yaml')} (as rendered, adjusted for "
                "the host)")
            say(f"    logs                     {_rel(self.logs)}/{{helm,operator,receiver,aggregate,clients}}.log")
        else:
            say(f"    logs                     {_rel(self.logs)}/"
                "{helm,operator,receiver,spark,spark-operator,clients}.log")

    def _receiver_summary(self, say: Any) -> bool:
        """The TelemetryReceiver and its pods as `kubectl get` shows them; False unless Ready with running pods."""
        # A probe answered late on a busy machine takes the pod out of Ready for a moment: judged once it settled
        # (or after a minute), not on one snapshot.
        ready, pods, deadline = False, [], time.monotonic() + 60
        while time.monotonic() < deadline:
            conditions = self.kget(f"telemetryreceiver/{RECEIVER}").get("status", {}).get("conditions", [])
            ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
            pods = self._running_receiver_pods()
            if ready and pods:
                break
            time.sleep(2)
        say(f"Telemetry receiver (kubectl get telemetryreceivers,pods -n {self.ns}: the operator's Deployment, "
            "its pods on the node)")
        say(_indent(self.kubectl("get", "telemetryreceivers", "-n", self.ns).rstrip()))
        say(_indent(self.kubectl("get", "pods", "-n", self.ns, "-l", RECEIVER_PODS, "-o",
                                 "custom-columns=POD:.metadata.name,STATUS:.status.phase,IP:.status.podIP,"
                                 "NODE:.spec.nodeName,IMAGE:.spec.containers[0].image").rstrip()))
        if ready and pods:
            say(f"    receiver Ready=True, pods {', '.join(pods)}")
            return True
        say(f"    FAIL: receiver Ready={ready}, running pods: {', '.join(pods) or 'none'}")
        self.failures.append("the TelemetryReceiver is not Ready with running pods")
        return False

    def _aggregation_summary(self, say: Any) -> bool:
        """The SparkApplication as the spark-operator runs it, its pods, the receiver's status.aggregation; False
        unless it is RUNNING with a running driver and executor on the node and the receiver reports it."""
        assert self.spark is not None
        say(f"Aggregation on the node (kubectl get sparkapplications,pods -l {SPARK_PODS} -n {self.ns}: the "
            f"operator's SparkApplication, run by the spark-operator ({self.spark.release} in "
            f"{self.spark.release_namespace}))")
        apps = self.kget("sparkapplications")["items"]
        pods = self._spark_pods()
        app_rows = agg_view.application_rows(apps, pods)
        pod_rows = agg_view.pod_rows(pods)
        state = agg_view.AggregationState.of(self.kget(f"telemetryreceiver/{RECEIVER}"))
        say(_indent(format_table(agg_view.APPLICATION_HEADER, app_rows)))
        say(_indent(format_table(agg_view.POD_HEADER, pod_rows)))
        say(f"    TelemetryReceiver {RECEIVER} {state.line()}")
        timing = (f"kubectl apply -> first Parquet file {self.first_parquet_s:.0f}s, -> rows for every demo client "
                  f"{self.aggregates_s:.0f}s" if self.first_parquet_s is not None and self.aggregates_s is not None
                  else "")
        say(f"    Parquet on claim {self.spark.claim} ({_rel(self.spark.volume)} on the host): "
            f"{len(agg_view.parquet_files(self.spark.volume))} client_metrics files; {timing}")
        self.spark_sections = [
            ("Aggregation on the node", f"The operator's SparkApplication run by the spark-operator "
             f"({self.spark.release}); TelemetryReceiver {RECEIVER} {state.line()}; {timing}",
             list(agg_view.APPLICATION_HEADER), app_rows),
            ("Spark pods", f"kubectl get pods -l {SPARK_PODS} -n {self.ns}", list(agg_view.POD_HEADER), pod_rows),
        ]
        running = {r[0] for r in app_rows if r[1] == "RUNNING"}
        roles = agg_view.running_roles(pods)
        on_node = {r[3] for r in pod_rows} == {self.env.get("KCT_NODE_NAME")}
        if running and roles >= {"driver", "executor"} and on_node and state.state == "RUNNING":
            say(f"    SparkApplication {', '.join(sorted(running))} RUNNING, driver and executor pods running on "
                f"{self.env.get('KCT_NODE_NAME')}")
            return True
        say(f"    FAIL: SparkApplication running: {', '.join(sorted(running)) or 'none'}, running pods: "
            f"{', '.join(sorted(roles)) or 'none'}, receiver's state {state.state or '-'}")
        self.failures.append("the SparkApplication is not RUNNING with driver and executor pods on the node")
        return False

    def _prometheus_summary(self, say: Any) -> None:
        """One PromQL query of the shipped dashboards against the node's Prometheus (the aggregation's export)."""
        url = self.env.get("KCT_NODE_PROMETHEUS_URL")
        if self.local or not url:
            return
        say(f"Prometheus ({url}, the node's; the aggregation exports to it over OTLP)")
        try:
            lines = prom_view.summary_lines(url)
        except (OSError, RuntimeError) as error:
            lines = [f"    FAIL: {error}"]
            self.failures.append(f"Prometheus: {error}")
        for line in lines:
            say(line if line.startswith("    ") else "    " + line)
        say("")

    def _prometheus_charts(self, x_range: tuple[float, float] | None) -> list[str]:
        """A few dashboard panels drawn from the node's Prometheus (query_range over the fleet's run)."""
        url = self.env.get("KCT_NODE_PROMETHEUS_URL")
        if self.local or not url or x_range is None:
            return []
        charts = []
        found = prom_view.panels()
        for uid, title in prom_view.PANELS:
            for promql in found.get((uid, title), []):
                try:
                    series = prom_view.panel_series(url, promql, *x_range)
                except (OSError, RuntimeError) as error:
                    log(f"    Prometheus query_range failed for {title}: {error}")
                    series = []
                charts.append(svg_line_chart(f"Prometheus, dashboard {uid}: {title}", series, x_range=x_range))
        return charts

    def _html(self, pushes: list[Push], rows: list[dict[str, Any]], cms: str, client_rows: list[Any],
              clients_header: list[str], agg_header: list[str], agg_rows: list[Any], narrow_rows: list[Any]) -> str:
        n = self.narrow
        mark = n["t_applied"]
        label = f"match -> {NARROW_TO}"
        producers = [c.client_id for c in DEMO_CLIENTS if c.role == "producer"]
        consumers = [c.client_id for c in DEMO_CLIENTS if c.role == "consumer"]
        x_range = (self.fleet_started, self.fleet_stopped + 2) if self.fleet_stopped else None
        charts = [
            svg_push_timeline("Pushes stored in the topic, per client id (one tick per push, ring = terminating)",
                              pushes, marker_at=mark, marker_label=label, x_range=x_range),
            svg_line_chart("Producer request latency, avg per window (ms)",
                           metric_series(rows, ("producer.request.latency.avg",), client_ids=producers),
                           y_label="ms", marker_at=mark, marker_label=label, x_range=x_range),
            svg_line_chart("Producer record queue time, max per window (ms)",
                           metric_series(rows, ("producer.record.queue.time.max",), "value_max", producers),
                           y_label="ms", marker_at=mark, marker_label=label, x_range=x_range),
            svg_line_chart("Consumer fetch latency, avg per window (ms)",
                           metric_series(rows, ("consumer.fetch.manager.fetch.latency.avg",), client_ids=consumers),
                           y_label="ms", marker_at=mark, marker_label=label, x_range=x_range),
            svg_line_chart("Consumer request latency (all brokers), max per window (ms)",
                           metric_series(rows, ("consumer.node.request.latency.max",), "value_max", consumers),
                           y_label="ms", marker_at=mark, marker_label=label, x_range=x_range),
            *self._prometheus_charts(x_range),
        ]
        cms_lines = cms.splitlines()
        cms_header = cms_lines[0].split() if cms_lines else []
        cms_rows = [line.split(None, len(cms_header) - 1) for line in cms_lines[1:]]
        sections: list[tuple[str, str, list[str], Sequence[Sequence[object]]]] = [
            ("Subscriptions", f"kubectl get clientmetricssubscriptions -n {self.ns}: the configs on the broker "
             "(after narrowing) and the Ready condition",
             cms_header, cms_rows),
            ("Workloads", "the receiver's attribution: the pod that held each push's source address, and its owner",
             list(WORKLOAD_HEADER), workload_rows(pushes)),
            ("Clients seen", f"{len(pushes)} pushes stored in topic {self.topic}", clients_header, client_rows),
            *self.spark_sections,
            ("Per-client aggregates", ("kct aggregate (local mode)" if self.local else "the SparkApplication on the "
             "node") + ", 10 s windows; latencies in ms from the clients' telemetry "
             "(librdkafka pushes avg/max gauges over its interval); msg/s counted by the demo clients",
             agg_header, agg_rows),
            ("Narrowing", f"{SUBSCRIPTION}: match.clientId -> {NARROW_TO} at {_clock(n['t_patch'])} UTC",
             ["client id", "pushes before", "pushes after", "expected", "result"], narrow_rows),
        ]
        footer = (f"make demo, {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC. librdkafka pushes gauges (avg/max over "
                  "its interval) and sums, no histograms, so latencies are avg and max, not quantiles.")
        return html_report("kct demo: Kafka clients' own metrics (KIP-714)", sections, charts, footer)

    # ---------------------------------------------------------------- cleanup
    def cleanup(self) -> None:
        log("==> cleanup")
        if self.fleet is not None:
            self.fleet.stop()
        self.stop("aggregate")
        self._save_pod_logs()
        keep = self.args.keep_stack or self.stack_was_running
        remove = self.args.remove_resources or not keep
        if remove and self.helm:
            # the operator removes the broker configs and the demo topic (deleteOnRemoval) on deletion
            self.kubectl("delete", "deployments,statefulsets,services,configmaps", "-l", selector(CLIENT_PODS),
                         "-n", self.ns, "--wait=false", check=False)
            self.kubectl("delete", "clientmetricssubscriptions,telemetryreceivers", "--all", "-n", self.ns,
                         "--wait", "--timeout=90s", check=False, timeout=120)
            if self.spark is not None:
                spark_on_node.uninstall(self._access(), self.spark)
                log(f"    removed the spark-operator (Helm release {self.spark.release}), its SparkApplication, the "
                    "claim and its volume")
            subprocess.run([*self.helm, "uninstall", RELEASE, "-n", RELEASE_NAMESPACE, "--wait"],
                           capture_output=True, timeout=300, check=False)
            log(f"    removed the demo resources and the Helm release {RELEASE}")
        log("    stopped the clients")
        if keep:
            why = "--keep-stack" if self.args.keep_stack else "it was running before the demo started"
            log(f"    the node stack keeps running ({why})")
            if not remove:
                log(f"    the demo resources stay: source {_rel(STACK_ENV)}; kubectl get cms,tr,pods -n {self.ns}")
            log("    stop it with: make node-down")
        elif self.env.get("KUBECONFIG"):
            subprocess.run([sys.executable, str(STACK), "node-down"], capture_output=True, check=False)
            log("    node stack stopped (make node-down); keep it next time with KEEP=1")

    def _save_pod_logs(self) -> None:
        """The operator's and the receivers' pod logs into logs/ (the pods go with the stack)."""
        if not self.helm:
            return
        sources = [("operator", RELEASE_NAMESPACE, f"app.kubernetes.io/instance={RELEASE}"),
                   ("receiver", self.ns, RECEIVER_PODS), ("client-pods", self.ns, selector(CLIENT_PODS))]
        if self.spark is not None:
            sources += [("spark", self.ns, SPARK_PODS),
                        ("spark-operator", self.spark.release_namespace,
                         f"app.kubernetes.io/instance={self.spark.release}")]
        for name, namespace, labels in sources:
            out = self.kubectl("logs", "-n", namespace, "-l", labels, "--all-containers", "--prefix",
                               "--tail=-1", check=False, timeout=60)
            (self.logs / f"{name}.log").write_text(out)

    def run(self) -> int:
        self.out.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.logs, ignore_errors=True)
        self.logs.mkdir(parents=True)
        ok = False
        try:
            self.stack_up()
            self.operator()
            if not self.local:
                self.spark_operator()
            self.apply_examples()
            self.receiver()
            self.clients()
            self.narrowing()
            if not self.local:
                self.aggregation_on_node()
            self.stop_clients()
            pushes = self.read_topic()
            rows = self.aggregate() if self.local else self.read_aggregates()
            ok = self.summary(pushes, rows)
        except DemoError as error:
            log(f"    FAILED: {error}")
            self.failures.append(str(error))
        except KeyboardInterrupt:
            log("    interrupted")
            self.failures.append("interrupted")
        except Exception as error:  # a bug in the demo or an unexpected answer: say where, still clean up
            import traceback

            log("    FAILED with an unexpected error:\n" + _indent(traceback.format_exc()))
            self.failures.append(f"{type(error).__name__}: {error}")
        finally:
            self.cleanup()
        total = time.monotonic() - self.started
        if ok and not self.failures:
            log(f"demo succeeded in {total:.0f}s")
            return 0
        log(f"demo FAILED after {total:.0f}s: " + "; ".join(self.failures))
        return 1


def _attribution(value: bytes) -> dict[str, str]:
    """`workload` and `pod` of a push, from the resource attributes the receiver's attribution added to the record
    (both "" when it added none)."""
    try:
        request = ExportMetricsServiceRequest.FromString(value)
    except DecodeError:
        return {}
    resource = {a.key: a.value.string_value for rm in request.resource_metrics for a in rm.resource.attributes}
    pod = resource.get("k8s.pod.name", "")
    return {"workload": workload_of(resource), "pod": f"{resource.get('k8s.namespace.name', '')}/{pod}" if pod else ""}


def _rel(path: Path) -> str:
    """`path` relative to the repository when inside it (shorter output), else absolute."""
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


def _clock(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%H:%M:%S")


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=60, help="seconds the clients run before narrowing")
    parser.add_argument("--narrow-window", type=float, default=20, help="seconds of pushes counted after narrowing")
    parser.add_argument("--out", type=Path, default=REPO / "build" / "demo")
    parser.add_argument("--aggregate-timeout", type=float, default=900,
                        help="seconds to wait for every demo client's aggregates (or for `kct aggregate` to finish)")
    parser.add_argument("--local-aggregation", action="store_true",
                        help="for development: `kct aggregate` (Spark local mode) on the host over the rendered "
                             "config, instead of the spark-operator on the node (no kct-spark image needed)")
    parser.add_argument("--kafka-sasl", action="store_true",
                        help="the receiver and the demo subscription name the node broker's SASL_SSL listener "
                             "(SCRAM-SHA-512, the stack's CA) with a Secret: the operator, the receivers and the "
                             "Spark job connect through it")
    parser.add_argument("--keep-stack", action="store_true", default=os.environ.get("KEEP", "") not in ("", "0"),
                        help="leave the stack running (also KEEP=1)")
    parser.add_argument("--remove-resources", action="store_true",
                        help="delete the demo's resources at the end even when the stack keeps running")
    return Demo(parser.parse_args(argv)).run()


if __name__ == "__main__":
    sys.exit(main())
