"""End to end: the broker plugin on every Kafka release it supports (dev/stack/kafka_versions.py MATRIX).

For each release a KRaft broker assembled from its Maven Central jars (cached by `make stack-install`) runs
the plugin class the plugin's README names for it; a CLIENT_METRICS subscription is set through the
operator's admin port; a librdkafka producer and consumer (confluent-kafka) and a Java producer (the
release's own kafka-clients) push every second; the real receiver writes what the plugin forwards to a
topic, which is read back: every client's pushes arrive with the broker-added labels. On the releases
without KIP-1217 the 4.2+ class must stop the broker at start-up with the missing interface named; on 4.2
and later the 3.7+ class must still load.

Brokers run two at a time (tests/e2e/plugin_versions_support.py); the module prints the matrix table at
its end (`pytest -s`) and writes it to build/plugin-version-matrix.md.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator

import pytest
from plugin_versions_support import (
    EXPORTER_CLASS,
    JAVA_CLIENT,
    MATRIX,
    RECEIVER_CLASS,
    REPO,
    KafkaRelease,
    LoadRun,
    MatrixRunner,
    ReleaseRun,
    WrongClassRun,
    compile_java_producer,
    kafka_broker,
    run_load,
    run_release,
    run_wrong_class,
)
from preconditions import missing_precondition

pytestmark = pytest.mark.e2e

WITHOUT_EXPORTER_API = tuple(r for r in MATRIX if not r.has_exporter_api)
WITH_EXPORTER_API = tuple(r for r in MATRIX if r.has_exporter_api)
RESULT_TIMEOUT_S = 540.0  # our broker and the one started alongside it; pytest's own limit is 600 s
# Every push carries these (KIP-714's broker-added labels the plugin forwards as headers, which the receiver
# writes as record headers); push_interval_ms only comes through KIP-1217's 4.2+ interface.
LABELS = ("client_instance_id", "client_id", "client_software_name", "client_software_version",
          "client_source_address", "client_source_port", "principal", "broker_id", "listener", "terminating")
# Kafka 3.7's request context has no client port (RequestContext.clientPort came in 3.8): the plugin leaves
# the label out there rather than sending it empty.
NO_SOURCE_PORT = {(3, 7)}
SOFTWARE = {"librdkafka-producer": "confluent-kafka-python", "librdkafka-consumer": "confluent-kafka-python",
            JAVA_CLIENT: "apache-kafka-java"}
TABLE = REPO / "build" / "plugin-version-matrix.md"


def _key(kind: str, release: KafkaRelease) -> str:
    return f"{kind}-{release.version}"


@pytest.fixture(scope="module")
def matrix(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MatrixRunner]:
    """Submits the runs of this module's selected tests, in their order; prints the table at the end."""
    selected = [item for item in request.session.items if item.module is request.module]
    releases = {item.callspec.params["release"] for item in selected if hasattr(item, "callspec")}
    missing = [r.version for r in releases if not (kafka_broker.libs_dir(r.version) / ".complete").exists()]
    if missing:
        missing_precondition(f"Kafka {', '.join(sorted(missing))} jars are not cached: run `make stack-install`")
    if shutil.which("javac") is None:
        missing_precondition("`javac` is not on PATH (Debian: openjdk-17-jdk-headless)")
    kafka_broker.install()  # rebuilds the plugin jar when its sources changed; the jars are cached
    root = tmp_path_factory.mktemp("kafka-matrix")
    java_classes = compile_java_producer(root / "java-classes", MATRIX[0])
    runner = MatrixRunner(workers=2)
    pushes: list[str] = []
    for item in selected:
        release: KafkaRelease = item.callspec.params["release"]
        if item.originalname == test_plugin_forwards_client_pushes.__name__:
            pushes.append(_key("push", release))
            runner.submit(pushes[-1], lambda r=release: run_release(r, root, java_classes))
        elif item.originalname == test_receiver_class_still_loads_on_4_2_and_later.__name__:
            runner.submit(_key("load", release), lambda r=release: run_load(r, root, RECEIVER_CLASS))
        else:
            runner.submit(_key("wrong", release), lambda r=release: run_wrong_class(r, root))
    yield runner
    runner.close()
    _report(runner, time.monotonic() - runner.started)


@pytest.mark.parametrize("release", MATRIX, ids=lambda r: r.line_name)
def test_plugin_forwards_client_pushes(release: KafkaRelease, matrix: MatrixRunner) -> None:
    """Given a Kafka `release` broker with the plugin class its README names and a CLIENT_METRICS
    subscription (all metrics, 1 s) for this run's clients,
    When a librdkafka producer and consumer and a Java producer of the release run until each has two
    pushes in the receiver's topic,
    Then the broker configured and started the plugin, advertises APIs 71/72, and every push of every client
    reached the topic keyed by its client instance id, with every broker-added label: this client's id, its
    software, 127.0.0.1, User:ANONYMOUS, broker 1, and the push interval exactly where the API gives it."""
    run: ReleaseRun = matrix.result(_key("push", release), timeout=RESULT_TIMEOUT_S)
    assert run.class_configured, f"metric.reporters = [{run.plugin_class}] not in {run.broker_log}"
    assert run.forwarder_started, f"the plugin's forwarder never started: {run.broker_log}"
    assert {71, 72} <= run.apis, f"GetTelemetrySubscriptions/PushTelemetry not advertised: {sorted(run.apis)}"
    assert run.consumed > 0, "the consumer read nothing back: the broker is not serving fetches"
    assert run.keys_match_instance_ids, "records are not keyed by the pushing client's instance id"
    for kind, client in run.clients.items():
        live = [r for r in client.records if r.get("terminating") == "false"]
        assert len(live) >= 2, f"{kind} ({client.client_id}): {len(live)} pushes reached the receiver's topic"
        missing = [label for label in LABELS if label not in client.labels_on_every_push()]
        expected_missing = ["client_source_port"] if release.line in NO_SOURCE_PORT else []
        assert missing == expected_missing, f"{kind}: labels missing on some push: {missing}"
        assert {r["client_id"] for r in client.records} == {client.client_id}
        assert len({r["client_instance_id"] for r in client.records}) == 1, f"{kind}: several instance ids"
        assert {r["client_software_name"] for r in client.records} == {SOFTWARE[kind]}
        assert all(r["client_software_version"] for r in client.records)
        assert {r["client_source_address"] for r in client.records} == {"127.0.0.1"}
        assert all(r.get("client_source_port", "0").isdigit() for r in client.records)
        assert {r["principal"] for r in client.records} == {"User:ANONYMOUS"}
        assert {r["broker_id"] for r in client.records} == {"1"}
        intervals = {r.get("push_interval_ms") for r in client.records}
        assert intervals == ({"1000"} if run.plugin_class == EXPORTER_CLASS else {None}), f"{kind}: {intervals}"


