"""The job's config model: the shipped example loads, typos and bad values are errors naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from kct.aggregation.config import ConfigError, load_job_config, parse_job_config

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "aggregation-local.yaml"


def test_example_config_loads_with_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given KAFKA_BOOTSTRAP_SERVERS in the environment,
    When the shipped example is loaded,
    Then it reads client-telemetry from there, writes under build/aggregates and stops once drained."""
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:19092")
    cfg = load_job_config(EXAMPLE)
    assert (cfg.source.bootstrap_servers, cfg.source.topic) == ("127.0.0.1:19092", "client-telemetry")
    assert (cfg.parquet.path, cfg.run.until_drained, cfg.window.size_seconds) == ("build/aggregates", True, 60)
    (rule,) = cfg.rules
    assert (rule.metric, rule.field, rule.op, rule.threshold, rule.for_seconds) == (
        "org.apache.kafka.producer.record.queue.time.max", "max", ">", 5000.0, 180)


def test_missing_environment_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given no KAFKA_BOOTSTRAP_SERVERS, When the example is loaded, Then the error names the key and variable."""
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    with pytest.raises(ConfigError, match=r"source\.bootstrapServers: environment variable KAFKA_BOOTSTRAP_SERVERS"):
        load_job_config(EXAMPLE)


def test_defaults_and_env_default_syntax(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given a minimal config using ${VAR:-default}, When parsed, Then defaults fill the rest."""
    monkeypatch.delenv("BOOT", raising=False)
    cfg = parse_job_config({"source": {"bootstrapServers": "${BOOT:-localhost:9092}"}, "parquet": {"path": "/x"}})
    assert cfg.source.bootstrap_servers == "localhost:9092"
    assert (cfg.window.size_seconds, cfg.window.watermark_seconds, cfg.run.mode) == (60, 120, "stream")
    assert cfg.checkpoint_dir() == "/x/_checkpoints"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"source": {"bootstrapServers": "b", "topik": "x"}, "parquet": {"path": "/x"}}, r"source\.topik"),
        ({"source": {"bootstrapServers": "b"}, "parquet": {"path": "/x"}, "window": {"sizeSeconds": 0}},
         r"window\.sizeSeconds"),
        ({"source": {"bootstrapServers": "b"}, "parquet": {"path": "/x"},
          "rules": [{"name": "a", "metric": "m", "threshold": 1}, {"name": "a", "metric": "n", "threshold": 2}]},
         "used twice"),
    ],
)
def test_invalid_configs_name_the_key(raw: dict[str, object], message: str) -> None:
    """Given a typo, an out-of-range value or a duplicate rule name, When parsed, Then ConfigError says where."""
    with pytest.raises(ConfigError, match=message):
        parse_job_config(raw)


@pytest.mark.parametrize(("aggregation", "decoder", "jar", "expected"), [
    ("auto", "auto", True, True),
    ("auto", "jvm", True, True),
    ("auto", "auto", False, False),
    ("auto", "python", True, False),
    ("sql", "jvm", True, False),
    ("jvm", "jvm", True, True),
])
def test_batch_aggregation_engine_follows_the_config_and_the_jar(
        monkeypatch: pytest.MonkeyPatch, aggregation: str, decoder: str, jar: bool, expected: bool) -> None:
    """Given `source.aggregation` and `source.decoder`, when batch mode picks how to compute client_metrics,
    then ClientWindows is used for `jvm`, and for `auto` only when the decoder jar is there and the decoder
    is not the Python one; the jar is not even looked up for `sql`."""
    from kct.aggregation import engine
    from kct.aggregation.config import AggregationConfig

    looked_up: list[bool] = []

    def register(_spark: object) -> bool:
        looked_up.append(True)
        return jar

    monkeypatch.setattr(engine, "register_jvm_decoder", register)
    cfg = AggregationConfig.model_validate({
        "source": {"bootstrapServers": "k:9092", "decoder": decoder, "aggregation": aggregation},
        "parquet": {"path": "/unused"}})
    assert engine.use_client_windows(object(), cfg) is expected
    assert looked_up == ([] if aggregation == "sql" or decoder == "python" else [True])


def test_jvm_aggregation_without_the_jar_is_an_error_naming_the_build_command(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Given `source.aggregation: jvm` and no decoder jar, then batch mode refuses with the command that builds
    it (no silent fallback to what the user did not ask for)."""
    from kct.aggregation import engine
    from kct.aggregation.config import AggregationConfig

    monkeypatch.setattr(engine, "register_jvm_decoder", lambda _spark: False)
    cfg = AggregationConfig.model_validate({
        "source": {"bootstrapServers": "k:9092", "aggregation": "jvm"}, "parquet": {"path": "/unused"}})
    with pytest.raises(RuntimeError, match=r"install\.py --decoder-only"):
        engine.use_client_windows(object(), cfg)
