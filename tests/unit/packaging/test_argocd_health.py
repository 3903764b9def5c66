"""The Argo CD health checks in deploy/argocd/, run in Lua 5.1 (the dialect of Argo CD's gopher-lua).

Each `deploy/argocd/<group>/<Kind>/health_test.yaml` uses Argo CD's own resource_customizations test
format (inputPath -> expected healthStatus), so the same files can be contributed upstream unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from preconditions import require_module

REPO = Path(__file__).resolve().parents[3]
ARGOCD = REPO / "deploy" / "argocd"
KINDS = ("ClientMetricsSubscription", "TelemetryReceiver")
GROUP = "telemetry.kct.dev"

lua51: Any = require_module("lupa.lua51", "Argo CD runs the health checks in Lua 5.1 (lupa, a test extra)")


def _to_lua(runtime: Any, value: Any) -> Any:
    """A Python value decoded from YAML as the Lua value Argo CD hands to the script (lists 1-based)."""
    if isinstance(value, dict):
        return runtime.table_from({key: _to_lua(runtime, item) for key, item in value.items()})
    if isinstance(value, list):
        return runtime.table_from([_to_lua(runtime, item) for item in value])
    return value


def run_health_check(script: Path, resource: dict[str, Any]) -> dict[str, str]:
    runtime = lua51.LuaRuntime(unpack_returned_tuples=True)
    runtime.globals().obj = _to_lua(runtime, resource)
    result = runtime.execute(script.read_text())
    return {"status": str(result["status"]), "message": str(result["message"])}


def _cases() -> list[Any]:
    cases = []
    for kind in KINDS:
        folder = ARGOCD / GROUP / kind
        for case in yaml.safe_load((folder / "health_test.yaml").read_text())["tests"]:
            cases.append(pytest.param(folder, case, id=f"{kind}-{Path(case['inputPath']).stem}"))
    return cases


@pytest.mark.parametrize(("folder", "case"), _cases())
def test_health_check_maps_status_to_argocd_health(folder: Path, case: dict[str, Any]) -> None:
    """Given a resource in some state, when Argo CD's health check runs on it, then it gets the expected health."""
    resource = yaml.safe_load((folder / case["inputPath"]).read_text())
    assert run_health_check(folder / "health.lua", resource) == case["healthStatus"]


@pytest.mark.parametrize("kind", KINDS)
def test_every_required_health_is_covered(kind: str) -> None:
    """Given a kind's test file, then it covers Healthy, Degraded and Progressing (the issue's three outcomes)."""
    cases = yaml.safe_load((ARGOCD / GROUP / kind / "health_test.yaml").read_text())["tests"]
    assert {"Healthy", "Degraded", "Progressing"} <= {case["healthStatus"]["status"] for case in cases}


def test_progressing_when_generation_is_newer_than_the_ready_condition() -> None:
    """Given status.observedGeneration caught up but Ready still from an older generation, then Progressing."""
    resource = {
        "metadata": {"generation": 7},
        "status": {"observedGeneration": 7, "conditions": [
            {"type": "Ready", "status": "True", "reason": "Reconciled", "message": "ok", "observedGeneration": 6},
        ]},
    }
    health = run_health_check(ARGOCD / GROUP / "ClientMetricsSubscription" / "health.lua", resource)
    assert health == {"status": "Progressing", "message": "Ready reflects generation 6, waiting for 7"}


def test_degraded_without_a_message_shows_the_reason() -> None:
    """Given Ready=False with a reason and no message, then Degraded with the reason alone."""
    resource = {
        "metadata": {"generation": 1},
        "status": {"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "False", "reason": "Conflict"}]},
    }
    health = run_health_check(ARGOCD / GROUP / "TelemetryReceiver" / "health.lua", resource)
    assert health == {"status": "Degraded", "message": "Conflict"}
