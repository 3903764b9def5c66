"""The job's Spark tuning (`kct.aggregation.config.JOB_SPARK_CONF`: the parallel collector, the compiled-class
cache, the hash aggregation's fallback) is the same wherever a job's session is made: by `build_session`
(`kct aggregate`, local runs), in the SparkApplication the operator renders, and in the manifests of spark/."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kct.aggregation.config import JOB_JAVA_OPTIONS, JOB_SPARK_CONF, parse_job_config

REPO = Path(__file__).resolve().parents[3]


class _RecordingBuilder:
    """Stands in for `SparkSession.builder`: records what the job configures, starts no JVM."""

    def __init__(self) -> None:
        self.conf: dict[str, str] = {}

    def master(self, _: str) -> _RecordingBuilder:
        return self

    def appName(self, _: str) -> _RecordingBuilder:
        return self

    def config(self, key: str, value: str) -> _RecordingBuilder:
        self.conf[key] = value
        return self

    def getOrCreate(self) -> dict[str, str]:
        return self.conf


def test_build_session_sets_the_jobs_tuning_and_the_config_overrides_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given no active session (the job creates it) and a job config overriding one entry in `spark.conf`,
    When build_session builds it,
    Then every JOB_SPARK_CONF entry is set (the driver's JVM options included), the override wins."""
    from pyspark.sql import SparkSession

    from kct.aggregation.session import build_session

    builder = _RecordingBuilder()
    monkeypatch.setattr(SparkSession, "builder", builder)
    monkeypatch.setattr(SparkSession, "getActiveSession", staticmethod(lambda: None))
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)  # build_session sets these defaults: restored after
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    cfg = parse_job_config({"source": {"bootstrapServers": "unused:9092"}, "parquet": {"path": "/tmp/unused"},
                            "spark": {"conf": {"spark.sql.codegen.cache.maxEntries": "7"}}})
    conf: Any = build_session(cfg)
    assert "-XX:+UseParallelGC" in JOB_JAVA_OPTIONS
    assert conf["spark.driver.extraJavaOptions"] == JOB_JAVA_OPTIONS
    assert conf["spark.sql.codegen.cache.maxEntries"] == "7"
    assert {k: conf[k] for k in JOB_SPARK_CONF if k != "spark.sql.codegen.cache.maxEntries"} == \
        {k: v for k, v in JOB_SPARK_CONF.items() if k != "spark.sql.codegen.cache.maxEntries"}


@pytest.mark.parametrize("mode", ["streaming", "scheduled"])
def test_rendered_spark_applications_and_the_manifests_carry_the_jobs_tuning(mode: str) -> None:
    """Given a TelemetryReceiver with the aggregation streaming or scheduled, and the manifests in spark/,
    When the operator renders the (Scheduled)SparkApplication,
    Then its sparkConf and every manifest's hold every JOB_SPARK_CONF entry with its value."""
    from kct.api.telemetry_receiver import parse_receiver_spec
    from kct.render import ReceiverParams
    from kct.render.spark import render_scheduled_spark_application, render_spark_application

    spec = {"aggregation": {"mode": mode, **({"schedule": "*/15 * * * *"} if mode == "scheduled" else {})}}
    params = ReceiverParams(name="telemetry", namespace="observability", uid="u", spec=parse_receiver_spec(spec),
                            bootstrap_servers="kafka:9092", generated_token="t", version="test")
    app = render_spark_application(params) if mode == "streaming" else render_scheduled_spark_application(params)
    assert app is not None
    template = app["spec"] if mode == "streaming" else app["spec"]["template"]
    assert {k: template["sparkConf"].get(k) for k in JOB_SPARK_CONF} == JOB_SPARK_CONF
    manifests = sorted((REPO / "spark").glob("*sparkapplication*.yaml"))
    assert len(manifests) == 2
    for manifest in manifests:
        doc = yaml.safe_load(manifest.read_text())
        conf = (doc["spec"]["template"] if doc["kind"] == "ScheduledSparkApplication" else doc["spec"])["sparkConf"]
        assert {k: conf.get(k) for k in JOB_SPARK_CONF} == JOB_SPARK_CONF, manifest.name
