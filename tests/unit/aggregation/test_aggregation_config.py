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


@pytest.mark.parametrize("switch", [{"decoder": "python"}, {"aggregation": "sql"}, {"decoder": "auto"}])
def test_the_removed_engine_switches_are_rejected_by_name(switch: dict[str, str]) -> None:
    """Given a config written for a version with two engines (`source.decoder`, `source.aggregation`),
    When parsed, Then the error names the key: the job has one engine, and does not read some other way."""
    (key,) = switch
    with pytest.raises(ConfigError, match=rf"source\.{key}"):
        parse_job_config({"source": {"bootstrapServers": "b", **switch}, "parquet": {"path": "/x"}})


@pytest.mark.parametrize("mode", ["batch", "stream"])
def test_without_the_decoder_jar_the_job_fails_at_start_naming_the_fix(
        monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """Given no decoder jar (it holds the job's only engine), When a batch or a stream run starts,
    Then it fails before reading the topic, with the command that builds the jar."""
    from kct.aggregation import batch, session, stream_writer

    def no_read(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the topic was read")

    monkeypatch.setattr(session, "register_jvm_decoder", lambda _spark: False)
    monkeypatch.setattr(batch, "read_records", no_read)
    monkeypatch.setattr(stream_writer, "read_records", no_read)
    cfg = parse_job_config({"source": {"bootstrapServers": "k:9092"}, "parquet": {"path": "/unused"},
                            "run": {"mode": mode}})
    run = batch.run_batch if mode == "batch" else stream_writer.run_stream
    with pytest.raises(RuntimeError, match=r"decoder jar .*install\.py --decoder-only"):
        run(object(), cfg)
