"""The receiver under fuzzing, in a process of its own: the real `ReceiverServer` (aiohttp, pipeline, limits)
with an in-memory sink that counts and checks what would have been written to Kafka.

    python fuzz_receiver_proc.py CONFIG.yaml RECORDS.json     # token in KCT_FUZZ_TOKEN

Prints `listening <port>` once it accepts connections. On SIGTERM it drains as `kct receiver` does; the
sink then writes RECORDS.json: how many records, each record's key (the pushes' `kct-client-instance-id`)
and how many record values were not a parseable ExportMetricsServiceRequest (must be none).

Why a fake sink: the invariant under test ("a record exists exactly for each 200") is decided before the
sink port, and the fuzzer needs ~1,000 inputs/s; a Kafka round trip per accepted push would make that
several times slower without exercising anything more of the receiver. The real Kafka sink's "200 only
after the acknowledgement" is covered by tests/e2e/test_receiver_e2e.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from kct.receiver.config import load_receiver_config
from kct.receiver.jsonlog import configure_logging
from kct.receiver.server import ReceiverServer
from kct.receiver.sink import MemorySink


class CheckingSink(MemorySink):
    def __init__(self, out: Path) -> None:
        super().__init__()
        self.out = out
        self.keys: list[str] = []
        self.unparseable = 0
        self.empty = 0

    async def send(self, key: bytes, value: bytes, headers: Sequence[tuple[str, bytes]]) -> None:
        try:
            request = ExportMetricsServiceRequest.FromString(value)
        except (DecodeError, RecursionError):
            self.unparseable += 1
        else:
            if not request.resource_metrics:
                self.empty += 1
        self.keys.append(key.decode("utf-8", "replace"))

    async def close(self, timeout_s: float) -> None:
        self.out.write_text(json.dumps({"records": len(self.keys), "keys": self.keys,
                                        "unparseable": self.unparseable, "empty": self.empty}))
        await super().close(timeout_s)


async def main(config_path: str, out: str) -> None:
    config = load_receiver_config(config_path)
    configure_logging(config.logging.level, config.logging.format)
    server = ReceiverServer(config, CheckingSink(Path(out)), token=os.environ["KCT_FUZZ_TOKEN"])
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await server.start()
    print(f"listening {server.port}", flush=True)
    await stop.wait()
    await server.stop()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
