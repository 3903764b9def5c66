"""The hourly roll-up's ScheduledSparkApplication (`render_hourly_rollup_application`)."""

from __future__ import annotations

from typing import Any

from kct.api.telemetry_receiver import parse_receiver_spec
from kct.render import ReceiverParams
from kct.render.spark import HOURLY_SCHEDULE, render_hourly_rollup_application, render_spark_application


def params(aggregation: dict[str, Any] | None) -> ReceiverParams:
    spec = parse_receiver_spec({"aggregation": aggregation} if aggregation is not None else {})
    return ReceiverParams("telemetry", "observability", "uid-1", spec, "kafka:9092", version="test")


def test_the_hourly_rollup_runs_the_aggregations_job_in_hourly_mode_on_its_schedule() -> None:
    """Given an enabled aggregation, When the hourly roll-up is rendered, Then it runs the streaming job's image,
    config, volumes and tuning with `--mode hourly` at 5 past every hour, under a name of its own."""
    given = params({"sinkClaimName": "aggregates", "sparkConf": {"spark.sql.shuffle.partitions": "8"}})
    hourly = render_hourly_rollup_application(given)
    streaming = render_spark_application(given)
    assert hourly is not None and streaming is not None
    assert hourly["metadata"]["name"] == "telemetry-aggregation-hourly" != streaming["metadata"]["name"]
    assert hourly["spec"]["schedule"] == HOURLY_SCHEDULE == "5 * * * *"
    template = hourly["spec"]["template"]
    assert template["arguments"] == ["--config", "/etc/kct/aggregation/aggregation.yaml", "--mode", "hourly"]
    for key in ("image", "sparkVersion", "mainApplicationFile", "sparkConf", "volumes", "executor"):
        assert template[key] == streaming["spec"][key], key
    assert template["restartPolicy"]["type"] == "OnFailure"


def test_no_hourly_rollup_without_an_enabled_aggregation() -> None:
    assert render_hourly_rollup_application(params(None)) is None
    assert render_hourly_rollup_application(params({"enabled": False})) is None
