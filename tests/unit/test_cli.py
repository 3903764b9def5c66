"""The `kct` entry point and the package layout."""

from __future__ import annotations

import importlib
import operator
import subprocess
import sys
import sysconfig
from pathlib import Path

from kct import cli


def test_kct_help_lists_every_registered_subcommand() -> None:
    """Given the installed console script, when `kct --help` runs, then it exits 0 and names each subcommand."""
    out = subprocess.run([Path(sys.executable).parent / "kct", "--help"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "usage: kct" in out.stdout
    parser = cli.build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")
    for name in subparsers.choices:  # type: ignore[union-attr]
        assert name in out.stdout


def test_subcommand_modules_expose_register() -> None:
    """Given the subcommand registry, then every module in it has a `register(subparsers)` function."""
    for name in cli.SUBCOMMAND_MODULES:
        assert callable(importlib.import_module(name).register), name


def test_operator_is_still_the_standard_library_module() -> None:
    """Given the `operator/` source folder, then `import operator` still yields the standard library."""
    assert Path(operator.__file__).parent == Path(sysconfig.get_paths()["stdlib"])
    assert callable(operator.itemgetter)
