"""The receiver process's garbage-collector settings (`kct receiver` calls `tune_gc()` before serving)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from kct.receiver.command import GC_GEN0_THRESHOLD, tune_gc


@pytest.fixture
def restore_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.usefixtures("restore_gc")
def test_startup_objects_are_frozen_and_the_young_generation_enlarged() -> None:
    """Given a process with its modules loaded, when tune_gc() runs, then what exists is in the permanent
    generation (not traversed by later collections), the young generation's threshold is raised, the older
    thresholds are kept, and a reference cycle created afterwards is still collected."""
    gen1, gen2 = gc.get_threshold()[1:]
    gc.unfreeze()
    tune_gc()
    assert gc.get_freeze_count() > 1000
    assert gc.get_threshold() == (GC_GEN0_THRESHOLD, gen1, gen2)

    class Node:
        partner: object = None

    a, b = Node(), Node()
    a.partner, b.partner = b, a
    del a, b
    assert gc.collect() >= 2
