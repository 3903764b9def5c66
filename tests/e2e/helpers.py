"""Plain helpers for end-to-end tests against the real stack (not a test module, not fixtures).

- `eventually(check, timeout=..., what=...)`: poll until `check()` is truthy, else fail naming `what`
  (tests/waiting.py, re-exported here).
- `Kubectl(kubeconfig)`: run kubectl as a user does; `apply`, `get` (fails when absent), `get_json`
  (None when absent), `exists`, `condition`.
- `OperatorProcess(env, log_path)`: `kct operator` as a subprocess with a liveness endpoint; `start`,
  `stop`, `restart`, `log_tail`, `wait_for_resync` (a resync of given resources, seen in kopf's log).
- `free_port()`, `unique(prefix)`, `stop_process(process)` (SIGTERM, then SIGKILL after a grace period).
- `receiver_process(config, workdir, env)`: `kct receiver` with that config as a subprocess, until ready.
- `wait_for_client_metrics(bootstrap, name, configs)`: until the broker serves a CLIENT_METRICS subscription.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import socket
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml
from telemetry_probe import get_telemetry_subscription
from waiting import eventually

__all__ = ["KCT", "REPO", "Kubectl", "OperatorProcess", "eventually", "free_port", "kubectl_with_crds",
           "receiver_process", "unique", "wait_for_client_metrics"]

REPO = Path(__file__).resolve().parents[2]
KCT = REPO / ".venv" / "bin" / "kct"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def stop_process(process: subprocess.Popen[Any], grace_s: float = 30.0) -> None:
    """Stop a process the test started, as Kubernetes stops a pod: SIGTERM (it drains), SIGKILL after
    `grace_s`. Nothing happens to a process that already exited."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@contextlib.contextmanager
def receiver_process(
    config: Mapping[str, Any], workdir: Path, env: Mapping[str, str]
) -> Iterator[subprocess.Popen[bytes]]:
    """`kct receiver` with `config` (its log in `workdir/receiver.log`), yielded once `/readyz` answers 200 on
    the configured host and port; stopped with SIGTERM on exit."""
    path = workdir / "receiver.json"
    path.write_text(json.dumps(config))
    log = workdir / "receiver.log"
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "kct.cli", "receiver", "--config", str(path)],
                                   env={**env, "PYTHONPATH": str(REPO / "operator")}, stdout=out,
                                   stderr=subprocess.STDOUT)
    ready_url = f"http://{config['listen']['host']}:{config['listen']['port']}/readyz"
    try:
        def ready() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"receiver exited:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(ready_url, timeout=2) as resp:
                    return int(resp.status) == 200
            except OSError:
                return False

        eventually(ready, timeout=60, interval=0.2, what="the receiver ready")
        yield process
    finally:
        stop_process(process)


