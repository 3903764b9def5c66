"""End to end: the KIP-714 client libraries (dev/stack/kafka_clients.CLIENTS) against one broker with our plugin.

librdkafka from the oldest version without the subscription crash (2.5.3) to the newest confluent-kafka, and
Java kafka-clients 3.7 and the newest, each a process of its own with a subscription of its own, push every
second through the plugin to the real receiver (tests/e2e/client_matrix_support.py). From the receiver's
topic: which metrics each library sends and the temporality of its sums (Java: DELTA, librdkafka:
CUMULATIVE); that the receiver accepted every push (its 200s equal the records) with the broker labels on
each; and that the product's batch aggregation turns each library's set into client_metrics rows whose
deltas add up to what the client counted. The module prints the table at its end (`pytest -s`) and writes
it to build/client-library-matrix.md.
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from client_matrix_support import (
    CLIENTS,
    INTERVAL_MS,
    LIVE_PUSHES,
    NO_TERMINATING_PUSH,
    TERMINATING_PUSH_BEST_EFFORT,
    ClientLibrary,
    ClientMatrixRun,
    ClientRun,
    missing_libraries,
    run_client_matrix,
)
from preconditions import missing_precondition

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[2]
TABLE = REPO / "build" / "client-library-matrix.md"
SOFTWARE = {"librdkafka": "confluent-kafka-python", "java": "apache-kafka-java"}
# KIP-714's broker-added labels the plugin forwards as headers (push_interval_ms: KIP-1217's 4.2+ interface).
LABELS = ("client_instance_id", "client_id", "client_software_name", "client_software_version",
          "client_source_address", "client_source_port", "principal", "broker_id", "listener", "terminating",
          "push_interval_ms")
PREFIX = "org.apache.kafka."
WINDOW_S = 60  # aggregation_support.write_config's window


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClientMatrixRun]:
    missing = missing_libraries()
    if missing:
        missing_precondition(f"not cached: {', '.join(missing)}: run `make stack-install`")
    if shutil.which("javac") is None:
        missing_precondition("`javac` is not on PATH (Debian: openjdk-17-jdk-headless)")
    root = tmp_path_factory.mktemp("client-matrix")
    run = run_client_matrix(root, root / "aggregation")
    yield run
    _report(run)


def _clients_of(run: ClientMatrixRun, library: ClientLibrary) -> list[ClientRun]:
    return [c for c in run.clients.values() if c.library == library]


@pytest.mark.parametrize("library", CLIENTS, ids=lambda c: c.name)
def test_every_push_reaches_the_topic_with_the_broker_labels(library: ClientLibrary, matrix: ClientMatrixRun) -> None:
    """Given the library's clients with a subscription of their own (all metrics, every 2 s),
    When they run until each has three pushes at the receiver, then close,
    Then every push reached the receiver's topic keyed by the client's instance id, each with every broker
    label: this client's id, the library's software name and version, the broker's id and the push interval;
    librdkafka's last push (the newest data) is its one terminating push; Java's may be (best effort), except
    Kafka 3.7's, which sends none."""
    assert matrix.exit_codes[library.name] == 0
    for client in _clients_of(matrix, library):
        assert client.live_pushes() >= LIVE_PUSHES, f"{client.key}: {client.live_pushes()} pushes"
        if library.name in NO_TERMINATING_PUSH:
            assert not client.terminated(), f"{client.key}: a terminating push from a client that sends none"
        elif library.kind not in TERMINATING_PUSH_BEST_EFFORT or client.terminated():
            assert client.terminating_push_is_newest(), f"{client.key}: {client.headers}"
        for label in LABELS:
            assert all(label in h for h in client.headers), f"{client.key}: {label} missing on some push"
        instance_ids = {h["client_instance_id"] for h in client.headers}
        assert len(instance_ids) == 1, f"{client.key}: several instance ids {instance_ids}"
        assert set(client.keys) == {next(iter(instance_ids)).encode()}
        assert {h["client_id"] for h in client.headers} == {client.client_id}
        assert {h["client_software_name"] for h in client.headers} == {SOFTWARE[library.kind]}
        versions = {h["client_software_version"] for h in client.headers}
        assert len(versions) == 1 and library.version in next(iter(versions)), f"{client.key}: {versions}"
        assert {h["broker_id"] for h in client.headers} == {"1"}
        assert {h["push_interval_ms"] for h in client.headers} == {str(INTERVAL_MS)}


