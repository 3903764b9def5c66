"""Slow senders cannot exhaust the receiver: 2,000 connections trickling requests byte by byte and a
connection flood, while legitimate clients push, against a receiver process in front of a real Kafka broker.

Everything runs on loopback: a broker of the stack's Kafka release started on free ports (no plugin, no
fixed-port stack), the receiver as `kct receiver`, the attacker as a process of its own, the legitimate
clients in the test's loop. The attack is bench/receiver_slow_senders.py's (which prints the figures:
success rate, latency p50/p99, RSS); this test asserts correctness, not speed.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from preconditions import missing_precondition
from script_loader import load_script

from kct.api.telemetry_receiver import TelemetryReceiverSpec

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SLOW = load_script(REPO / "bench" / "receiver_slow_senders.py")
TRICKLE, FLOOD, ATTACK_S = 2000, 1500, 20.0
# Descriptors the attacker and the receiver each need: trickle + flood + legitimate clients + Kafka, with room.
NEEDED_OPEN_FILES = TRICKLE + FLOOD + 1000


def _mebibytes(quantity: str) -> float:
    number, unit = re.fullmatch(r"(\d+)(Mi|Gi)", quantity).groups()  # type: ignore[union-attr]
    return float(number) * (1024 if unit == "Gi" else 1)


def test_slow_senders_and_a_flood_do_not_stop_real_pushes(tmp_path: Path) -> None:
    """Given a receiver with the default memory limit of the rendered Deployment and connection settings
    small enough to see every bound fire (maxOpen 3000, header 3 s, body 5 s), when 2,000 connections
    trickle requests one byte a second (a quarter their heads, the rest their bodies) and 1,500 more are
    opened and held without a byte, for 20 s, then every legitimate push made while the attack is in full
    swing is answered 200, the receiver's RSS stays under the limit, the attack met every bound (header and
    body timeouts, the connection cap), and every acknowledged push is a record on the topic."""
    open_files = SLOW.raise_open_files()
    if open_files < NEEDED_OPEN_FILES:
        missing_precondition(f"the open-file limit is {open_files}; the attack needs {NEEDED_OPEN_FILES} "
                             "(raise the hard limit: `ulimit -Hn`)")
    limit = TelemetryReceiverSpec().resources.limits
    assert limit is not None and "memory" in limit
    memory_limit_mb = _mebibytes(limit["memory"])

    with SLOW.kafka_broker_on_free_ports(tmp_path) as bootstrap:
        topic = "kct-slow-senders"
        SLOW.create_topic(bootstrap, topic)
        port = SLOW.free_port()
        with SLOW.receiver_process(tmp_path, bootstrap, topic, port) as process:
            figures = asyncio.run(SLOW.attack(port, process.pid, seconds=ATTACK_S, trickle=TRICKLE, flood=FLOOD))
            closes = SLOW.closes_by_reason(port)
            assert process.poll() is None, (tmp_path / "receiver.log").read_text()[-3000:]

        assert figures.attempted >= 50, "too few legitimate pushes during the attack to judge"
        assert figures.counted_acked == figures.attempted, dict(figures.failures)
        assert figures.peak_attackers_open >= TRICKLE
        assert figures.peak_rss_mb < memory_limit_mb
        assert closes["header_timeout"] > 0 and closes["body_timeout"] > 0 and closes["connection_limit"] > 0
        acked = set(figures.acked)
        on_topic = SLOW.topic_keys(bootstrap, topic, acked)
        print(SLOW.report(figures, closes, len(acked & on_topic), open_files))
        assert not acked - on_topic, f"{len(acked - on_topic)} acknowledged pushes are not on the topic"
