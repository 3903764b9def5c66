"""Process, cache and readiness helpers shared by the local stack's components.

Standard library only: `make stack-up` runs these before any virtualenv exists. Every component
(etcd, kube-apiserver, kube-controller-manager, Kafka) is a detached process whose pid is written to
`<state>/pids/<name>.pid` and whose output goes to `<state>/logs/<name>.log`, so `stack-down` can stop
exactly what `stack-up` started, and a second `stack-up` can see what is already running.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

__all__ = [
    "InstallError",
    "cache_dir",
    "download",
    "ensure_debian_packages",
    "is_running",
    "port_open",
    "read_pid",
    "run",
    "start_daemon",
    "step",
    "stop_daemon",
    "wait_until",
]


class InstallError(RuntimeError):
    """A tool could not be installed; the message names the tool, the version and what failed."""

    def __init__(self, tool: str, version: str, what: str) -> None:
        super().__init__(f"cannot install {tool} {version}: {what}")
        self.tool = tool
        self.version = version


def cache_dir(*parts: str) -> Path:
    """`~/.cache/kct/<parts>` (or `$KCT_CACHE/<parts>`), created on demand; keyed by version by callers."""
    root = Path(os.environ.get("KCT_CACHE", Path.home() / ".cache" / "kct"))
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def step(what: str) -> Iterator[None]:
    """Print what is being done and how long it took, so a cold `stack-up` explains its minutes."""
    print(f"==> {what} ...", flush=True)
    started = time.monotonic()
    yield
    print(f"    {what}: done in {time.monotonic() - started:.1f}s", flush=True)


def run(argv: Sequence[str | os.PathLike[str]], *, tool: str, version: str, cwd: Path | None = None,
        env: Mapping[str, str] | None = None) -> str:
    """Run an install command; on failure raise InstallError with the tail of its output."""
    proc = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=dict(env) if env is not None else None,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False,
    )
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-25:])
        raise InstallError(tool, version, f"`{' '.join(str(a) for a in argv)}` exited {proc.returncode}:\n{tail}")
    return proc.stdout


def download(url: str, dest: Path, *, tool: str, version: str) -> Path:
    """Fetch `url` to `dest` atomically (a partial download never looks complete)."""
    if dest.exists():
        return dest
    tmp = dest.with_suffix(dest.suffix + ".part")
    try:
        with urllib.request.urlopen(url, timeout=120) as resp, tmp.open("wb") as out:
            shutil.copyfileobj(resp, out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise InstallError(tool, version, f"download failed: {exc}") from exc
    tmp.replace(dest)
    return dest


def ensure_debian_packages(needed: Mapping[str, str], *, why: str) -> None:
    """Install the Debian packages whose file is missing: `needed` maps an absolute path (or a command on
    PATH) to the package that ships it. `apt-get update` runs first, once, only when something is missing."""
    missing = sorted({package for path, package in needed.items()
                      if not (Path(path).exists() if path.startswith("/") else shutil.which(path))})
    if not missing:
        return
    if os.geteuid() != 0:
        raise InstallError("debian packages", " ".join(missing), f"apt-get needs root ({why})")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    with step(f"apt-get install {' '.join(missing)} ({why})"):
        run(["apt-get", "update", "-qq"], tool="debian packages", version=" ".join(missing), env=env)
        run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
            tool="debian packages", version=" ".join(missing), env=env)


def _pidfile(state: Path, name: str) -> Path:
    return state / "pids" / f"{name}.pid"


def read_pid(state: Path, name: str) -> int | None:
    try:
        return int(_pidfile(state, name).read_text().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone.
    with contextlib.suppress(OSError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        if fields and fields[0] == "Z":
            return False
    return True


def is_running(state: Path, name: str) -> bool:
    pid = read_pid(state, name)
    return pid is not None and _alive(pid)


def start_daemon(state: Path, name: str, argv: Sequence[str | os.PathLike[str]], *,
                 env: Mapping[str, str] | None = None, cwd: Path | None = None) -> int:
    """Start `argv` detached in its own session (so it outlives `make` and can be killed as a group)."""
    (state / "pids").mkdir(parents=True, exist_ok=True)
    (state / "logs").mkdir(parents=True, exist_ok=True)
    log = (state / "logs" / f"{name}.log").open("ab")
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    proc = subprocess.Popen(
        [str(a) for a in argv], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        cwd=cwd, env=full_env, start_new_session=True,
    )
    log.close()
    _pidfile(state, name).write_text(f"{proc.pid}\n")
    return proc.pid


def _group_alive(pgid: int) -> bool:
    """Whether any process of process group `pgid` still runs (zombies count as gone), from /proc."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()  # state, ppid, pgrp, ...
            if fields[0] != "Z" and int(fields[2]) == pgid:
                return True
    return False


# After SIGKILL, how long to wait for the group to be gone (the kernel tears the processes down; a loaded
# machine can take a moment).
_KILL_GRACE_S = 5.0


def stop_daemon(state: Path, name: str, *, timeout: float = 20.0) -> bool:
    """SIGTERM the daemon's process group, SIGKILL it after `timeout`; True when something was stopped.

    Returns once every process of the group is gone, not only the leader: the leader (a shell, say) can exit
    on SIGTERM before its children have handled theirs, and a caller that restarts the daemon next must not
    find them holding its ports or files."""
    pid = read_pid(state, name)
    _pidfile(state, name).unlink(missing_ok=True)
    if pid is None or not _alive(pid):
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (_alive(pid) or _group_alive(pid)):
        time.sleep(0.2)
    if _alive(pid) or _group_alive(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + _KILL_GRACE_S
        while time.monotonic() < deadline and (_alive(pid) or _group_alive(pid)):
            time.sleep(0.1)
    return True


def stop_group(proc: subprocess.Popen[bytes], *, timeout: float = 20.0) -> None:
    """SIGTERM the process group of a child started with `start_new_session=True`, SIGKILL it after `timeout`;
    returns once the leader is reaped."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_until(check: Callable[[], bool], *, timeout: float, what: str, log: Path | None = None,
               alive: Callable[[], bool] | None = None) -> None:
    """Poll `check` until it holds; fail early when the process died, with the tail of its log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if check():
                return
        if alive is not None and not alive():
            break
        time.sleep(0.25)
    detail = ""
    if log is not None and log.exists():
        tail = log.read_text(errors="replace").splitlines()[-30:]
        detail = f"\n--- last lines of {log} ---\n" + "\n".join(tail)
    print(f"error: {what} did not become ready within {timeout:.0f}s{detail}", file=sys.stderr)
    raise SystemExit(1)
