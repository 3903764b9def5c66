"""Fixtures shared by every test: the real servers for integration and end-to-end tests.

By default the `stack` fixture reuses the local stack (`make stack-up`) or starts it, and leaves it running
for the next run (several pytest sessions may share it); `make stack-down` stops it, and
`KCT_STOP_STACK=1` makes a session that started the stack stop it at the end. Users with Docker point the
same tests at a `kind` cluster and a Kafka broker of their own instead:

    KCT_TEST_KUBECONFIG=~/.kube/kind-kct KCT_TEST_KAFKA_BOOTSTRAP_SERVERS=localhost:9092 make test

(see the README). Tests that must stop and restart Kafka skip against such external clusters (and fail
under CI=true: tests/preconditions.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from lanes import lane_of
from preconditions import missing_precondition

REPO = Path(__file__).resolve().parents[1]
STACK_SCRIPT = REPO / "dev" / "stack" / "stack.py"
STACK_ENV = REPO / "build" / "stack.env"


def read_env_file(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


@dataclass(frozen=True)
class Stack:
    """Where the servers are, and (for the local stack only) how to stop and restart Kafka."""

    kubeconfig: Path
    kafka_bootstrap: str
    telemetry_endpoint: str
    local: bool
    # The bearer token the broker plugin sends (and a receiver must expect); None when unknown.
    receiver_token: str | None = None

    def env(self) -> dict[str, str]:
        """The environment a subprocess (operator, receiver, kubectl) needs to reach this stack."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["KAFKA_BOOTSTRAP_SERVERS"] = self.kafka_bootstrap
        return env

    def require_local(self, why: str) -> None:
        """Called first by a test that must stop and start Kafka, so it stops before doing any work on an
        external cluster (skip there; fail under CI=true) instead of half-way."""
        if not self.local:
            missing_precondition(f"{why}: only the local stack (dev/stack) can stop and start Kafka")

    def _stack(self, action: str) -> None:
        self.require_local(f"stack.py {action}")
        subprocess.run([sys.executable, str(STACK_SCRIPT), action], check=True)

    def kafka_stop(self) -> None:
        self._stack("kafka-stop")

    def kafka_start(self) -> None:
        self._stack("kafka-start")


def _stack_running() -> bool:
    if not STACK_ENV.exists():
        return False
    out = subprocess.run([sys.executable, str(STACK_SCRIPT), "status"], capture_output=True, text=True)
    return out.returncode == 0 and "stopped" not in out.stdout


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by the lane markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every e2e test with its lane (tests/lanes.py), from its fixture closure, so a new test lands in the
    right lane of dev/tools/pytest_phases.py without being told."""
    for item in items:
        if item.get_closest_marker("e2e") is not None:
            item.add_marker(getattr(pytest.mark, lane_of(getattr(item, "fixturenames", ()))))


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    external_kubeconfig = os.environ.get("KCT_TEST_KUBECONFIG")
    external_kafka = os.environ.get("KCT_TEST_KAFKA_BOOTSTRAP_SERVERS")
    if external_kubeconfig and external_kafka:
        yield Stack(
            kubeconfig=Path(external_kubeconfig).expanduser(),
            kafka_bootstrap=external_kafka,
            telemetry_endpoint=os.environ.get("KCT_TELEMETRY_ENDPOINT", "http://127.0.0.1:4318/v1/metrics"),
            local=False,
            receiver_token=os.environ.get("KCT_RECEIVER_TOKEN"),
        )
        return
    was_running = _stack_running()
    subprocess.run([sys.executable, str(STACK_SCRIPT), "up"], check=True)
    values = read_env_file(STACK_ENV)
    yield Stack(
        kubeconfig=Path(values["KUBECONFIG"]),
        kafka_bootstrap=values["KAFKA_BOOTSTRAP_SERVERS"],
        telemetry_endpoint=values["KCT_TELEMETRY_ENDPOINT"],
        local=True,
        receiver_token=Path(values["KCT_RECEIVER_TOKEN_FILE"]).read_text().strip(),
    )
    if not was_running and os.environ.get("KCT_STOP_STACK") == "1":
        subprocess.run([sys.executable, str(STACK_SCRIPT), "down"], check=False)


@pytest.fixture(scope="session")
def kube_api(stack: Stack) -> object:
    from kubernetes import config

    return config.new_client_from_config(config_file=str(stack.kubeconfig))


@pytest.fixture
def namespace(kube_api: object) -> Iterator[str]:
    from kubernetes import client

    core = client.CoreV1Api(kube_api)
    name = f"kct-test-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)
