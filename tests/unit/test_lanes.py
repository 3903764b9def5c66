"""The lane each e2e test runs in (tests/lanes.py): one stack per lane, self-contained tests with the loopback."""

from __future__ import annotations

import tomllib
from pathlib import Path

from lanes import LANE_MARKERS, lane_of

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
