"""The node stack's own network and mount namespaces, and how the host reaches into them.

A node changes its network: a bridge for pods, routes, iptables rules for Services, sysctls. None of that
may touch the host's network namespace, so the node stack runs in namespaces it creates: a holder process
(`unshare --net --mount ... sleep infinity`, pid in `<state>/pids/node-namespaces.pid`) keeps them alive,
and the stack's servers are started from inside them (`entered`, a `setns` of this process; children
inherit the namespaces). The host reaches the API server through `forward.py`, a loopback TCP forwarder
whose upstream sockets are opened inside the namespace: nothing in the host's routes or addresses changes.
Unnamed namespaces (no `ip netns add`): they vanish with the last process in them, so nothing is left
behind, and no mount under /run/netns has to be shared with other mount namespaces. Standard library only.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator
from pathlib import Path

import _proc

__all__ = ["HOLDER", "ensure_holder", "entered", "exec_prefix", "holder_pid", "setns"]

HOLDER = "node-namespaces"
CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000


def setns(path: str, nstype: int) -> None:
    """setns(2) of this thread into the namespace at `path` (os.setns needs Python 3.12)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, nstype) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


def holder_pid(state: Path) -> int | None:
    return _proc.read_pid(state, HOLDER) if _proc.is_running(state, HOLDER) else None


def ensure_holder(state: Path) -> tuple[int, bool]:
    """The holder's pid, starting it when absent; True when it was started now (its namespaces are new)."""
    pid = holder_pid(state)
    if pid is not None:
        return pid, False
    # Private propagation: mounts made inside (sysctl copies, kubelet's volumes) never reach the host.
    pid = _proc.start_daemon(state, HOLDER, ["unshare", "--net", "--mount", "--propagation", "private",
                                             "sleep", "infinity"])
    own = os.readlink("/proc/self/ns/net")
    _proc.wait_until(lambda: os.readlink(f"/proc/{pid}/ns/net") != own, timeout=10, what="node namespaces",
                     alive=lambda: _proc.is_running(state, HOLDER))
    return pid, True


@contextlib.contextmanager
def entered(pid: int) -> Iterator[None]:
    """Run the body (and every process it starts) inside the holder's network and mount namespaces."""
    cwd = os.getcwd()
    own_net = os.open("/proc/self/ns/net", os.O_RDONLY)
    own_mnt = os.open("/proc/self/ns/mnt", os.O_RDONLY)
    try:
        setns(f"/proc/{pid}/ns/mnt", CLONE_NEWNS)
        setns(f"/proc/{pid}/ns/net", CLONE_NEWNET)
        os.chdir(cwd)  # entering a mount namespace moves the working directory to its root
        yield
    finally:
        setns(f"/proc/self/fd/{own_mnt}", CLONE_NEWNS)
        setns(f"/proc/self/fd/{own_net}", CLONE_NEWNET)
        os.close(own_net)
        os.close(own_mnt)
        os.chdir(cwd)


def exec_prefix(pid: int) -> list[str]:
    """argv prefix that runs a command in the node's network and mount namespaces (the node's "host")."""
    return ["nsenter", f"--target={pid}", "--net", "--mount", "--"]