def test_the_receiver_accepted_every_push(matrix: ClientMatrixRun) -> None:
    """Given every library's pushes,
    When the receiver's own metrics and the plugin's counters are read after the topic,
    Then every push the plugin forwarded was answered 200 and is a record in the topic, none was dropped or
    given up, and none was refused: the broker paced them, the receiver does not pace them again (a push the
    plugin's queue delayed would look early and, refused, could be given up: a DELTA push lost)."""
    assert matrix.accepted_pushes == matrix.topic_records > 0
    assert matrix.topic_records == sum(len(c.headers) for c in matrix.clients.values())
    assert not matrix.other_statuses, matrix.other_statuses
    assert matrix.plugin, "the plugin's counters could not be read over JMX"
    assert matrix.plugin["forwarded-total"] == matrix.topic_records, matrix.plugin
    assert matrix.plugin["dropped-total"] == 0 and matrix.plugin["failed-total"] == 0, matrix.plugin
    assert matrix.plugin["rate-limited-total"] == 0, matrix.plugin


@pytest.mark.parametrize("library", CLIENTS, ids=lambda c: c.name)
def test_sums_have_the_temporality_the_broker_asks_for(library: ClientLibrary, matrix: ClientMatrixRun) -> None:
    """Given the library's pushes, decoded, and the broker's GetTelemetrySubscriptions answer,
    When their sums are looked at,
    Then the broker asks for DELTA (Kafka's broker always does) and every sum the library sends is DELTA:
    librdkafka as well as Java honours the broker's DeltaTemporality (librdkafka would send CUMULATIVE sums
    only to a broker asking for them), and every metric is in KIP-714's `org.apache.kafka.` namespace."""
    assert matrix.broker_asks_delta, "the broker asked for CUMULATIVE sums"
    for client in _clients_of(matrix, library):
        sums = {m.name: m.temporality for m in client.metrics.values() if m.kind == "sum"}
        assert sums, f"{client.key}: no sums among {sorted(client.metrics)}"
        assert set(sums.values()) == {"delta"}, f"{client.key}: {sums}"
        assert all(name.startswith(PREFIX) for name in client.metrics), sorted(client.metrics)


@pytest.mark.parametrize("library", CLIENTS, ids=lambda c: c.name)
def test_aggregation_handles_the_library_set(library: ClientLibrary, matrix: ClientMatrixRun) -> None:
    """Given the receiver's topic with every library's pushes,
    When the product's batch aggregation (`kct aggregate`, local Spark) runs over it,
    Then each client has client_metrics rows for every metric it sent, with its broker labels; every sum's
    deltas and rates are >= 0 (rate = delta / window) and its deltas add up to what the client counted
    (its points added); a Java producer counted at least one connection (librdkafka's first delta starts
    after its connections were made, so it counts none here); and a Java producer's count of records sent
    equals the records in its data topic (at most that without a terminating push, which would count the
    last ones)."""
    rows = _rows_by_instance(matrix)
    for client in _clients_of(matrix, library):
        instance = client.headers[0]["client_instance_id"]
        mine = rows[instance]
        assert mine, f"{client.key}: no client_metrics rows"
        assert {r["metric"] for r in mine} == set(client.metrics), f"{client.key}: metrics differ"
        assert {r["client_id"] for r in mine} == {client.client_id}
        for name, seen in client.metrics.items():
            if seen.kind != "sum":
                continue
            metric_rows = [r for r in mine if r["metric"] == name]
            assert {r["temporality"] for r in metric_rows} == {seen.temporality}
            assert all(r["delta"] >= 0 and r["rate"] >= 0 for r in metric_rows), (client.key, name, metric_rows)
            assert all(r["rate"] == pytest.approx(r["delta"] / WINDOW_S) for r in metric_rows)
            delta = sum(r["delta"] for r in metric_rows)
            assert delta == pytest.approx(seen.expected_delta()), (client.key, name)
        if library.kind == "java":
            connections = sum(r["delta"] for r in mine if r["metric"] == PREFIX + "producer.connection.creation.total")
            assert connections >= 1, f"{client.key}: connections created {connections}"
            sent = sum(r["delta"] for r in mine if r["metric"] == PREFIX + "producer.record.send.total")
            produced = matrix.produced[library.name]
            if library.name in NO_TERMINATING_PUSH:
                assert 0 < sent <= produced, f"{client.key}: records sent {sent} of {produced}"
            else:
                assert sent == produced > 0, f"{client.key}: records sent {sent} of {produced}"