class Kubectl:
    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig

    def run(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["kubectl", f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if check:
            assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
        return proc

    def apply(self, manifest: Mapping[str, Any], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run("apply", *args, "-f", "-", stdin=yaml.safe_dump(dict(manifest)), check=check)

    def get(self, kind: str, name: str, namespace: str) -> dict[str, Any]:
        """The object as JSON; fails the test (naming kubectl's error) when it is absent or unreadable."""
        document: dict[str, Any] = json.loads(self.run("get", kind, name, "-n", namespace, "-o", "json").stdout)
        return document

    def wait_established(self, *crds: str, timeout: float = 60.0) -> None:
        """Wait until each CRD (`crd/<name>`) is Established. `kubectl wait` fails at once instead of
        waiting when a just-created CRD has no conditions yet, which happens on a fresh API server."""

        def established() -> bool:
            jsonpath = '{.status.conditions[?(@.type=="Established")].status}'
            return all(self.run("get", crd, "-o", f"jsonpath={jsonpath}", check=False).stdout.strip() == "True"
                       for crd in crds)

        eventually(established, timeout=timeout, what=f"{', '.join(crds)} Established")

    def get_json(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        proc = self.run("get", kind, name, "-n", namespace, "-o", "json", check=False)
        if proc.returncode != 0:
            if "NotFound" in proc.stderr or "not found" in proc.stderr:
                return None
            raise AssertionError(f"kubectl get {kind} {name}: {proc.stderr}")
        document: dict[str, Any] = json.loads(proc.stdout)
        return document

    def exists(self, kind: str, name: str, namespace: str) -> bool:
        return self.get_json(kind, name, namespace) is not None

    def condition(self, kind: str, name: str, namespace: str, type_: str = "Ready", *,
                  required: bool = False) -> dict[str, Any]:
        """The condition `type_` ({} when not set); with `required`, fails when the object is absent."""
        found = self.get(kind, name, namespace) if required else self.get_json(kind, name, namespace) or {}
        for condition in found.get("status", {}).get("conditions", []):
            if condition["type"] == type_:
                return dict(condition)
        return {}


def kubectl_with_crds(kubeconfig: Path) -> Kubectl:
    """A Kubectl on `kubeconfig` once the project's CRDs are applied and the subscription CRD is Established."""
    tool = Kubectl(kubeconfig)
    tool.run("apply", "-f", str(REPO / "crds"))
    tool.wait_established("crd/clientmetricssubscriptions.telemetry.kct.dev")
    return tool


class OperatorProcess:
    """`kct operator` as a subprocess, alive once its liveness endpoint answers."""

    def __init__(self, env: Mapping[str, str], log_path: Path, *args: str) -> None:
        self.env = dict(env)
        self.log_path = log_path
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None
        self.liveness = ""

    def start(self, timeout: float = 60.0) -> None:
        self.liveness = f"http://127.0.0.1:{free_port()}/healthz"
        with self.log_path.open("a") as log:
            self.proc = subprocess.Popen(
                [str(KCT), "operator", "--liveness", self.liveness, *self.args],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        eventually(self._alive, timeout=timeout, what="the operator's liveness endpoint")

    def _alive(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, self.log_tail()
        try:
            with urllib.request.urlopen(self.liveness, timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def log_tail(self, size: int = 4000) -> str:
        return self.log_path.read_text()[-size:] if self.log_path.exists() else ""

    def resyncs(self, namespace: str, name: str) -> int:
        """How many resyncs of resource `namespace/name` finished: kopf logs each run of the `resync` timer
        that returned (the handler never raises) as "[namespace/name] Timer 'resync' succeeded."."""
        log = self.log_path.read_text() if self.log_path.exists() else ""
        return log.count(f"[{namespace}/{name}] Timer 'resync' succeeded")

    def wait_for_resync(self, namespace: str, *names: str, timeout: float = 60.0) -> None:
        """Until a resync of each named resource ran from start to end after this call: two more finished
        runs, since the first may have started before the call (a timer's runs do not overlap)."""
        start = {name: self.resyncs(namespace, name) for name in names}
        eventually(lambda: all(self.resyncs(namespace, name) >= start[name] + 2 for name in names),
                   timeout=timeout, what=f"a whole resync of {', '.join(names)} in {namespace}")


def wait_for_client_metrics(bootstrap: str, name: str, configs: Mapping[str, str], *, timeout: float = 30.0) -> None:
    """Wait until the broker describes CLIENT_METRICS `name` with `configs`, then until it serves that
    subscription to a new client the subscription's `match` selects.

    An alter returns once the controller committed it; the broker applies it to its subscription cache when
    it replays the metadata log, a moment later (and a describe may already show it then). A client asking for
    its subscription before that gets none and, per KIP-714, asks again only after the default 5-minute
    interval: tests that start clients right after an alter must wait for the broker to serve it first.
    """
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kct-e2e-wait")
    try:
        def described() -> bool:
            found = admin.describe_configs([ConfigResource(ConfigResourceType.CLIENT_METRICS, name)])
            current = found.get("client_metrics", {}).get(name, {})
            values = {key: entry.get("value") for key, entry in current.items()}
            return all(values.get(key) == value for key, value in configs.items())

        eventually(described, timeout=timeout, what=f"CLIENT_METRICS {name} on the broker")
    finally:
        admin.close()
    client_id = _a_selected_client_id(configs.get("match", ""))
    wanted = [m for m in configs.get("metrics", "").split(",") if m and m != "*"]

    def served() -> bool:
        answer = get_telemetry_subscription(bootstrap, client_id)
        return bool(answer.error_code == 0 and answer.requested_metrics
                    and set(wanted) <= set(answer.requested_metrics)
                    and str(answer.push_interval_ms) == configs.get("interval.ms", str(answer.push_interval_ms)))

    eventually(served, timeout=timeout, what=f"the broker to serve CLIENT_METRICS {name} to client.id {client_id}")


def _a_selected_client_id(match: str) -> str:
    """A client.id the `match` config selects (its client_id regex taken literally, or with `.*` as "probe");
    the probe sends no software name, so only client_id selectors can be honoured."""
    selectors = dict(item.split("=", 1) for item in match.split(",") if "=" in item)
    if set(selectors) - {"client_id"}:
        raise ValueError(f"match {match!r}: only client_id selectors can be probed")
    pattern = selectors.get("client_id", ".*")
    for candidate in (pattern, pattern.replace(".*", "probe"), "kct-e2e-probe"):
        if re.fullmatch(pattern, candidate):
            return candidate
    raise ValueError(f"match {match!r}: no client.id to probe it with")
