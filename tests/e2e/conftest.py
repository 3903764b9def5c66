"""Fixtures of the end-to-end tests on the node stack (tests/e2e/node_support.py has their types).

`node_stack` is shared by the session: a node stack it starts (`stack.py node-up`) is stopped at the
session's end, one already running is kept. `operator_release` is helm/kct installed as users do, one per
module (a module may upgrade or uninstall it); it is uninstalled at the module's end.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator

import pytest
from node_support import (
    CHART,
    STACK,
    NodeStack,
    Release,
    chart_values,
    helm_for,
    node_stack_from_env,
    node_stack_running,
)
from preconditions import missing_precondition


@pytest.fixture(scope="session")
def node_stack() -> Iterator[NodeStack]:
    if os.geteuid() != 0:
        missing_precondition("the node stack needs root (namespaces, mounts, containerd, iptables)")
    for tool in ("kubectl", "nsenter", "unshare", "go"):
        if shutil.which(tool) is None:
            missing_precondition(f"`{tool}` is not on PATH; the node stack needs it")
    started = not node_stack_running()
    try:
        if started:
            subprocess.run([*STACK, "node-up"], check=True, timeout=900)
        yield node_stack_from_env()
    finally:
        if started:
            subprocess.run([*STACK, "node-down"], check=True, timeout=300)


@pytest.fixture(scope="module")
def operator_release(node_stack: NodeStack) -> Iterator[Release]:
    """The chart installed as users do, with our runtime image (never pulled); uninstalled afterwards."""
    if node_stack.kct_image is None:
        missing_precondition("the node stack has no runtime image: run `make images` before `make node-up`")
    release = Release(name=f"kct-{uuid.uuid4().hex[:6]}", namespace=f"kct-op-{uuid.uuid4().hex[:6]}",
                      helm=helm_for(node_stack))
    try:
        release.run("install", release.name, str(CHART), "--create-namespace",
                    *chart_values(node_stack), "--wait", "--timeout", "240s")
        yield release
    finally:
        subprocess.run([*release.helm, "uninstall", release.name, "-n", release.namespace, "--wait"],
                       capture_output=True, timeout=300, check=False)
        node_stack.kubectl("delete", "namespace", release.namespace, "--wait=false", check=False)
