"""A Kafka topic as a Spark data source (batch and Structured Streaming), on confluent-kafka.

Spark's own Kafka source (spark-sql-kafka-0-10) is the first choice, and the job uses it when its jars are
on the classpath (`source: jvm`). Its runtime dependency `spark-token-provider-kafka-0-10` is not served by
the package registry this project can reach, so the job falls back to this source: a Python Data Source
(Spark >= 4.0, availableNow needs >= 4.2) with the same output schema (`RAW_SCHEMA_DDL`) and the same
offset semantics: a micro-batch is a range of offsets per partition, Spark checkpoints the ranges, and a
restarted query resumes exactly where the last committed batch ended. Each Kafka partition's range is
read by one Spark task, so reading scales with partitions like the JVM source.

Options (all strings, as Spark passes them): `bootstrap.servers`, `topic`, `startingOffsets`
(earliest | latest), `maxRecordsPerPartition` (per micro-batch), and any `kafka.<property>` forwarded to
librdkafka (security settings).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from kct.aggregation.decode import RAW_SCHEMA_DDL

__all__ = ["SOURCE_NAME", "KafkaTopicDataSource", "register_source"]

SOURCE_NAME = "kct_kafka"
_BATCH_ROWS = 4096
_STALL_SECONDS = 60.0


@dataclass(frozen=True)
class _Range(InputPartition):
    partition: int
    start: int
    end: int  # exclusive

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", self.partition)


def _consumer_conf(options: dict[str, str]) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": options["bootstrap.servers"],
        "group.id": f"kct-aggregation-{uuid.uuid4().hex[:8]}",  # never committed: Spark owns the offsets
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        "fetch.max.bytes": 52_428_800,
        "enable.metrics.push": False,  # our own consumer is not a telemetry subject
    }
    for key, value in options.items():
        if key.startswith("kafka."):
            conf[key.removeprefix("kafka.")] = value
    return conf


def _watermarks(options: dict[str, str]) -> dict[int, tuple[int, int]]:
    from confluent_kafka import Consumer, TopicPartition

    topic = options["topic"]
    consumer = Consumer(_consumer_conf(options))
    try:
        meta = consumer.list_topics(topic, timeout=30)
        tmeta = meta.topics.get(topic)
        if tmeta is None or tmeta.error is not None:
            raise RuntimeError(f"kafka source: topic {topic!r} is not available: {tmeta.error if tmeta else 'missing'}")
        out: dict[int, tuple[int, int]] = {}
        for p in sorted(tmeta.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            out[p] = (low, high)
        return out
    finally:
        consumer.close()


def _append_records(msgs: list[Any], cols: dict[str, list[Any]], topic: str, rng: _Range, eof_code: int) -> bool:
    """Append the consumed messages of `rng` to the columns; True once the range's end is reached."""
    for msg in msgs:
        err = msg.error()
        if err is not None:
            if err.code() == eof_code:
                continue
            raise RuntimeError(f"kafka source: {err}")
        offset = int(msg.offset() or 0)
        if offset >= rng.end:
            return True
        cols["key"].append(msg.key())
        cols["value"].append(msg.value())
        cols["topic"].append(topic)
        cols["partition"].append(rng.partition)
        cols["offset"].append(offset)
        cols["timestamp"].append(msg.timestamp()[1] * 1000)
        headers: Any = msg.headers() or ()
        cols["headers"].append([{"key": k, "value": v} for k, v in headers])
        if offset >= rng.end - 1:
            return True
    return False


