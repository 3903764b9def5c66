"""`make bench` writes docs/benchmarks/results.md saying when, where and on which commit it measured."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from types import ModuleType

from script_loader import load_script

REPO = Path(__file__).resolve().parents[2]


def _run_all() -> ModuleType:
    return load_script(REPO / "bench" / "run_all.py")


def test_results_file_is_the_docs_one() -> None:
    """Given the runner, Then a full run's results file is docs/benchmarks/results.md, which exists."""
    run_all = _run_all()
    assert run_all.RESULTS_MD == REPO / "docs" / "benchmarks" / "results.md"
    assert run_all.RESULTS_MD.exists()


def test_results_markdown_says_when_where_and_what() -> None:
    """Given a run's rows, When rendered, Then the page names the date, the machine, the commit, every
    figure (a `|` in a value escaped) and each benchmark's status and arguments."""
    run_all = _run_all()
    text = run_all.results_markdown(
        [("receiver", "push latency p50 / p99", "10.2 / 18.2 ms"), ("spark", "a | b", "1")],
        {"receiver": {"status": "ok", "seconds": 42.0, "settings": "32 connections", "args": ["--seconds", "10"]},
         "spark": {"status": "exit 1", "seconds": 3.5, "settings": "local[2]", "args": []}},
        when=dt.datetime(2026, 11, 29, 7, 5, tzinfo=dt.UTC), where="2 cores, AMD EPYC; load average 1.0",
        code="abc123def456", full=False,
    )
    assert "- measured: 2026-11-29 07:05 UTC, `make bench` (quick settings)" in text
    assert "- machine: 2 cores, AMD EPYC; load average 1.0" in text
    assert "- commit: `abc123def456`" in text
    assert "| receiver | push latency p50 / p99 | 10.2 / 18.2 ms |" in text
    assert "| spark | a \\| b | 1 |" in text
    assert "| receiver | ok | 42.0 | 32 connections | `--seconds 10` |" in text
    assert "| spark | exit 1 | 3.5 | local[2] | - |" in text


def test_cpu_model_from_cpuinfo() -> None:
    """Given /proc/cpuinfo text of x86 and of a machine without a model name, Then the model or 'unknown'."""
    run_all = _run_all()
    assert run_all.cpu_model("processor\t: 0\nmodel name\t: AMD EPYC 7B13\n") == "AMD EPYC 7B13"
    assert run_all.cpu_model("processor\t: 0\n") == "unknown"
