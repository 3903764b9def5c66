"""End to end: the broker plugin uses a rotated bearer token without a restart, and loses no push meanwhile.

Issue 16, item 4 (the plugin's half). The local stack's broker reads its token from the file
build/stack/telemetry-token (`kct.telemetry.token.file`). Ten clients push every second to an endpoint
(this test binds it) that accepts one token at a time, and the token is rotated twice while they push:

1. the endpoint first, the file 1.5 s later (a receiver that saw the changed Secret before the kubelet
   refreshed the broker's mounted copy): the plugin's pushes meet 401, it re-reads the file, finds the same
   token and holds the queue (backoff) until the file changes, then retries with the new token;
2. the file first, the endpoint 1.5 s later: the plugin sends the new token at once and meets 401 until
   the endpoint switches.

Every client's sequence of pushes (by collection time) has no hole, and the plugin counts nothing dropped
or failed. The original token is written back at the end (other tests read it).
"""

from __future__ import annotations

import itertools
import secrets
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Protocol

import pytest
from confluent_kafka import Producer
from helpers import eventually
from plugin_support import client_metrics_subscription, otlp_endpoint

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "dev" / "stack"))
import kafka_broker  # noqa: E402  (dev/stack is not a package)

pytestmark = pytest.mark.e2e

CLIENTS = 10
INTERVAL_S = 1.0
PHASE_S = 6.0
LAG_S = 1.5
STACK_STATE = REPO / "build" / "stack"
TOKEN_FILE = STACK_STATE / "telemetry-token"
COUNTERS = ("dropped-total", "failed-total", "token-reloads-total")


class Stack(Protocol):
    kafka_bootstrap: str
    telemetry_endpoint: str
    local: bool


def _write_token(value: str) -> None:
    """Replace the file in one step (a rename), as the kubelet swaps a mounted Secret."""
    tmp = TOKEN_FILE.with_suffix(".rotating")
    tmp.write_text(value)
    tmp.chmod(0o600)
    tmp.replace(TOKEN_FILE)


def _counters() -> dict[str, float]:
    values: dict[str, float] = kafka_broker.plugin_counters(STACK_STATE)
    if "forwarded-total" not in values:
        pytest.fail(f"cannot read the plugin's JMX counters from the broker of {STACK_STATE}")
    return values


def test_rotated_token_is_used_without_a_restart_and_no_push_is_lost(stack: Stack) -> None:
    """Given ten clients pushing every second through the plugin to an endpoint that accepts one token,
    When the token is rotated twice (endpoint first, then file first) while they push,
    Then the plugin sends the new token without a broker restart, every push arrives (no hole in any
    client's sequence), and nothing is counted dropped or failed."""
    stack.require_local("rotates the local stack's token file and reads the plugin's counters over JMX")
    if not TOKEN_FILE.exists():
        pytest.fail(f"{TOKEN_FILE} is missing: the local stack starts the broker with this token file")
    original = TOKEN_FILE.read_text()
    old, middle, new = original.strip(), secrets.token_hex(24), secrets.token_hex(24)
    accepted = [old]
    run = uuid.uuid4().hex[:8]
    prefix = f"kct-e2e-token-{run}"
    client_ids = [f"{prefix}-{i}" for i in range(CLIENTS)]
    subscription = {"metrics": "org.apache.kafka.producer.", "interval.ms": str(int(INTERVAL_S * 1000)),
                    "match": f"client_id={prefix}-.*"}
    producers: list[Producer] = []
    try:
        with client_metrics_subscription(stack.kafka_bootstrap, prefix, subscription), \
                otlp_endpoint(stack.telemetry_endpoint, token=lambda: accepted[0]) as endpoint:
            producers += [Producer({"bootstrap.servers": stack.kafka_bootstrap, "client.id": cid})
                          for cid in client_ids]
            eventually(lambda: {p.label("kct-client-id") for p in endpoint.snapshot()} >= set(client_ids),
                       timeout=60, what=f"a push from each of the {CLIENTS} clients with the current token")
            before = _counters()
            t_start = time.time()
            time.sleep(PHASE_S)  # duration: a phase of pushes with the first token
            accepted[0] = middle  # 1: the endpoint first ...
            time.sleep(LAG_S)  # duration: the lag between the endpoint's and the file's rotation
            _write_token(middle + "\n")  # ... the file later
            time.sleep(PHASE_S)  # duration: a phase of pushes with the middle token
            _write_token(new + "\n")  # 2: the file first ...
            time.sleep(LAG_S)  # duration: the lag between the file's and the endpoint's rotation
            accepted[0] = new  # ... the endpoint later
            time.sleep(PHASE_S)  # duration: a phase of pushes with the new token
            after = _counters()
            t_end = time.time()
            while producers:
                producers.pop().close()
            # duration: the terminating pushes (best effort, maybe none) go to this endpoint, not the next test's
            time.sleep(2 * INTERVAL_S)
    finally:
        while producers:
            producers.pop().close()
        _write_token(original)

    with endpoint.lock:
        refused = [p for p in endpoint.refused if p.label("kct-client-id") in client_ids]
        delivered = [p for p in endpoint.pushes if p.label("kct-client-id") in client_ids]
    refused_with = {p.headers.get("authorization") for p in refused}
    collected: dict[str, list[float]] = defaultdict(list)
    for p in delivered:
        at = p.collected_at()
        if p.label("kct-terminating") == "false" and at is not None and t_start <= at <= t_end - 2 * INTERVAL_S:
            collected[p.label("kct-client-id") or ""].append(at)
    gaps = {cid: max((b - a for a, b in itertools.pairwise(sorted(collected[cid]))), default=float("inf"))
            for cid in client_ids}
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in COUNTERS}
    print()
    print(f"token rotation with {CLIENTS} clients pushing every {INTERVAL_S:.0f}s: {len(refused)} pushes met 401 "
          f"and were retried; {len(delivered)} delivered; largest gap in a client's pushes "
          f"{max(gaps.values()):.2f}s; plugin counters {delta}")

    assert refused_with == {f"Bearer {old}", f"Bearer {new}"}, \
        f"401s expected for the old token (rotation 1) and the new one (rotation 2), got {len(refused_with)} kinds"
    last = max(delivered, key=lambda p: p.received_at)
    assert last.headers.get("authorization") == f"Bearer {new}"
    holes = {cid: round(g, 2) for cid, g in gaps.items() if g > 1.8 * INTERVAL_S}
    assert not holes, f"clients that missed a push during the rotations (largest gap, s): {holes}"
    assert delta["dropped-total"] == 0 and delta["failed-total"] == 0, f"pushes lost: {delta}"
    assert delta["token-reloads-total"] >= 2, f"the plugin never re-read its token file after a 401: {delta}"
