"""A run's outputs are written at the same time (`outputs.concurrently`): in batch mode every table, in a
micro-batch every output not written yet by its batch id, alerts after the client_metrics they read
(`stream_writer.write_once`). Fakes stand in for Spark's actions and the stream's state store: the order and overlap of
the writes is what is tested, the tables themselves are tested with Spark elsewhere."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from kct.aggregation.outputs import concurrently
from kct.aggregation.stream_writer import write_once

# Long enough for a loaded CI machine to start a thread; a sequential run never reaches the other party at all.
_MEET_SECONDS = 30


class _Store:
    """Stands in for stream.StateStore's output marks."""

    def __init__(self, written: set[str]) -> None:
        self.marked = set(written)
        self.lock = threading.Lock()

    def written(self, batch_id: int, output: str) -> bool:
        with self.lock:
            return f"{batch_id}/{output}" in self.marked

    def mark_written(self, batch_id: int, output: str) -> None:
        with self.lock:
            self.marked.add(f"{batch_id}/{output}")


def _meeting_of_two(calls: list[str]) -> Callable[[str], None]:
    """A write that waits for a second one to start (a barrier of two), then records its name in `calls`: run
    one after the other, the first would wait alone and break the barrier."""
    both_started = threading.Barrier(2, timeout=_MEET_SECONDS)

    def write(name: str) -> None:
        both_started.wait()
        calls.append(name)
    return write


def test_outputs_run_side_by_side_and_return_their_results_by_name() -> None:
    """Given two outputs that each wait for the other to start (a barrier of two),
    when they run through `concurrently`,
    then both pass the barrier (run one after the other, the first would wait alone and break it) and their
    results come back under their names."""
    both_started = threading.Barrier(2, timeout=_MEET_SECONDS)

    def output(rows: int) -> int:
        both_started.wait()
        return rows

    assert concurrently({"client_metrics": lambda: output(3), "rollups": lambda: output(5)}) == {
        "client_metrics": 3, "rollups": 5}


def test_a_failed_output_is_raised_once_the_others_ended() -> None:
    """Given an output that fails at once and one that is still writing,
    when they run through `concurrently`,
    then the failure is raised, and only after the other output finished (no write left running behind the
    caller's back)."""
    failed = threading.Event()
    finished: list[str] = []

    def fail() -> None:
        failed.set()
        raise RuntimeError("disk full")

    def slow() -> None:
        assert failed.wait(_MEET_SECONDS)
        finished.append("rollups")

    with pytest.raises(RuntimeError, match="disk full"):
        concurrently({"client_metrics": fail, "rollups": slow})
    assert finished == ["rollups"]


def test_a_micro_batch_writes_its_outputs_together_alerts_after_client_metrics_and_skips_written_ones() -> None:
    """Given a replayed micro-batch whose terminations were already written, and outputs client_metrics and
    rollups that each wait for the other to start,
    when `write_once` writes them,
    then client_metrics and rollups ran side by side, alerts ran only once client_metrics was written and
    marked, terminations were not written again, and every output is marked for the batch."""
    store = _Store({"7/terminations"})
    calls: list[str] = []
    side_by_side = _meeting_of_two(calls)

    def alerts() -> None:
        assert store.written(7, "client_metrics"), "alerts read client_metrics' rows of this batch"
        calls.append("alerts")

    write_once(None, store, 7, {
        "client_metrics": lambda: side_by_side("client_metrics"),
        "rollups": lambda: side_by_side("rollups"),
        "alerts": alerts,
        "terminations": lambda: calls.append("terminations"),
    })
    assert sorted(calls) == ["alerts", "client_metrics", "rollups"]
    assert calls.index("alerts") > calls.index("client_metrics")
    assert store.marked == {f"7/{name}" for name in ("client_metrics", "rollups", "alerts", "terminations")}


def test_alerts_of_a_replay_whose_client_metrics_were_written_do_not_wait_for_them() -> None:
    """Given a replayed micro-batch that wrote client_metrics but not alerts,
    when `write_once` writes its outputs,
    then alerts are written, and client_metrics not again."""
    store = _Store({"3/client_metrics"})
    calls: list[str] = []
    write_once(None, store, 3, {"client_metrics": lambda: calls.append("client_metrics"),
                               "alerts": lambda: calls.append("alerts")})
    assert calls == ["alerts"]


def test_the_stream_state_is_saved_while_the_outputs_are_written_and_on_every_attempt() -> None:
    """Given a replayed micro-batch whose client_metrics were written, rollups that wait for the state's save
    to start, and the state's save passed `alongside`,
    when `write_once` writes them,
    then the save ran side by side with rollups, was not marked as an output, and client_metrics was not
    written again."""
    store = _Store({"4/client_metrics"})
    calls: list[str] = []
    side_by_side = _meeting_of_two(calls)

    write_once(None, store, 4, {"client_metrics": lambda: calls.append("client_metrics"),
                                     "rollups": lambda: side_by_side("rollups")},
                    alongside={"state": lambda: side_by_side("state")})
    assert sorted(calls) == ["rollups", "state"]
    assert store.marked == {"4/client_metrics", "4/rollups"}