def _rows_by_instance(run: ClientMatrixRun) -> dict[str, list[dict[str, object]]]:
    rows: dict[str, list[dict[str, object]]] = defaultdict(list)
    for row in run.client_metrics:
        rows[str(row["client_instance_id"])].append(row)
    return rows


def _report(run: ClientMatrixRun) -> None:
    rows_by_instance = _rows_by_instance(run)
    receiver_ok = not run.other_statuses and run.accepted_pushes == run.topic_records
    lines = ["", f"## KIP-714 client libraries against Kafka {run.broker.version} "
             "(tests/e2e/test_client_matrix_e2e.py)", "",
             "| library | version (software version label) | client | metrics sent | sums | pushes at the receiver "
             "| terminating push | client_metrics rows (metrics) | result |",
             "|---|---|---|---|---|---|---|---|---|"]
    for client in run.clients.values():
        version = client.headers[0]["client_software_version"] if client.headers else "-"
        sums = ", ".join(sorted({m.temporality or "" for m in client.metrics.values() if m.kind == "sum"})) or "-"
        instance = client.headers[0]["client_instance_id"] if client.headers else ""
        mine = rows_by_instance.get(instance, [])
        aggregated = {str(r["metric"]) for r in mine}
        label = "librdkafka (confluent-kafka)" if client.library.kind == "librdkafka" else "Java kafka-clients"
        terminating = "yes" if client.terminated() else "no"
        ok = (receiver_ok and client.live_pushes() >= LIVE_PUSHES and aggregated == set(client.metrics)
              and run.exit_codes.get(client.library.name) == 0)
        lines.append(f"| {label} | {client.library.version} ({version}) | {client.role} | {len(client.metrics)} "
                     f"| {sums} | {len(client.headers)} | {terminating} | {len(mine)} ({len(aggregated)}) "
                     f"| {'pushes accepted, aggregated' if ok else 'FAILED'} |")
    lines += ["", "Metrics sent, by client (without `org.apache.kafka.`):", ""]
    for client in run.clients.values():
        names = ", ".join(n.removeprefix(PREFIX) for n in sorted(client.metrics))
        lines.append(f"- {client.key}: {names}")
    lines += ["", "Time between a client's records in the receiver's topic (ms):", ""]
    for client in run.clients.values():
        gaps = [b - a for a, b in zip(client.written_ms, client.written_ms[1:], strict=False)]
        lines.append(f"- {client.key}: {gaps}")
    statuses = ", ".join(f"{k}: {v:.0f}" for k, v in sorted(run.other_statuses.items())) or "none"
    asked = "DELTA" if run.broker_asks_delta else "CUMULATIVE"
    plugin = ", ".join(f"{k} {run.plugin.get(k, float('nan')):.0f}"
                       for k in ("forwarded-total", "rate-limited-total", "dropped-total", "failed-total"))
    lines += ["", f"The broker asks for {asked} sums. Receiver: {run.accepted_pushes:.0f} pushes answered 200, other "
              f"statuses: {statuses}; {run.topic_records} records in its topic. Plugin: {plugin}.",
              f"Time: broker ready {run.ready_s:.0f} s, clients pushing {run.pushes_s:.0f} s, aggregation "
              f"{run.aggregation_s:.0f} s, total {run.wall_s:.0f} s."]
    text = "\n".join(lines) + "\n"
    print(text)
    TABLE.parent.mkdir(parents=True, exist_ok=True)
    TABLE.write_text(text)
