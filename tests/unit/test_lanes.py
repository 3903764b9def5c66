"""The lane each e2e test runs in (tests/lanes.py): one stack per lane, self-contained tests with the loopback."""

from __future__ import annotations

import tomllib
from pathlib import Path

from lanes import LANE_MARKERS, lane_of
from script_loader import load_script

REPO = Path(__file__).resolve().parents[2]


def test_a_test_on_the_node_stack_runs_in_the_node_lane_even_when_it_also_names_stack() -> None:
    assert lane_of(["tmp_path", "node_stack", "operator_release"]) == "node_stack"
    assert lane_of(["stack", "node_stack"]) == "node_stack"


def test_a_test_on_the_loopback_stack_runs_in_the_loopback_lane() -> None:
    assert lane_of(["stack", "kubectl", "tmp_path"]) == "loopback_stack"


def test_a_test_that_starts_its_own_servers_is_standalone() -> None:
    assert lane_of(["tmp_path", "matrix"]) == "standalone"
    assert lane_of([]) == "standalone"


def test_every_lane_marker_is_registered_so_strict_markers_accepts_it() -> None:
    markers = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    registered = {entry.split(":", 1)[0] for entry in markers}
    assert set(LANE_MARKERS) <= registered


phases = load_script(REPO / "dev" / "tools" / "pytest_phases.py")


def test_every_test_is_in_exactly_one_lane_of_the_runner() -> None:
    """The runner's markers cover unit tests, node-stack e2e and every other e2e test, without overlap."""
    assert [p.marker for p in phases.PHASES] == ["e2e and node_stack", "e2e and not node_stack", "not e2e"]


def test_the_node_lane_builds_the_images_and_the_unit_tests_wait_for_them() -> None:
    """Given `--checks`, Then the node lane builds the images before its tests, the unit lane runs the checks and
    then waits for that build before its tests, and the loopback lane only runs its tests."""
    steps = {phase.name: lane for phase, lane in phases.lanes(["-x"], checks=True).items()}
    (build, node_tests) = steps["node"]
    assert build.command == list(phases.IMAGES) and build.done is not None and node_tests.after is None
    (checks, unit_tests) = steps["unit"]
    assert checks.command == list(phases.CHECKS) and unit_tests.after is build.done
    (loopback_tests,) = steps["loopback"]
    assert loopback_tests.after is None and loopback_tests.command[-1] == "-x"
    without = {phase.name: lane for phase, lane in phases.lanes([], checks=False).items()}
    (only,) = without["unit"]
    assert only.label.startswith("pytest") and only.after is without["node"][0].done