@pytest.mark.parametrize("release", WITHOUT_EXPORTER_API, ids=lambda r: r.line_name)
def test_exporter_class_stops_a_broker_without_kip_1217(release: KafkaRelease, matrix: MatrixRunner) -> None:
    """Given a Kafka `release` broker (3.7 to 4.1) configured with the 4.2+ class
    (`KctClientTelemetryExporterReporter`),
    When it starts,
    Then it stops during start-up, its log naming the interface it lacks, instead of running without
    forwarding anything."""
    run: WrongClassRun = matrix.result(_key("wrong", release), timeout=RESULT_TIMEOUT_S)
    assert run.exited, f"the broker kept running: {run.broker_log}"
    assert "Fatal error during broker startup" in run.log_text, run.log_text[-3000:]
    assert ("NoClassDefFoundError: org/apache/kafka/server/telemetry/ClientTelemetryExporterProvider"
            in run.log_text), run.log_text[-3000:]


@pytest.mark.parametrize("release", WITH_EXPORTER_API, ids=lambda r: r.line_name)
def test_receiver_class_still_loads_on_4_2_and_later(release: KafkaRelease, matrix: MatrixRunner) -> None:
    """Given a Kafka `release` broker of 4.2 or later configured with the 3.7+ class (`KctClientTelemetryReporter`,
    on KIP-714's `ClientTelemetry`, deprecated there), as after a broker upgrade that kept its configuration,
    When it starts,
    Then it runs with the plugin and advertises APIs 71/72 (the plugin's README says it works there)."""
    run: LoadRun = matrix.result(_key("load", release), timeout=RESULT_TIMEOUT_S)
    assert run.class_configured, f"metric.reporters = [{run.plugin_class}] not in {run.broker_log}"
    assert run.forwarder_started, f"the plugin's forwarder never started: {run.broker_log}"
    assert {71, 72} <= run.apis, f"GetTelemetrySubscriptions/PushTelemetry not advertised: {sorted(run.apis)}"


def _report(runner: MatrixRunner, total_s: float) -> None:
    rows = ["| Kafka | plugin class | pushes at the receiver (librdkafka producer / consumer / Java producer) "
            "| labels on every push | push interval | broker ready | run |",
            "|---|---|---|---|---|---|---|"]
    wrong: list[str] = []
    for key in runner.submitted():
        outcome = runner.outcome(key)
        if isinstance(outcome, ReleaseRun):
            rows.append(_release_row(outcome))
        elif isinstance(outcome, LoadRun):
            advertised = "advertises 71/72" if {71, 72} <= outcome.apis else "71/72 NOT advertised"
            wrong.append(f"| {outcome.release.version} | `{outcome.plugin_class.rpartition('.')[2]}` "
                         f"| loads, {advertised} | {outcome.wall_s:.1f} s |")
        elif isinstance(outcome, WrongClassRun):
            stopped = "stops at start-up (NoClassDefFoundError: ...ClientTelemetryExporterProvider)" \
                if outcome.exited else "KEPT RUNNING"
            wrong.append(f"| {outcome.release.version} | `{EXPORTER_CLASS.rpartition('.')[2]}` | {stopped} "
                         f"| {outcome.wall_s:.1f} s |")
        else:
            rows.append(f"| {key} | failed: {outcome} | | | | | |")
    lines = ["", "## Broker plugin version matrix (tests/e2e/test_plugin_versions_e2e.py)", "", *rows]
    if wrong:
        lines += ["", "| Kafka | other class | outcome | run |", "|---|---|---|---|", *wrong]
    lines += ["", f"Matrix wall time: {total_s:.0f} s (two brokers at a time)."]
    text = "\n".join(lines) + "\n"
    print(text)
    TABLE.parent.mkdir(parents=True, exist_ok=True)
    TABLE.write_text(text)


def _release_row(run: ReleaseRun) -> str:
    kinds = ("librdkafka-producer", "librdkafka-consumer", JAVA_CLIENT)
    pushes = " / ".join(str(len(run.clients[k].records)) if k in run.clients else "-" for k in kinds)
    common = set.intersection(*(c.labels_on_every_push() for c in run.clients.values())) if run.clients else set()
    absent = [label for label in LABELS if label not in common]
    labels = f"all {len(LABELS)}" if not absent else f"all but {', '.join(absent)}"
    interval = "yes" if "push_interval_ms" in common else "no"
    return (f"| {run.release.version} | `{run.plugin_class.rpartition('.')[2]}` | {pushes} | {labels} | {interval} "
            f"| {run.ready_s:.1f} s | {run.wall_s:.1f} s |")
