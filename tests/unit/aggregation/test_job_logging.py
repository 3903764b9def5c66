"""The job logs through `logging` (kct.aggregation.*), and `kct aggregate` prints those lines with the prefix
scripts pick them out of Spark's output by (dev/demo reads the last `kct aggregate:` line)."""

from __future__ import annotations

import logging

import pytest

from kct.aggregation.command import configure_logging


def test_the_jobs_log_lines_carry_the_kct_aggregate_prefix_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    """Given `kct aggregate`'s logging set up (twice: a second run in one process adds no second handler),
    When a module of the job logs at INFO and another logger (Spark's py4j) at INFO,
    Then stderr holds the job's line once, with the prefix, and nothing of the other logger."""
    logger = logging.getLogger("kct.aggregation")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    try:
        configure_logging()
        configure_logging()
        logging.getLogger("kct.aggregation.batch").info("batch done in %.1fs: rows=%d", 1.5, 7)
        logging.getLogger("py4j.clientserver").info("Closing down clientserver connection")
        err = capsys.readouterr().err
        assert err.splitlines() == ["kct aggregate: batch done in 1.5s: rows=7"]
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved[0], saved[1], saved[2]
