"""The configuration's `runtime` section chooses the event loop `kct receiver` runs on (its Kafka delivery
wake-up is checked with the real librdkafka in test_receiver_kafka_events.py)."""

from __future__ import annotations

import asyncio
import logging
import sys

import pytest
from conftest import PROTOBUF, TOKEN, base_config, make_request

from kct.receiver.command import event_loop_factory
from kct.receiver.config import ConfigError, parse_receiver_config
from kct.receiver.server import ReceiverServer
from kct.receiver.sink import MemorySink

KAFKA = {"bootstrapServers": "k:9092"}


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


@pytest.mark.parametrize(("chosen", "module"), [("uvloop", "uvloop"), ("asyncio", "asyncio")])
def test_runtime_event_loop_selects_the_loop(chosen: str, module: str) -> None:
    """Given runtime.eventLoop, when the receiver's runner starts with the factory it selects, then the
    coroutines run on that loop."""
    config = parse_receiver_config({"kafka": KAFKA, "runtime": {"eventLoop": chosen}})
    with asyncio.Runner(loop_factory=event_loop_factory(config.runtime.event_loop)) as runner:
        assert runner.run(_loop_module()).startswith(module)


def test_runtime_defaults_are_asyncio_and_eventfd() -> None:
    """Given no runtime section, then asyncio's loop (a burst of new connections accepted at once) and
    librdkafka's eventfd."""
    runtime = parse_receiver_config({"kafka": KAFKA}).runtime
    assert (runtime.event_loop, runtime.delivery_wakeup) == ("asyncio", "eventfd")


def test_an_unknown_runtime_choice_names_the_field() -> None:
    """Given a value the model does not know, then ConfigError names the key."""
    with pytest.raises(ConfigError, match=r"runtime\.eventLoop"):
        parse_receiver_config({"kafka": KAFKA, "runtime": {"eventLoop": "tokio"}})
    with pytest.raises(ConfigError, match=r"runtime\.deliveryWakeup"):
        parse_receiver_config({"kafka": KAFKA, "runtime": {"deliveryWakeup": "poll"}})


def test_without_uvloop_the_receiver_runs_asyncio_and_says_so(monkeypatch: pytest.MonkeyPatch,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """Given uvloop chosen but not importable, then asyncio's loop, with a warning naming the setting."""
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` raises ImportError
    with caplog.at_level(logging.WARNING, logger="kct.receiver.command"):
        assert event_loop_factory("uvloop") is None
    assert "runtime.eventLoop" in caplog.text


BURST = 512  # new connections at once: half the default listen backlog, a fleet reconnecting


async def _burst_of_new_connections(n: int) -> tuple[list[int], int]:
    """n connections opened together, then one push on each: (each answer's status, records stored)."""
    sink = MemorySink()
    server = ReceiverServer(base_config(), sink, token=TOKEN)
    await server.start()
    body = make_request().SerializeToString()
    head = (f"POST /v1/metrics HTTP/1.1\r\nHost: x\r\nContent-Type: {PROTOBUF}\r\nAuthorization: Bearer {TOKEN}"
            f"\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    try:
        pairs = await asyncio.gather(*(asyncio.open_connection("127.0.0.1", server.port) for _ in range(n)))
        for _, writer in pairs:
            writer.write(head + body)
        lines = await asyncio.wait_for(asyncio.gather(*(reader.readuntil(b"\r\n") for reader, _ in pairs)), 60.0)
        for _, writer in pairs:
            writer.close()
        return [int(line.split()[1]) for line in lines], len(sink.records)
    finally:
        await server.stop()


def test_a_burst_of_new_connections_is_accepted_and_answered_on_the_default_loop() -> None:
    """Given the default runtime (asyncio's loop: uvloop left some of a burst in the kernel's accept queue for
    seconds, bench/receiver_vs_collector.py), when BURST connections open at once and each pushes, then every
    one is accepted and answered 200 and every push is stored. How fast is the benchmark's to say."""
    config = parse_receiver_config({"kafka": KAFKA})
    assert config.runtime.event_loop == "asyncio"
    with asyncio.Runner(loop_factory=event_loop_factory(config.runtime.event_loop)) as runner:
        statuses, records = runner.run(_burst_of_new_connections(BURST))
    assert statuses == [200] * BURST and records == BURST
