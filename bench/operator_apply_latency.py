#!/usr/bin/env python3
"""Operator latency: `kubectl apply` -> CLIENT_METRICS config readable on the broker.

Measures, against the local stack (or any KUBECONFIG + KAFKA_BOOTSTRAP_SERVERS):
  1. apply latency: seconds from starting `kubectl apply` of one new ClientMetricsSubscription to its
     configs being readable with the Admin API (DescribeConfigs), p50/p99 over N sequential applies;
  2. convergence: seconds from applying M resources at once (one `kubectl apply` of a multi-document
     file) until every one is on the broker, and until every one reports Ready=True;
  3. the operator's RSS after convergence.

Starts `kct operator` itself unless --no-operator (then one must already run). Everything is created
in a fresh namespace that is deleted at the end (the operator then removes the broker configs).

    .venv/bin/python bench/operator_apply_latency.py [--applies 50] [--resources 500]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import yaml
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

REPO = Path(__file__).resolve().parents[1]


def stack_env() -> dict[str, str]:
    env = dict(os.environ)
    env_file = REPO / "build" / "stack.env"
    if env_file.exists() and not (env.get("KUBECONFIG") and env.get("KAFKA_BOOTSTRAP_SERVERS")):
        for line in env_file.read_text().splitlines():
            if "=" in line and not line.startswith("#"):
                key, _, value = line.partition("=")
                env.setdefault(key.strip(), value.strip())
    if not env.get("KUBECONFIG") or not env.get("KAFKA_BOOTSTRAP_SERVERS"):
        sys.exit("need KUBECONFIG and KAFKA_BOOTSTRAP_SERVERS (or build/stack.env from `make stack-up`)")
    return env


def kubectl(env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {proc.stderr}")
    return proc.stdout


def manifest(namespace: str, name: str, interval: int) -> dict[str, Any]:
    return {
        "apiVersion": "telemetry.kct.dev/v1alpha1",
        "kind": "ClientMetricsSubscription",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "metrics": ["org.apache.kafka.producer."],
            "intervalMs": interval,
            "match": {"clientId": f"kct-bench-nobody-{name}"},
        },
    }


def broker_configs(admin: KafkaAdminClient, name: str) -> dict[str, str]:
    result = admin.describe_configs([ConfigResource(ConfigResourceType.CLIENT_METRICS, name)])
    found = result.get("client_metrics", {}).get(name, {})
    return {key: entry["value"] for key, entry in found.items() if entry.get("value") is not None}


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def measure_apply_latency(env: dict[str, str], admin: KafkaAdminClient, namespace: str, count: int) -> list[float]:
    latencies = []
    for i in range(count):
        name = f"lat-{i}"
        interval = 10_000 + i
        started = time.monotonic()
        kubectl(env, "apply", "-f", "-", stdin=yaml.safe_dump(manifest(namespace, name, interval)))
        while broker_configs(admin, name).get("interval.ms") != str(interval):
            if time.monotonic() - started > 120:
                raise RuntimeError(f"{name} did not reach the broker in 120 s")
            time.sleep(0.01)
        latencies.append(time.monotonic() - started)
    return latencies


def ready_count(env: dict[str, str], namespace: str) -> int:
    items = json.loads(kubectl(env, "get", "cms", "-n", namespace, "-o", "json"))["items"]
    return sum(
        1 for item in items
        for c in item.get("status", {}).get("conditions", [])
        if c["type"] == "Ready" and c["status"] == "True"
    )


def measure_convergence(env: dict[str, str], admin: KafkaAdminClient, namespace: str, count: int,
                        prefix: str) -> tuple[float, float, float]:
    names = {f"{prefix}-{i}" for i in range(count)}
    documents = "---\n".join(yaml.safe_dump(manifest(namespace, n, 20_000)) for n in sorted(names))
    started = time.monotonic()
    kubectl(env, "apply", "-f", "-", stdin=documents)
    applied = time.monotonic() - started
    on_broker = None
    while on_broker is None:
        listed = set(admin.list_config_resources([ConfigResourceType.CLIENT_METRICS]).get("client_metrics", []))
        if names <= listed:
            on_broker = time.monotonic() - started
        elif time.monotonic() - started > 1800:
            raise RuntimeError(f"only {len(names & listed)}/{count} on the broker after 30 min")
        else:
            time.sleep(0.25)
    while ready_count(env, namespace) < count:
        if time.monotonic() - started > 1800:
            raise RuntimeError("not all Ready after 30 min")
        time.sleep(1)
    return applied, on_broker, time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--applies", type=int, default=50)
    parser.add_argument("--resources", type=int, default=500)
    parser.add_argument("--no-operator", action="store_true", help="use an operator that is already running")
    args = parser.parse_args()
    env = stack_env()
    kubectl(env, "apply", "-f", str(REPO / "crds"))
    kubectl(env, "wait", "--for=condition=Established", "crd/clientmetricssubscriptions.telemetry.kct.dev")
    namespace = f"kct-bench-{uuid.uuid4().hex[:6]}"
    kubectl(env, "create", "namespace", namespace)
    operator = None
    if not args.no_operator:
        log = open(REPO / "build" / "bench-operator.log", "w")  # noqa: SIM115 - lives as long as the operator
        operator = subprocess.Popen([str(REPO / ".venv" / "bin" / "kct"), "operator"], env=env,
                                    stdout=log, stderr=subprocess.STDOUT)
        time.sleep(3)
    admin = KafkaAdminClient(bootstrap_servers=env["KAFKA_BOOTSTRAP_SERVERS"].split(","))
    try:
        latencies = measure_apply_latency(env, admin, namespace, args.applies)
        print(f"apply -> broker latency over {len(latencies)} sequential applies: "
              f"p50 {percentile(latencies, 0.5):.3f} s, p99 {percentile(latencies, 0.99):.3f} s, "
              f"mean {statistics.fmean(latencies):.3f} s, max {max(latencies):.3f} s")
        applied, on_broker, all_ready = measure_convergence(env, admin, namespace, args.resources, "conv")
        print(f"{args.resources} resources in one kubectl apply (which itself took {applied:.1f} s): "
              f"all on the broker after {on_broker:.1f} s, all Ready after {all_ready:.1f} s")
        if operator is not None:
            rss = rss_mib(operator.pid)
            print(f"operator RSS after convergence: {rss:.0f} MiB" if rss else "operator RSS: unknown")
    finally:
        started = time.monotonic()
        kubectl(env, "delete", "namespace", namespace, "--timeout=600s")
        print(f"namespace deleted (operator removed every subscription) in {time.monotonic() - started:.1f} s")
        admin.close()
        if operator is not None:
            operator.terminate()
            operator.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
