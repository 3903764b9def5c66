"""The configuration's `runtime` section chooses the event loop `kct receiver` runs on (its Kafka delivery
wake-up is checked with the real librdkafka in test_receiver_kafka_events.py)."""

from __future__ import annotations

import asyncio
import logging
import sys

import pytest

from kct.receiver.command import event_loop_factory
from kct.receiver.config import ConfigError, parse_receiver_config

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


def test_runtime_defaults_are_uvloop_and_eventfd() -> None:
    """Given no runtime section, then uvloop and librdkafka's eventfd, the faster choices."""
    runtime = parse_receiver_config({"kafka": KAFKA}).runtime
    assert (runtime.event_loop, runtime.delivery_wakeup) == ("uvloop", "eventfd")


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
