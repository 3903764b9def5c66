"""The job reads the topic with Spark's own Kafka source only; without its jars it says how to get them."""

from __future__ import annotations

import re
from typing import Any

import pytest

from kct.aggregation.config import ConfigError, parse_job_config
from kct.aggregation.source import read_records


def test_reading_without_sparks_kafka_source_names_the_fix(spark: Any) -> None:
    """Given a session without spark-sql-kafka on its classpath (the unit tests' session has no spark.jars),
    When the job reads the topic, Then it stops before Spark does, naming the connector and the install command."""
    cfg = parse_job_config({"source": {"bootstrapServers": "127.0.0.1:9"}, "parquet": {"path": "/unused"}})
    expected = rf"spark-sql-kafka-0-10_2\.13 {re.escape(spark.version)}.*dev/spark-deps/install\.py"
    with pytest.raises(RuntimeError, match=expected):
        read_records(spark, cfg, streaming=False)


def test_the_removed_python_connector_switch_is_rejected_by_name() -> None:
    """Given a config written for the removed Python Kafka source (`source.connector`), When parsed,
    Then the error names the key rather than silently reading some other way."""
    with pytest.raises(ConfigError, match=r"source\.connector"):
        parse_job_config({"source": {"bootstrapServers": "b", "connector": "python"}, "parquet": {"path": "/x"}})


def test_under_spark_submit_the_config_does_not_replace_the_master(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given the Python process of a SparkApplication's driver (spark-submit hands its JVM over through
    PYSPARK_GATEWAY_PORT and _SECRET), Then the job counts as submitted, and `spark.master` of its config
    (local[*] by default) is not applied; a plain `kct aggregate` is not."""
    from kct.aggregation.session import submitted_by_spark_submit

    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.delenv("PYSPARK_GATEWAY_SECRET", raising=False)
    assert not submitted_by_spark_submit()
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "40123")
    assert not submitted_by_spark_submit()
    monkeypatch.setenv("PYSPARK_GATEWAY_SECRET", "s3cret")
    assert submitted_by_spark_submit()


class _RecordingReader:
    """Stands in for `spark.read`: records the Kafka source's options; no JVM (so no classpath check)."""

    def __init__(self) -> None:
        self.options: dict[str, str] = {}

    def format(self, _: str) -> _RecordingReader:
        return self

    def option(self, key: str, value: str) -> _RecordingReader:
        self.options[key] = value
        return self

    def load(self) -> _RecordingReader:
        return self

    def select(self, *_: str) -> _RecordingReader:
        return self


class _Session:
    def __init__(self) -> None:
        self.read = self.readStream = _RecordingReader()


@pytest.mark.parametrize("streaming", [False, True])
def test_the_consumers_do_not_hold_fetches_unless_the_config_says_so(streaming: bool) -> None:
    """Given a job config without consumer properties and one with `fetch.max.wait.ms` set,
    When the job reads the topic (batch and stream),
    Then Spark's consumers let the broker hold an empty fetch FETCH_MAX_WAIT_MS, not Kafka's 500 ms (which
    idled each task for about that long), and the config's own value wins."""
    from kct.aggregation.source import FETCH_MAX_WAIT_MS

    for given, expected in ((None, str(FETCH_MAX_WAIT_MS)), ("250", "250")):
        props = {} if given is None else {"fetch.max.wait.ms": given}
        cfg = parse_job_config({"source": {"bootstrapServers": "127.0.0.1:9", "consumerProperties": props},
                                "parquet": {"path": "/unused"}})
        spark = _Session()
        read_records(spark, cfg, streaming=streaming)
        assert spark.read.options["kafka.fetch.max.wait.ms"] == expected
