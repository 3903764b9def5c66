"""One source per config schema: what a TelemetryReceiver accepts under `spec.receiver` and
`spec.aggregation` is the receiver's and the job's own tuning model, passed through unchanged; config files
of both programs fail with the one `ConfigError`, naming the file and the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kct import configfile
from kct.aggregation import config as job_config
from kct.api.crdgen import render_crd
from kct.api.crds import TELEMETRY_RECEIVER
from kct.api.telemetry_receiver import AggregationSpec, ReceiverSettings, parse_receiver_spec
from kct.receiver import config as receiver_config_module
from kct.render.params import ReceiverParams, aggregation_config, receiver_config

# Every tuned section set away from its default, so "copied unchanged" cannot pass by defaults alone.
TUNED_RECEIVER: dict[str, Any] = {
    "limits": {"maxCompressedBytes": 4096, "maxDecompressedBytes": 8192, "maxInflightBytes": 65536},
    "connections": {"maxOpen": 100, "headerTimeoutMs": 2000, "maxBufferedBytes": 8192},
    "privacy": {"deny": ["host.*"], "defaultAction": "drop"},
    "validation": {"checkDataPoints": False},
    "rateLimit": {"enabled": False, "tolerance": 0.5},
    "quotas": {"windowCount": 4, "overrides": [{"clientId": "etl", "byteRate": 1000.0}]},
    "observability": {"pipeline": False},
    "logging": {"level": "DEBUG", "format": "text"},
    "shutdown": {"drainTimeoutMs": 1234},
    "runtime": {"eventLoop": "uvloop", "deliveryWakeup": "thread"},
    "attribution": {"namespaces": ["apps"], "rules": [{"principal": "User:etl", "attributes": {"k8s.job.name": "x"}}]},
}
TUNED_AGGREGATION: dict[str, Any] = {
    "window": {"sizeSeconds": 30, "watermarkSeconds": 10, "counterLookbackWindows": 7},
    "rules": [{"name": "slow", "metric": "m", "threshold": 5.0, "forSeconds": 60}],
}


def _params(spec: dict[str, Any]) -> ReceiverParams:
    return ReceiverParams(
        name="tr", namespace="ns", uid="u", spec=parse_receiver_spec(spec), bootstrap_servers="k:9092"
    )


def test_spec_receiver_is_the_receivers_tuning_model_and_reaches_its_config_unchanged() -> None:
    """Given every tuned receiver section set in a spec, When the receiver config is built, Then each
    section equals the spec's: no field is re-listed or mapped on the way."""
    assert issubclass(ReceiverSettings, receiver_config_module.ReceiverTuning)
    spec = parse_receiver_spec({"receiver": TUNED_RECEIVER})
    built = receiver_config(spec, "k:9092")
    assert set(TUNED_RECEIVER) == {field.alias for field in receiver_config_module.ReceiverTuning.model_fields.values()}
    assert built.tuning() == spec.receiver.tuning()
    assert built.shutdown.drain_timeout_ms == 1234 and built.logging.format == "text"
    assert (built.connections.max_open, built.connections.max_buffered_bytes) == (100, 8192)
    assert (built.runtime.event_loop, built.runtime.delivery_wakeup) == ("uvloop", "thread")


def test_spec_aggregation_is_the_jobs_tuning_model_and_reaches_its_config_unchanged() -> None:
    """Given window and rules set in a spec, When the job config is built, Then both equal the spec's."""
    assert issubclass(AggregationSpec, job_config.AggregationTuning)
    params = _params({"aggregation": TUNED_AGGREGATION})
    built = aggregation_config(params)
    assert built is not None and params.spec.aggregation is not None
    assert set(TUNED_AGGREGATION) == {field.alias for field in job_config.AggregationTuning.model_fields.values()}
    assert built.tuning() == params.spec.aggregation.tuning()
    assert built.window.counter_lookback_windows == 7 and built.rules[0].name == "slow"


def test_the_crd_accepts_every_tuned_field_under_the_same_names() -> None:
    """Given the generated TelemetryReceiver CRD, Then spec.receiver and spec.aggregation list every field
    of the programs' tuning models (and their sub-fields), under the programs' own names."""
    schema = render_crd(TELEMETRY_RECEIVER)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    for section, model in (
        ("receiver", receiver_config_module.ReceiverTuning),
        ("aggregation", job_config.AggregationTuning),
    ):
        properties = schema["properties"][section]["properties"]
        for field in model.model_fields.values():
            assert field.alias in properties, f"spec.{section}.{field.alias} missing from the CRD"
    limits = schema["properties"]["receiver"]["properties"]["limits"]["properties"]
    assert set(limits) == {f.alias for f in receiver_config_module.LimitsConfig.model_fields.values()}


def test_a_duplicate_rule_name_is_refused_in_the_spec_as_in_the_job_file() -> None:
    """Given two rules with one name, Then the spec is refused like the job's file (one validator)."""
    rule = {"name": "dup", "metric": "m", "threshold": 1.0}
    with pytest.raises(ValueError, match="name 'dup' is used twice"):
        parse_receiver_spec({"aggregation": {"rules": [rule, rule]}})
    with pytest.raises(configfile.ConfigError, match="name 'dup' is used twice"):
        job_config.parse_job_config(
            {"source": {"bootstrapServers": "k:9092"}, "parquet": {"path": "/x"}, "rules": [rule, rule]}
        )


def test_both_programs_raise_the_one_config_error_naming_file_and_key(tmp_path: Path) -> None:
    """Given a bad receiver file and a bad job file, Then both raise `kct.configfile.ConfigError` naming
    the file and the key; an unreadable or non-YAML file too."""
    assert receiver_config_module.ConfigError is configfile.ConfigError is job_config.ConfigError
    bad_receiver = tmp_path / "receiver.yaml"
    bad_receiver.write_text("kafka: {bootstrapServers: k}\nlimits: {maxCompresedBytes: 1}\n")
    with pytest.raises(configfile.ConfigError, match=rf"{bad_receiver}\.limits\.maxCompresedBytes: Extra inputs"):
        receiver_config_module.load_receiver_config(bad_receiver)
    bad_job = tmp_path / "job.yaml"
    bad_job.write_text("source: {bootstrapServers: k}\nparquet: {path: /x}\nwindow: {sizeSeconds: 0}\n")
    with pytest.raises(configfile.ConfigError, match=rf"{bad_job}\.window\.sizeSeconds: Input should be greater"):
        job_config.load_job_config(bad_job)
    not_yaml = tmp_path / "broken.yaml"
    not_yaml.write_text("a: [1\n")
    with pytest.raises(configfile.ConfigError, match="not valid YAML"):
        configfile.read_yaml(not_yaml)
    with pytest.raises(configfile.ConfigError, match="cannot read"):
        configfile.read_yaml(tmp_path / "absent.yaml")


def test_job_files_are_lax_about_scalars_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given `${TRIGGER}` expanded to the string "15", Then the job config reads 15 (the receiver's file,
    which has no expansion, stays strict)."""
    monkeypatch.setenv("TRIGGER", "15")
    cfg = job_config.parse_job_config(
        {"source": {"bootstrapServers": "k"}, "parquet": {"path": "/x"}, "run": {"triggerSeconds": "${TRIGGER}"}}
    )
    assert cfg.run.trigger_seconds == 15
    with pytest.raises(configfile.ConfigError, match=r"limits\.maxCompressedBytes"):
        receiver_config_module.parse_receiver_config(
            {"kafka": {"bootstrapServers": "k"}, "limits": {"maxCompressedBytes": "5"}}
        )
