"""The demo's Kafka clients: real confluent-kafka producers and consumers that push KIP-714 telemetry.

Each client has its own `client.id` and announces its own software name and version
(`client.software.name` / `client.software.version`, which the broker reports as the
`client_software_*` labels and subscriptions can match on). librdkafka pushes telemetry by itself
(`enable.metrics.push` is on by default) as soon as a CLIENT_METRICS subscription matches it, so the
clients here only produce and consume; the fleet runs them in threads until stopped.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["DEMO_CLIENTS", "ClientFleet", "ClientSpec", "ensure_topics"]


@dataclass(frozen=True)
class ClientSpec:
    """One demo client: a producer writing `rate` messages/s to `topic`, or a consumer of `topic`."""

    client_id: str
    role: str  # "producer" | "consumer"
    topic: str
    software_name: str
    software_version: str
    rate: float = 0.0  # producer: messages per second
    group: str = ""  # consumer group


DEMO_CLIENTS: tuple[ClientSpec, ...] = (
    ClientSpec("demo-orders-producer", "producer", "demo-orders", "kct-demo-shop", "1.4.2", rate=200),
    ClientSpec("demo-payments-producer", "producer", "demo-payments", "kct-demo-shop", "1.3.0", rate=50),
    ClientSpec("demo-orders-consumer", "consumer", "demo-orders", "kct-demo-billing", "2.0.1", group="billing"),
    ClientSpec("demo-payments-consumer", "consumer", "demo-payments", "kct-demo-ledger", "0.9.7", group="ledger"),
)


# The node stack's Kafka is three brokers: the demo's topics have a replica on each, two in sync required for
# an `acks=all` write, as a production cluster's would.
REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2


def ensure_topics(bootstrap: str, topics: list[str], partitions: int = 3) -> None:
    """Create the demo's data topics if missing (the broker would auto-create them with one partition), with
    REPLICATION_FACTOR replicas and MIN_INSYNC_REPLICAS."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "kct-demo-setup", "enable.metrics.push": False,
                         "log_level": 3})
    existing = set(admin.list_topics(timeout=10).topics)
    wanted = [NewTopic(t, num_partitions=partitions, replication_factor=REPLICATION_FACTOR,
                       config={"min.insync.replicas": str(MIN_INSYNC_REPLICAS)}) for t in topics if t not in existing]
    for topic, future in admin.create_topics(wanted).items() if wanted else []:
        try:
            future.result(timeout=30)
        except Exception as error:  # created concurrently: fine
            if "TOPIC_ALREADY_EXISTS" not in str(error):
                raise RuntimeError(f"creating topic {topic}: {error}") from error


@dataclass
class _Counters:
    produced: int = 0
    consumed: int = 0
    errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class ClientFleet:
    """Runs every `ClientSpec` in its own thread until `stop()`; counts messages per client id."""

    def __init__(self, bootstrap: str, specs: tuple[ClientSpec, ...] = DEMO_CLIENTS,
                 log_file: Path | None = None) -> None:
        self.bootstrap = bootstrap
        # librdkafka's own log lines (telemetry subscriptions, rebalances) go to a file, not the terminal
        self.logger = logging.getLogger("kct-demo-clients")
        self.logger.propagate = False
        if log_file is not None and not self.logger.handlers:
            handler = logging.FileHandler(log_file)
            handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
            self.logger.addHandler(handler)
        self.logger.setLevel(logging.INFO)
        self.specs = specs
        self.counters = {spec.client_id: _Counters() for spec in specs}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.failures: list[str] = []

    def _config(self, spec: ClientSpec) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap,
            "client.id": spec.client_id,
            "client.software.name": spec.software_name,
            "client.software.version": spec.software_version,
            "enable.metrics.push": True,
            "logger": self.logger,
        }

    def start(self) -> None:
        for spec in self.specs:
            target = self._run_producer if spec.role == "producer" else self._run_consumer
            thread = threading.Thread(target=self._guard, args=(target, spec), name=spec.client_id, daemon=True)
            thread.start()
            self._threads.append(thread)

    def _guard(self, target: Any, spec: ClientSpec) -> None:
        try:
            target(spec)
        except Exception as error:
            self.failures.append(f"{spec.client_id}: {error}")

    def _run_producer(self, spec: ClientSpec) -> None:
        from confluent_kafka import Producer

        counters = self.counters[spec.client_id]

        def delivered(err: Any, _msg: Any) -> None:
            with counters.lock:
                if err is None:
                    counters.produced += 1
                else:
                    counters.errors += 1

        producer = Producer({**self._config(spec), "linger.ms": 5, "acks": "all"})
        period = 1.0 / spec.rate
        next_at = time.monotonic()
        seq = 0
        while not self._stop.is_set():
            producer.produce(spec.topic, key=f"k{seq % 64}", value=f"{spec.client_id} #{seq}".encode(),
                             on_delivery=delivered)
            seq += 1
            producer.poll(0)
            next_at += period
            delay = next_at - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
        producer.flush(10)
        # Closing the client sends its last push with the terminating flag (KIP-714).
        del producer

    def _run_consumer(self, spec: ClientSpec) -> None:
        from confluent_kafka import Consumer

        counters = self.counters[spec.client_id]
        consumer = Consumer({**self._config(spec), "group.id": spec.group, "auto.offset.reset": "latest"})
        consumer.subscribe([spec.topic])
        try:
            while not self._stop.is_set():
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                with counters.lock:
                    if msg.error():
                        counters.errors += 1
                    else:
                        counters.consumed += 1
        finally:
            consumer.close()

    def alive(self) -> list[str]:
        return [t.name for t in self._threads if t.is_alive()]

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.1, deadline - time.monotonic()))
