"""Which lane of `make pytest` (dev/tools/pytest_phases.py) an end-to-end test runs in, from its fixtures.

The lanes run side by side, so each shared stack must be used by one lane only: the node stack's tests in one,
the loopback stack's in another. A test that starts its own servers on free ports may run in any lane; it goes
with the loopback stack's tests, the shorter lane. tests/conftest.py marks every e2e test with its lane.
"""

from __future__ import annotations

from collections.abc import Iterable

LANE_MARKERS = ("node_stack", "loopback_stack", "standalone")


def lane_of(fixture_names: Iterable[str]) -> str:
    """The lane marker of a test whose fixture closure is `fixture_names`."""
    names = set(fixture_names)
    if "node_stack" in names:
        return "node_stack"
    if "stack" in names:
        return "loopback_stack"
    return "standalone"
