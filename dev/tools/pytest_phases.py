"""Run the test suite as three pytest sessions at once, one per lane: the end-to-end tests on the node stack,
the end-to-end tests on the loopback stack together with those that start their own servers, and the rest.

Why side by side: most of the end-to-end work waits (pods starting, clients pushing at their interval, brokers
restarting) while the unit tests are mostly Spark computing on the CPU; the two stacks are separate servers on
separate ports, so their tests do not share state either. Run one after the other, the waiting and the computing
never overlap; run side by side, they do. The unit lane runs at a lower CPU priority (nice), so the end-to-end
tests, whose deadlines are in wall-clock time, get the CPU first and the unit lane takes what they leave.
tests/conftest.py sorts every e2e test into its lane from its fixtures (markers node_stack, loopback_stack,
standalone). The node lane first builds the images (`make images spark-operator`: a few minutes when the sources
changed) while the loopback lane already runs; the unit lane starts its tests once they are built.

Each lane writes its JUnit XML under build/ and prints its own 25 slowest tests; every output line is prefixed
with its lane. The exit status is the first non-zero of the lanes (0 when all pass); with arguments that narrow
the run, a lane left with no test to run counts as passed.

    python dev/tools/pytest_phases.py [PYTEST_ARGS...]
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "build"
# How much lower the unit phase's CPU priority is (nice increment): enough that the end-to-end phase wins
# every contended time slice.
UNIT_NICENESS = 10
NO_TESTS_COLLECTED = 5  # pytest's exit status when nothing matched


# pyproject's per-test timeout (600 s) guards against a hung test; the unit phase yields the CPU to the e2e
# phase, so a unit test may take longer in wall-clock time while the e2e phase computes (a Spark driver in a pod).
UNIT_TIMEOUT_S = 1200


@dataclass(frozen=True)
class Phase:
    name: str
    marker: str
    niceness: int
    options: tuple[str, ...] = ()


NODE = Phase("node", "e2e and node_stack", 0)
UNIT = Phase("unit", "not e2e", UNIT_NICENESS, (f"--timeout={UNIT_TIMEOUT_S}",))
PHASES = (NODE, Phase("loopback", "e2e and not node_stack", 0), UNIT)


# `--checks`: the checks that need no server (lint, the JUnit suites) run first in the unit lane instead of
# before every lane, so the end-to-end lanes, the longest, start minutes earlier.
CHECKS = ("make", "--no-print-directory", "--keep-going", "lint", "plugin-test", "aggregation-jvm-test")
# The images (and the spark-operator's) are built by the node lane, the first to need them; the loopback lane
# needs none and starts at once; the unit lane (whose image tests read the archives) waits until they are built.
# One builder, so two lanes never build the same cache entries at once.
IMAGES = ("make", "--no-print-directory", "images", "spark-operator")


@dataclass(frozen=True)
class Step:
    label: str
    command: list[str]
    after: threading.Event | None = None  # wait for this before starting
    done: threading.Event | None = None  # set when this step ends, whatever its outcome


def _pytest(phase: Phase, extra: list[str]) -> list[str]:
    pytest = REPO / ".venv" / "bin" / "pytest"
    return [str(pytest), "-m", phase.marker, "--durations=25",
            f"--junitxml={BUILD / f'pytest-junit-{phase.name}.xml'}", *phase.options, *extra]


def _stream(phase: Phase, command: list[str], lock: threading.Lock) -> int:
    """Run one command of a lane, copying its output to ours line by line with the lane's name in front (the
    lanes interleave by lines, never within one); its exit status."""
    proc = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=functools.partial(os.nice, phase.niceness) if phase.niceness else None,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        with lock:
            sys.stdout.write(f"[{phase.name}] {line}")
            sys.stdout.flush()
    return proc.wait()


def _run(phase: Phase, steps: list[Step], started: float, lock: threading.Lock, codes: dict[str, int]) -> None:
    """Run a lane's steps one after the other (all of them, so one run reports every failure) and record the
    first non-zero exit status."""
    status = 0
    for step in steps:
        if step.after is not None:
            step.after.wait()
        try:
            code = _stream(phase, step.command, lock)
        finally:
            if step.done is not None:
                step.done.set()
        with lock:
            print(f"[{phase.name}] {step.label} exited {code} after {time.monotonic() - started:.0f} s", flush=True)
        status = status or code
    codes[phase.name] = status


def lanes(argv: list[str], *, checks: bool) -> dict[Phase, list[Step]]:
    """Each lane's steps: the node lane builds the images first, the unit lane runs the checks (with
    `checks`) and then waits for the images, the loopback lane only runs its tests."""
    images_built = threading.Event()
    steps: dict[Phase, list[Step]] = {phase: [] for phase in PHASES}
    steps[NODE].append(Step(" ".join(IMAGES), list(IMAGES), done=images_built))
    if checks:
        steps[UNIT].append(Step(" ".join(CHECKS), list(CHECKS)))
    for phase in PHASES:
        steps[phase].append(Step(f"pytest -m '{phase.marker}'", _pytest(phase, argv),
                                 after=images_built if phase is UNIT else None))
    return steps


def main(argv: list[str]) -> int:
    checks = "--checks" in argv
    argv = [arg for arg in argv if arg != "--checks"]
    BUILD.mkdir(exist_ok=True)
    lock = threading.Lock()
    started = time.monotonic()
    codes: dict[str, int] = {}
    threads = [threading.Thread(target=_run, args=(phase, steps, started, lock, codes))
               for phase, steps in lanes(argv, checks=checks).items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if argv:  # a narrowed run (`make pytest PYTEST_ARGS=tests/unit/...`) may leave one lane with nothing to run
        codes = {name: 0 if code == NO_TESTS_COLLECTED else code for name, code in codes.items()}
    return next((codes[p.name] for p in PHASES if codes.get(p.name, 1) != 0), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
