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
`SkippedOffsetsMetric` is the total as a metric of the job: a counter `kct_aggregation.skippedOffsets` in the
driver's Spark metrics system, so whatever sink the deployment configures (the driver UI's `/metrics/json`,
JMX, Spark's PrometheusServlet) exports it next to Spark's own streaming metrics.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pyspark.java_gateway import ensure_callback_server_started
from pyspark.sql import functions as F

__all__ = [
    "METRIC_NAME",
    "METRIC_SOURCE",
    "SkippedOffsetsMetric",
    "describe_skipped",
    "next_offsets",
    "offsets_read",
    "skipped_offsets",
]

METRIC_SOURCE = "kct_aggregation"
METRIC_NAME = "skippedOffsets"


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


class _MetricSource:
    """Spark's `metrics.source.Source`, implemented in Python through Py4J's callback server: Spark asks it
    its name and registry when it registers it (and when it looks sources up by name); the counter itself
    lives in the JVM."""

    def __init__(self, registry: Any) -> None:
        self._registry = registry

    def sourceName(self) -> str:  # the Java interface's names
        return METRIC_SOURCE

    def metricRegistry(self) -> Any:
        return self._registry

    class Java:
        implements: ClassVar[list[str]] = ["org.apache.spark.metrics.source.Source"]


class SkippedOffsetsMetric:
    """The offsets retention took from the stream since its checkpoint began, as a counter of the driver's
    metrics system (`<app id>.driver.kct_aggregation.skippedOffsets`). Set from the stream state's running
    total, so it says the same after a driver restart. Without a JVM gateway (Spark Connect) it does nothing:
    the WARNING log and the state still carry the count."""

    def __init__(self, spark: Any) -> None:
        self._counter: Any = None
        try:
            jvm = spark.sparkContext._jvm
            gateway = spark.sparkContext._gateway
        except AttributeError:  # no JVM gateway: nothing to register with
            return
        metrics = jvm.org.apache.spark.SparkEnv.get().metricsSystem()
        found = metrics.getSourcesByName(METRIC_SOURCE)
        if found.size():  # registered by an earlier query of this driver: one counter per driver
            registry = found.apply(0).metricRegistry()
        else:
            ensure_callback_server_started(gateway)  # type: ignore[no-untyped-call]
            registry = jvm.com.codahale.metrics.MetricRegistry()
            metrics.registerSource(_MetricSource(registry))
        self._counter = registry.counter(METRIC_NAME)

    def set_total(self, total: int) -> None:
        """The counter to `total` (a counter only moves by increments: the difference)."""
        if self._counter is not None:
            self._counter.inc(total - int(self._counter.getCount()))

    @property
    def value(self) -> int | None:
        """The counter as the metrics system has it (None without a JVM)."""
        return None if self._counter is None else int(self._counter.getCount())
