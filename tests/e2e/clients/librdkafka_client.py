"""A librdkafka producer and consumer for tests/e2e/test_client_matrix_e2e.py, run by the interpreter of one
confluent-kafka version's own virtualenv (dev/stack/kafka_clients.py), so it imports nothing but that package.

It sets nothing about telemetry: KIP-714 pushes are on by default (enable.metrics.push), so what the broker's
plugin receives is what any application on this librdkafka sends. The producer sends a record every 100 ms to
`topic` (the consumer's poll paces the loop) until `stop` exists (or 90 s passed); both clients then close,
which sends their terminating pushes. `result` gets what the clients did, as JSON: the confluent-kafka and
librdkafka versions, records acknowledged and records consumed.

    python librdkafka_client.py BOOTSTRAP TOPIC CLIENT_ID_PREFIX STOP_FILE RESULT_FILE
"""

from __future__ import annotations

import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

import confluent_kafka


def _version(value: Any) -> str:
    # (version string, int) in every release so far; a bare string tolerated.
    return str(value[0] if isinstance(value, tuple) else value)


def main(bootstrap: str, topic: str, prefix: str, stop: str, result: str) -> int:
    acknowledged = [0]

    def delivered(err: Any, _msg: Any) -> None:
        if err is None:
            acknowledged[0] += 1

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "client.id": f"{prefix}-producer",
                                         "linger.ms": 5})
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "client.id": f"{prefix}-consumer",
                                         "group.id": f"{prefix}-group", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    consumed = 0
    deadline = time.monotonic() + 90
    while not Path(stop).exists() and time.monotonic() < deadline:
        producer.produce(topic, b"m", on_delivery=delivered)
        producer.poll(0)
        msg = consumer.poll(0.1)
        if msg is not None and msg.error() is None:
            consumed += 1
    unacknowledged = producer.flush(30)
    consumer.close()
    # Older confluent-kafka has no Producer.close(): dropping the last reference destroys the handle, which
    # sends the terminating push (rd_kafka_destroy).
    del producer
    gc.collect()
    Path(result).write_text(json.dumps({
        "confluent_kafka": _version(confluent_kafka.version()), "librdkafka": _version(confluent_kafka.libversion()),
        "acknowledged": acknowledged[0], "unacknowledged": unacknowledged, "consumed": consumed,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:6]))
