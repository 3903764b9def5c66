"""No test waits on a clock for an event: every `sleep` under tests/ says why it is a duration.

A sleep standing in for an event (a reconcile, a resync, a push, a config the broker serves) either flakes on a
busy machine or passes without the test having seen what it checks; such waits poll the event itself with
`eventually` / `eventually_async` (tests/waiting.py). What is left are real durations: traffic for a while, a
phase of a scenario, a clock that must pass, a poll interval. Each carries, on its line or the line above, the
comment `# duration: <why>`; this test fails on any `time.sleep` / `asyncio.sleep` call (however imported)
without one.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
SLEEP_MODULES = {"time", "asyncio"}
# The one form a reason takes: "# duration: " followed by the reason.
DURATION = re.compile(r"#\s*duration:\s*\S")


def _comments(source: str) -> dict[int, str]:
    """The comment on each line (tokenized, so a "# duration:" inside a string does not count)."""
    found: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found[token.start[0]] = token.string
    return found


def _sleep_calls(tree: ast.AST) -> list[ast.Call]:
    """Calls of time.sleep / asyncio.sleep: through the module (`time.sleep`, `import time as t; t.sleep`)
    or imported by name (`from time import sleep`, `from asyncio import sleep as nap`)."""
    modules: set[str] = set()
    functions: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {alias.asname or alias.name for alias in node.names if alias.name in SLEEP_MODULES}
        elif isinstance(node, ast.ImportFrom) and node.module in SLEEP_MODULES:
            functions |= {alias.asname or alias.name for alias in node.names if alias.name == "sleep"}
    calls = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if (isinstance(func, ast.Attribute) and func.attr == "sleep" and isinstance(func.value, ast.Name)
                and func.value.id in modules) or (isinstance(func, ast.Name) and func.id in functions):
            calls.append(node)
    return calls


def unexplained_sleeps(source: str) -> list[int]:
    """Lines of the sleep calls in `source` with no `# duration: <why>` on their line or the line above."""
    comments = _comments(source)
    return sorted(call.lineno for call in _sleep_calls(ast.parse(source))
                  if not any(DURATION.search(comments.get(line, "")) for line in (call.lineno, call.lineno - 1)))


def test_every_sleep_in_the_tests_says_why_it_is_a_duration() -> None:
    """Given every Python file under tests/, When their sleep calls are listed, Then each has its reason."""
    files = sorted(TESTS.rglob("*.py"))
    assert Path(__file__) in files and len(files) > 50, "the tests were not found"
    offenders = [f"{path.relative_to(TESTS.parent)}:{line}" for path in files
                 for line in unexplained_sleeps(path.read_text())]
    assert not offenders, (
        "sleeps without a `# duration: <why>` comment (wait for the event with `eventually` instead, or say why "
        "this is a duration):\n  " + "\n  ".join(offenders))


@pytest.mark.parametrize(("source", "lines"), [
    ("import time\ntime.sleep(1)\n", [2]),
    ("import asyncio\nasync def f():\n    await asyncio.sleep(1)\n", [3]),
    ("from time import sleep\nsleep(1)\n", [2]),
    ("from asyncio import sleep as nap\nasync def f():\n    await nap(0.1)\n", [3]),
    ("import time as clock\nclock.sleep(1)\n", [2]),
    ("import time\ntime.sleep(1)  # wait for the reconcile\n", [2]),
    ("import time\ntime.sleep(1)  # duration:\n", [2]),
    ("import time\n# duration: one second of traffic\n\ntime.sleep(1)\n", [4]),
    ("import time\nx = '# duration: in a string'; time.sleep(1)\n", [2]),
    ("import time\ntime.sleep(1)\ntime.sleep(2)  # duration: two seconds of traffic\n", [2]),
], ids=["time", "asyncio", "from-import", "from-import-alias", "module-alias", "other-comment", "empty-reason",
        "reason-two-lines-up", "reason-in-a-string", "one-of-two"])
def test_the_checker_finds_a_sleep_without_a_reason(source: str, lines: list[int]) -> None:
    """Given a snippet with a sleep that gives no reason in the fixed form, When checked, Then its line is named."""
    assert unexplained_sleeps(source) == lines


@pytest.mark.parametrize("source", [
    "import time\ntime.sleep(1)  # duration: one second of traffic\n",
    "import time\n# duration: the grace period must pass\ntime.sleep(20)\n",
    "from time import sleep\nsleep(0.5)  # duration: a poll interval\n",
    "import other\nother.sleep(1)\n",
    "def sleep(x): pass\nsleep(1)\n",
    "import time\nfrom asyncio import Event\nEvent().wait()\ntime.monotonic()\n",
], ids=["same-line", "line-above", "from-import", "other-module", "own-function", "no-sleep"])
def test_the_checker_accepts_a_duration_with_its_reason(source: str) -> None:
    """Given a snippet whose sleeps give their reason (or that has none), When checked, Then nothing is named."""
    assert unexplained_sleeps(source) == []
