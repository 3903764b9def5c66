"""A librdkafka (confluent-kafka) producer or consumer that runs as a pod's only process, from our runtime
image (which ships Python and confluent-kafka); dev/demo/client_pods.py mounts it from a ConfigMap.

It sets nothing about telemetry: KIP-714 pushes are on by default (`enable.metrics.push`), so what the
broker's plugin receives is what any application on this librdkafka sends once a subscription matches it.
`client.id` is the pod's name (as many applications use their host name): that is what the client itself
says, while the receiver finds the pod from the connection's source address; the two agree only when
attribution is right. SIGTERM closes the client, which sends its terminating push.

    python librdkafka_client.py producer|consumer BOOTSTRAP TOPIC CLIENT_ID [RATE_PER_S | GROUP]
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

from confluent_kafka import Consumer, Producer


def produce(bootstrap: str, topic: str, client_id: str, rate: float, stop: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5})
    sequence = 0
    while not stop.is_set():
        producer.produce(topic, key=f"k{sequence % 16}", value=f"{client_id} #{sequence}".encode())
        producer.poll(0)
        sequence += 1
        stop.wait(1.0 / rate)  # paces the loop and wakes at once on SIGTERM
    producer.flush(10)


def consume(bootstrap: str, topic: str, client_id: str, group: str, stop: threading.Event) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": group,
                         "auto.offset.reset": "latest"})
    consumer.subscribe([topic])
    try:
        while not stop.is_set():
            consumer.poll(0.5)
    finally:
        consumer.close()


def main(argv: list[str]) -> int:
    role, bootstrap, topic, client_id, extra = argv
    stop = threading.Event()

    def on_term(_signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_term)
    print(f"{role} {client_id} -> {bootstrap} {topic}", flush=True)
    if role == "producer":
        produce(bootstrap, topic, client_id, float(extra), stop)
    else:
        consume(bootstrap, topic, client_id, extra, stop)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
