"""`make demo`, shortened: the whole system on the local stack with real clients (about 2-3 minutes).

Runs dev/demo/demo.py as a user would (operator, receiver from the rendered config, confluent-kafka
clients, narrowing, Spark aggregation, report), with 20 s of traffic instead of 60 and the stack kept
running for the rest of the session.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from preconditions import missing_precondition

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "dev" / "demo" / "demo.py"


@pytest.mark.timeout(900)
def test_demo_shows_every_client_aggregated_and_narrowing_stops_the_others(stack: object, tmp_path: Path) -> None:
    """Given the local stack,
    When the demo runs for 20 s of traffic, narrows the subscription to one client and aggregates,
    Then it exits 0, prints a non-empty aggregate row for every demo client, reports the other clients
    stopped pushing after the narrowing, and writes an HTML report with inline SVG plots."""
    if not getattr(stack, "local", False):
        missing_precondition("the demo drives the local stack (dev/stack)")
    sys.path.insert(0, str(DEMO.parent))
    from clients import DEMO_CLIENTS

    proc = subprocess.run(
        [sys.executable, str(DEMO), "--duration", "20", "--narrow-window", "12", "--keep-stack",
         "--remove-resources", "--namespace", "kct-demo-e2e", "--out", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=840, check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    aggregates = output.split("Per-client aggregates", 1)[1].split("Narrowing:", 1)[0]
    narrowing = output.split("Narrowing:", 1)[1].split("Files", 1)[0]
    for client in DEMO_CLIENTS:
        row = next(line for line in aggregates.splitlines() if line.split()[:1] == [client.client_id])
        assert row.split()[2] != "0", f"no aggregate windows for {client.client_id}: {row}"
        result = next(line for line in narrowing.splitlines() if line.split()[:1] == [client.client_id])
        assert result.split()[-1] == "ok", result
    report = (tmp_path / "report.html").read_text()
    assert report.count("<svg") >= 3
    assert "<script" not in report
