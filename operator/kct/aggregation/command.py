"""`kct aggregate --config FILE`: run the Spark aggregation job locally (or inside spark-submit).

kct.aggregation.job (and with it pyspark) is imported only when the command runs, so `kct --help` and the
operator, which import the CLI, stay cheap and need no pyspark.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from kct.aggregation.config import ConfigError, load_job_config

__all__ = ["configure_logging", "main", "register"]


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


def configure_logging() -> None:
    """The job's log lines (kct.aggregation.*, INFO and up) on stderr as `kct aggregate: <message>`, the
    prefix scripts and the demo pick the job's lines out of Spark's by. Spark's and py4j's own loggers keep
    their settings."""
    logger = logging.getLogger("kct.aggregation")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("kct aggregate: %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def _handle(args: argparse.Namespace) -> int:
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

    configure_logging()
    # Deferred: kct.aggregation.job loads pyspark, which `kct --help` and the operator must not need.
    from kct.aggregation.job import run

    return run(cfg)


def main(argv: list[str] | None = None) -> int:
    """Entry point for spark-submit (spark/aggregation_job.py): same arguments as `kct aggregate`."""
    parser = argparse.ArgumentParser(prog="kct-aggregation-job")
    _add_arguments(parser)
    return _handle(parser.parse_args(argv))
