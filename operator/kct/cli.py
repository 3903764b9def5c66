"""The `kct` command line: one entry point, one subcommand per component.

Each subcommand lives in the module that owns it and exposes `register(subparsers)`; this module only
collects them, so `kct --help` stays cheap (heavy imports happen inside the subcommand's handler).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from kct import __version__

# Modules that contribute a subcommand through `register(subparsers)`, in `kct --help` order.
SUBCOMMAND_MODULES: tuple[str, ...] = (
    "kct.controller.runner",
    "kct.clientmetrics_cli",
    "kct.api.crds",
    "kct.receiver.command",
    "kct.aggregation.command",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kct",
        description="Declarative Kafka client telemetry (KIP-714) on Kubernetes: "
        "operator, OTLP receiver and Spark aggregation.",
    )
    parser.add_argument("--version", action="version", version=f"kct {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 0
    result: int = handler(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
