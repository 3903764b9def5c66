"""Offsets the stream skipped because retention deleted them before they were read.

The job reads Kafka with `failOnDataLoss=false` (kct.aggregation.source): a job that fell behind the topic's
retention (stopped for longer than `retention.ms`, or slower than the receivers write) goes on from the oldest
offset the broker still has instead of failing for good. Those pushes are lost to the aggregates, and Spark
only says so in a log line per partition. So the stream counts them: each micro-batch's first offset read
per partition is compared with the offset the one before it expected next (its last offset read + 1, kept in
the stream state, kct.aggregation.stream); the difference is what retention took. Retention removes a log's
oldest segments only, so a gap can only open there: gaps inside a batch's range (a transactional producer's
markers, compaction) are not retention's and are not counted. A partition the topic gained later is expected
from offset 0; a new checkpoint expects nothing (it starts where `startingOffsets` says).

`skipped_offsets` and `next_offsets` are pure; `offsets_read` is the one Spark job that feeds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import functions as F

__all__ = ["describe_skipped", "next_offsets", "offsets_read", "skipped_offsets"]


def skipped_offsets(expected: Mapping[int, int] | None, first_read: Mapping[int, int]) -> dict[int, int]:
    """Per partition, the offsets between the next one `expected` and the first one read, when the first read
    is later (nothing when it is not: a topic recreated under the same name starts lower, which is not a
    skip). `expected` None: the stream's first micro-batch on its checkpoint, nothing to compare with."""
    if expected is None:
        return {}
    skipped: dict[int, int] = {}
    for partition, first in sorted(first_read.items()):
        gap = first - expected.get(partition, 0)  # a partition added to the topic since starts at 0
        if gap > 0:
            skipped[partition] = gap
    return skipped


def next_offsets(expected: Mapping[int, int] | None, last_read: Mapping[int, int]) -> dict[int, int]:
    """The offsets the next micro-batch expects first: one past the last read, per partition; a partition
    this batch read nothing from keeps what was expected of it."""
    return {**(expected or {}), **{partition: last + 1 for partition, last in last_read.items()}}


def offsets_read(records: Any) -> tuple[dict[int, int], dict[int, int]]:
    """(first offset read, last offset read) per partition of a micro-batch of records (decode.RAW_SCHEMA_DDL):
    one small aggregation over the cached micro-batch."""
    rows = records.groupBy("partition").agg(F.min("offset"), F.max("offset")).collect()
    return {int(r[0]): int(r[1]) for r in rows}, {int(r[0]): int(r[2]) for r in rows}


def describe_skipped(skipped: Mapping[int, int]) -> str:
    """`partition 0: 120, partition 3: 7` for the log."""
    return ", ".join(f"partition {partition}: {count}" for partition, count in sorted(skipped.items()))
