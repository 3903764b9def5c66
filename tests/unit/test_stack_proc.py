"""The local stack's process helpers: what `stack-up` starts, `stack-down` stops, leaving nothing behind."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "dev" / "stack"))
import _proc


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_daemon_and_its_children_are_stopped(tmp_path: Path) -> None:
    """Given a daemon that forks a child, when it is stopped, then neither process is left running."""
    child_pid_file = tmp_path / "child.pid"
    script = f"sleep 300 & echo $! > {child_pid_file}; wait"
    pid = _proc.start_daemon(tmp_path, "shell", ["bash", "-c", script])
    _proc.wait_until(child_pid_file.exists, timeout=10, what="child")
    child = int(child_pid_file.read_text())
    assert _proc.is_running(tmp_path, "shell")

    assert _proc.stop_daemon(tmp_path, "shell", timeout=5) is True

    assert not _alive(pid)
    assert not _alive(child)
    assert not _proc.is_running(tmp_path, "shell")
    assert _proc.stop_daemon(tmp_path, "shell") is False


def test_daemon_output_goes_to_its_log(tmp_path: Path) -> None:
    """Given a daemon that prints, then its output lands in state/logs/<name>.log."""
    _proc.start_daemon(tmp_path, "echo", ["bash", "-c", "echo hello-from-daemon"])
    log = tmp_path / "logs" / "echo.log"
    _proc.wait_until(lambda: b"hello-from-daemon" in log.read_bytes(), timeout=10, what="log line")


def test_wait_until_gives_up_early_when_the_process_died(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Given a daemon that exits at once with an error, when waiting for it, then the failure shows its log."""
    _proc.start_daemon(tmp_path, "broken", ["bash", "-c", "echo boom: bad flag; exit 3"])
    with pytest.raises(SystemExit):
        _proc.wait_until(lambda: False, timeout=30, what="broken server", log=tmp_path / "logs" / "broken.log",
                         alive=lambda: _proc.is_running(tmp_path, "broken"))
    assert "boom: bad flag" in capsys.readouterr().err


def test_failed_install_names_tool_version_and_output() -> None:
    """Given an install command that fails, then the error names the tool, the version and what it printed."""
    with pytest.raises(_proc.InstallError) as err:
        _proc.run(["bash", "-c", "echo no such module; exit 1"], tool="etcd", version="3.6.0")
    message = str(err.value)
    assert "etcd 3.6.0" in message
    assert "no such module" in message