def _read_range(options: dict[str, str], rng: _Range) -> Iterator[Any]:
    """Records [start, end) of one partition as Arrow batches of RAW_SCHEMA_DDL."""
    import pyarrow as pa  # type: ignore[import-untyped]
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    if rng.end <= rng.start:
        return
    topic = options["topic"]
    schema = pa.schema(
        [
            ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
            ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")),
            ("headers", pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())])))),
        ]
    )
    consumer = Consumer(_consumer_conf(options))
    consumer.assign([TopicPartition(topic, rng.partition, rng.start)])
    cols: dict[str, list[Any]] = {name: [] for name in schema.names}
    last_progress = time.monotonic()
    try:
        done = False
        while not done:
            msgs = consumer.consume(num_messages=2000, timeout=1.0)
            if not msgs:
                position = consumer.position([TopicPartition(topic, rng.partition)])[0].offset or 0
                if position >= rng.end:  # e.g. transaction markers at the end of the range
                    break
                if time.monotonic() - last_progress > _STALL_SECONDS:
                    raise RuntimeError(f"kafka source: no progress on {topic}-{rng.partition} at {position}")
                continue
            last_progress = time.monotonic()
            done = _append_records(msgs, cols, topic, rng, KafkaError._PARTITION_EOF)
            if len(cols["offset"]) >= _BATCH_ROWS or (done and cols["offset"]):
                yield pa.RecordBatch.from_pydict(cols, schema=schema)
                cols = {name: [] for name in schema.names}
        if cols["offset"]:
            yield pa.RecordBatch.from_pydict(cols, schema=schema)
    finally:
        consumer.close()


def _ranges(start: dict[str, int], end: dict[str, int]) -> list[_Range]:
    return [
        _Range(int(p), int(start.get(p, 0)), int(e)) for p, e in sorted(end.items(), key=lambda kv: int(kv[0]))
        if int(e) > int(start.get(p, 0))
    ]


class _BatchReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def partitions(self) -> list[_Range]:
        marks = _watermarks(self.options)
        latest = self.options.get("startingOffsets", "earliest") == "latest"
        start = {str(p): (high if latest else low) for p, (low, high) in marks.items()}
        return _ranges(start, {str(p): high for p, (_, high) in marks.items()})

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, _Range)
        yield from _read_range(self.options, partition)


class _StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.max_per_partition = int(options.get("maxRecordsPerPartition", "200000"))
        self.available_now_target: dict[str, int] | None = None

    def initialOffset(self) -> dict[str, int]:
        marks = _watermarks(self.options)
        latest = self.options.get("startingOffsets", "earliest") == "latest"
        return {str(p): (high if latest else low) for p, (low, high) in marks.items()}

    def prepareForTriggerAvailableNow(self) -> None:
        self.available_now_target = {str(p): high for p, (_, high) in _watermarks(self.options).items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_per_partition)

    def latestOffset(self, start: dict[str, int] | None = None, limit: ReadLimit | None = None) -> dict[str, int]:
        if self.available_now_target is not None:
            target = dict(self.available_now_target)
        else:
            target = {str(p): high for p, (_, high) in _watermarks(self.options).items()}
        start = start or {}
        out: dict[str, int] = {}
        for p, high in target.items():
            begin = int(start.get(p, 0))
            end = max(begin, high)
            # ReadMaxRows is applied per partition: it bounds every task of the micro-batch alike.
            if isinstance(limit, ReadMaxRows) and not isinstance(limit, ReadAllAvailable):
                end = min(end, begin + limit.max_rows)
            out[p] = end
        for p, begin in start.items():  # a partition never disappears from the offsets
            out.setdefault(p, int(begin))
        return out

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[_Range]:
        return _ranges(start, end)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, _Range)
        yield from _read_range(self.options, partition)

    def commit(self, end: dict[str, int]) -> None:
        return None


class KafkaTopicDataSource(DataSource):
    """`spark.read.format("kct_kafka")` / `spark.readStream.format("kct_kafka")`."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return RAW_SCHEMA_DDL

    def reader(self, schema: Any) -> DataSourceReader:
        return _BatchReader(dict(self.options))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _StreamReader(dict(self.options))


def register_source(spark: Any) -> None:
    spark.dataSource.register(KafkaTopicDataSource)
