"""The CI rule for tests that cannot run here, and that every test goes through it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from preconditions import missing_precondition, require_module

REPO = Path(__file__).resolve().parents[2]


def test_a_missing_precondition_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given CI=true, when a test finds a precondition missing, then it fails, naming what is missing."""
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="precondition missing in CI: no openssl"):
        missing_precondition("no openssl")


def test_a_missing_precondition_skips_outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given no CI variable, when a test finds a precondition missing, then it skips with the reason."""
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no openssl"):
        missing_precondition("no openssl")


def test_require_module_returns_the_module_or_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given CI=true, then an importable module is returned and a missing one fails the test."""
    monkeypatch.setenv("CI", "true")
    assert require_module("json", "the standard library").dumps([]) == "[]"
    with pytest.raises(pytest.fail.Exception, match="kct_no_such_module is not importable"):
        require_module("kct_no_such_module", "to test the rule")


def test_no_test_skips_around_the_ci_rule() -> None:
    """Given the tests, then none calls pytest.skip, skipif or importorskip directly (only preconditions.py)."""
    direct = re.compile(r"pytest\.(skip\(|importorskip\()|mark\.skip(if)?\b")
    offenders = [
        f"{path.relative_to(REPO)}:{number}"
        for path in sorted((REPO / "tests").rglob("*.py"))
        if path.name not in {"preconditions.py", Path(__file__).name}
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if direct.search(line)
    ]
    assert offenders == []


def test_the_repository_names_no_path_outside_it() -> None:
    """Given the tracked files, then none names a sibling folder of the clone or a machine's work folder."""
    outside = r"\.\./" + "shared" + r"|/" + "work/"
    found = subprocess.run(["git", "grep", "-n", "-E", outside], cwd=REPO, capture_output=True, text=True, check=False)
    assert found.returncode in (0, 1), found.stderr
    assert found.stdout == ""
