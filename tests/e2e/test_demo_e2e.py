"""`make demo`, shortened: the whole system on the node stack with real pods and real clients (a few minutes).

Runs dev/demo/demo.py as a user would (the operator installed with Helm, the TelemetryReceiver's pods, the
spark-operator running the receiver's SparkApplication as driver and executor pods, confluent-kafka clients,
narrowing, aggregates read from the claim's volume, report), with 20 s of traffic instead of 60, on the
session's node stack (the `node_stack` fixture: started if needed, kept for the rest of the session); the demo
removes its resources and its Helm releases afterwards. Needs `make images` and `make spark-operator` (the make
targets that run pytest build them first).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from node_support import NodeStack
from preconditions import missing_precondition

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "dev" / "demo" / "demo.py"
IMAGES = REPO / "dev" / "images" / "images.py"


def _job_image() -> str:
    """The `kct-spark` image for these sources, as `make images` built it."""
    proc = subprocess.run([sys.executable, str(IMAGES), "plan", "kct-spark"], capture_output=True, text=True,
                          timeout=120, check=False)
    archive, _, reference = proc.stdout.strip().rpartition("\n")[2].partition("\t")
    if proc.returncode != 0 or not Path(archive).is_file():
        missing_precondition("no kct-spark image for these sources: run `make images`")
    return reference


@pytest.mark.timeout(1560)
def test_demo_shows_every_client_aggregated_and_narrowing_stops_the_others(node_stack: NodeStack,
                                                                         tmp_path: Path) -> None:
    """Given the node stack with our runtime image,
    When the demo installs the operator and the spark-operator with Helm, applies the examples, runs 20 s of
    traffic, narrows the subscription to one client and waits for the aggregation on the node,
    Then it exits 0, shows the TelemetryReceiver Ready=True with running pods on the node (the same pods the
    cluster lists), the SparkApplication RUNNING with a running driver and executor pod of our kct-spark image
    on the node and the receiver's status.aggregation RUNNING, prints a non-empty aggregate row for every demo
    client, reports the other clients stopped pushing after the narrowing, and writes an HTML report with
    inline SVG plots and the Spark pods."""
    if node_stack.kct_image is None:
        missing_precondition("the node stack has no runtime image: run `make images` before `make node-up`")
    job_image = _job_image()
    sys.path.insert(0, str(DEMO.parent))
    from clients import DEMO_CLIENTS

    proc = subprocess.run(
        [sys.executable, str(DEMO), "--duration", "20", "--narrow-window", "12", "--keep-stack",
         "--remove-resources", "--out", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=1500, check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    receiver = output.split("Telemetry receiver (", 1)[1].split("Aggregation on the node (", 1)[0]
    ready_line = next(line for line in receiver.splitlines() if "receiver Ready=True, pods " in line)
    pods = ready_line.split("receiver Ready=True, pods ", 1)[1].split(", ")
    assert pods and all(pod.startswith("telemetry-receiver-") for pod in pods), ready_line
    for pod in pods:
        row = next(line for line in receiver.splitlines() if line.split()[:1] == [pod])
        _, phase, _, node, image = row.split()
        assert (phase, node, image) == ("Running", node_stack.node_name, node_stack.kct_image), row
    assert "kct receiver --config" not in output  # no local receiver process any more
    assert "kct aggregate" not in output  # the aggregation runs on the node, not on the host
    spark = output.split("Aggregation on the node (", 1)[1].split("Clients seen", 1)[0]
    (application,) = [line.split() for line in spark.splitlines() if line.split()[:1] == ["telemetry-aggregation"]]
    assert application[1] == "RUNNING", spark
    spark_pods = [row for row in (line.split() for line in spark.splitlines())
                  if row[1:2] in (["driver"], ["executor"])]
    assert all((node, image) == (node_stack.node_name, job_image) for _, _, _, node, image in spark_pods), spark
    running = {role: name for name, role, phase, _, _ in spark_pods if phase == "Running"}
    assert set(running) == {"driver", "executor"}, spark
    assert "status.aggregation: application SparkApplication/telemetry-aggregation, state RUNNING" in spark
    aggregates = output.split("Per-client aggregates", 1)[1].split("Narrowing:", 1)[0]
    narrowing = output.split("Narrowing:", 1)[1].split("Files", 1)[0]
    for client in DEMO_CLIENTS:
        row = next(line for line in aggregates.splitlines() if line.split()[:1] == [client.client_id])
        assert row.split()[2] != "0", f"no aggregate windows for {client.client_id}: {row}"
        result = next(line for line in narrowing.splitlines() if line.split()[:1] == [client.client_id])
        assert result.split()[-1] == "ok", result
    report = (tmp_path / "report.html").read_text()
    assert report.count("<svg") >= 3
    assert running["driver"] in report and running["executor"] in report
    assert "<script" not in report
