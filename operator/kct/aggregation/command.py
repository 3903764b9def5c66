"""`kct aggregate --config FILE`: run the Spark aggregation job locally (or inside spark-submit).

pyspark is imported only when the command runs, so `kct --help` stays cheap.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["main", "register"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "aggregate",
        help="run the Spark aggregation job (telemetry topic -> windowed per-client aggregates)",
        description="Read the receiver's topic, aggregate per window, client instance and metric, and write "
        "Parquet tables (client_metrics, rollups, terminations, alerts). See examples/aggregation-local.yaml.",
    )
    _add_arguments(parser)
    parser.set_defaults(handler=_handle)


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, type=Path, help="job config (YAML); ${ENV} is expanded")
    parser.add_argument("--mode", choices=("stream", "batch", "hourly"), help="override run.mode")
    parser.add_argument("--hour", help="hourly mode: the UTC hour to roll up, e.g. 2026-11-21T10")
    parser.add_argument("--until-drained", action="store_true", help="stream mode: stop once the topic is drained")


def _handle(args: argparse.Namespace) -> int:
    from kct.aggregation.config import ConfigError, load_job_config

    try:
        cfg = load_job_config(args.config)
    except ConfigError as exc:
        print(f"kct aggregate: {exc}", file=sys.stderr)
        return 2
    run_overrides: dict[str, Any] = {}
    if args.mode:
        run_overrides["mode"] = args.mode
    if args.hour:
        run_overrides["hour"] = args.hour
    if args.until_drained:
        run_overrides["until_drained"] = True
    if run_overrides:
        cfg = cfg.model_copy(update={"run": cfg.run.model_copy(update=run_overrides)})

    from kct.aggregation.job import run

    return run(cfg)


def main(argv: list[str] | None = None) -> int:
    """Entry point for spark-submit (spark/aggregation_job.py): same arguments as `kct aggregate`."""
    parser = argparse.ArgumentParser(prog="kct-aggregation-job")
    _add_arguments(parser)
    return _handle(parser.parse_args(argv))
