"""Run the test suite as two pytest sessions at once: the end-to-end tests and the rest.

Why two at once: most of the end-to-end phase waits (pods starting, clients pushing at their interval,
brokers restarting) while the unit phase is mostly Spark computing on the CPU. Run one after the other, the
unit phase's CPU and the end-to-end phase's waiting never overlap; run side by side, they do. The unit phase
runs at a lower CPU priority (nice), so the end-to-end tests, whose deadlines are in wall-clock time, get the
CPU first and the unit phase takes what they leave.

Each phase writes its JUnit XML under build/ and prints its own 25 slowest tests; every output line is prefixed
with its phase. The exit status is the first non-zero of the two (0 when both pass); with arguments that narrow
the run, a phase left with no test to run counts as passed.

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


PHASES = (
    Phase("e2e", "e2e", 0),
    Phase("unit", "not e2e", UNIT_NICENESS, (f"--timeout={UNIT_TIMEOUT_S}",)),
)


def _command(phase: Phase, extra: list[str]) -> list[str]:
    pytest = REPO / ".venv" / "bin" / "pytest"
    return [str(pytest), "-m", phase.marker, "--durations=25",
            f"--junitxml={BUILD / f'pytest-junit-{phase.name}.xml'}", *phase.options, *extra]


def _run(phase: Phase, argv: list[str], started: float, lock: threading.Lock, codes: dict[str, int]) -> None:
    """Run one phase, copying its output to ours line by line with the phase's name in front (the two phases
    interleave by lines, never within one), and record its exit status."""
    proc = subprocess.Popen(
        _command(phase, argv), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=functools.partial(os.nice, phase.niceness) if phase.niceness else None,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        with lock:
            sys.stdout.write(f"[{phase.name}] {line}")
            sys.stdout.flush()
    codes[phase.name] = proc.wait()
    with lock:
        print(f"[{phase.name}] pytest -m '{phase.marker}' exited {codes[phase.name]} after "
              f"{time.monotonic() - started:.0f} s", flush=True)


def main(argv: list[str]) -> int:
    BUILD.mkdir(exist_ok=True)
    lock = threading.Lock()
    started = time.monotonic()
    codes: dict[str, int] = {}
    threads = [threading.Thread(target=_run, args=(phase, argv, started, lock, codes)) for phase in PHASES]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if argv:  # a narrowed run (`make pytest PYTEST_ARGS=tests/unit/...`) may leave one phase with nothing to run
        codes = {name: 0 if code == NO_TESTS_COLLECTED else code for name, code in codes.items()}
    return next((codes[p.name] for p in PHASES if codes.get(p.name, 1) != 0), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
