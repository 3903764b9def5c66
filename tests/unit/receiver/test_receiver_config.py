"""The receiver's configuration model, the shipped example, and the small pure helpers around it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kct.otlp import labels as L
from kct.receiver.config import (
    ConfigError,
    KafkaSinkConfig,
    PrivacyConfig,
    ReceiverConfig,
    dump_config_yaml,
    load_receiver_config,
    parse_receiver_config,
    resolve_env,
)
from kct.receiver.kafka_sink import producer_config, quiet_producer_config
from kct.receiver.privacy import AttributeFilter
from kct.receiver.sanitize import sanitize, scan_untouched

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "receiver-local.yaml"


def test_example_targets_the_local_stack() -> None:
    """Given examples/receiver-local.yaml, then it listens on 127.0.0.1:4318, takes the token and bootstrap
    servers from the environment, and writes to client-telemetry, which the local broker creates on first
    use (docs/development.md's hand-run receiver has no operator to create it)."""
    config = load_receiver_config(EXAMPLE)
    assert (config.listen.host, config.listen.port) == ("127.0.0.1", 4318)
    assert config.auth.bearer_token_env == "KCT_RECEIVER_TOKEN"
    assert config.kafka.bootstrap_servers_env == "KAFKA_BOOTSTRAP_SERVERS"
    assert config.kafka.topic == "client-telemetry"
    assert config.kafka.producer_properties["allow.auto.create.topics"] is True


def test_dump_round_trips_through_load(tmp_path: Path) -> None:
    """Given a config, when the operator renders it (camelCase YAML) and the receiver loads it, then equal."""
    config = load_receiver_config(EXAMPLE)
    path = tmp_path / "receiver.yaml"
    path.write_text(dump_config_yaml(config))
    assert load_receiver_config(path) == config
    assert "bearerTokenEnv" in path.read_text()


def test_typos_and_wrong_types_name_the_field() -> None:
    """Given a misspelt key, a string for a number, or no Kafka bootstrap, then ConfigError naming each."""
    with pytest.raises(ConfigError, match=r"limits\.maxCompresedBytes: Extra inputs"):
        parse_receiver_config({"kafka": {"bootstrapServers": "k:9092"}, "limits": {"maxCompresedBytes": 1}})
    with pytest.raises(ConfigError, match=r"listen\.port"):
        parse_receiver_config({"kafka": {"bootstrapServers": "k:9092"}, "listen": {"port": "4318"}})
    with pytest.raises(ConfigError, match="bootstrapServers"):
        parse_receiver_config({"kafka": {"topic": "t"}})
    with pytest.raises(ConfigError, match="maxInflightBytes"):
        parse_receiver_config({"kafka": {"bootstrapServers": "k"}, "limits": {"maxInflightBytes": 10}})
    with pytest.raises(ConfigError, match="set by the receiver"):
        parse_receiver_config({"kafka": {"bootstrapServers": "k", "producerProperties": {"acks": "1"}}})


def test_model_is_frozen_and_json_schema_able() -> None:
    """Given the model, then instances are immutable and a JSON schema with camelCase names exists."""
    config = parse_receiver_config({"kafka": {"bootstrapServers": "k:9092"}})
    with pytest.raises(ValueError, match="frozen"):
        config.kafka.topic = "x"  # type: ignore[misc]
    schema = json.dumps(ReceiverConfig.model_json_schema(by_alias=True))
    assert "maxDecompressedBytes" in schema and "bootstrapServersEnv" in schema


def test_secrets_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given bootstrap servers and a SASL password named by environment variables, then the producer gets
    their values, with idempotence and acks=all forced; a missing variable is a ConfigError naming it."""
    monkeypatch.setenv("KB", "k1:9092,k2:9092")
    monkeypatch.setenv("KPW", "s3cret")
    config = parse_receiver_config(
        {"kafka": {"bootstrapServersEnv": "KB", "producerPropertiesFromEnv": {"sasl.password": "KPW"}}}
    )
    conf = producer_config(config.kafka, 1_000_000)
    assert conf["bootstrap.servers"] == "k1:9092,k2:9092"
    assert conf["sasl.password"] == "s3cret"
    assert conf["enable.idempotence"] is True and conf["acks"] == "all"
    monkeypatch.delenv("KPW")
    with pytest.raises(ConfigError, match="KPW"):
        producer_config(config.kafka, 1_000_000)
    with pytest.raises(ConfigError, match=r"auth\.bearerTokenEnv"):
        resolve_env("KCT_SURELY_UNSET", "auth.bearerTokenEnv")


def test_the_producer_never_creates_the_topic_unless_the_user_asks() -> None:
    """Given the default sink config, then neither producer may auto-create the topic (its metadata
    requests, the readiness probe's among them, would create it with the broker's defaults, or again after
    the operator deleted it); given the user's own `allow.auto.create.topics`, then theirs is used."""
    config = KafkaSinkConfig(bootstrap_servers="k:9092")
    busy = producer_config(config, 1_000_000)
    quiet = quiet_producer_config(busy, config)
    assert quiet is not None
    assert busy["allow.auto.create.topics"] is False and quiet["allow.auto.create.topics"] is False
    own = KafkaSinkConfig(bootstrap_servers="k:9092", producer_properties={"allow.auto.create.topics": True})
    assert producer_config(own, 1_000_000)["allow.auto.create.topics"] is True


def test_quiet_producer_sends_at_once_and_the_busy_one_lingers() -> None:
    """Given the default sink config, then the busy producer lingers 1 ms (batches under load) and the quiet
    one neither lingers nor has more than one request in flight (a quiet push is sent at once); given the
    user's own linger (either name), then there is no quiet producer and their value is used."""
    config = KafkaSinkConfig(bootstrap_servers="k:9092")
    busy = producer_config(config, 1_000_000)
    assert busy["linger.ms"] == 1 and "max.in.flight.requests.per.connection" not in busy
    quiet = quiet_producer_config(busy, config)
    assert quiet is not None
    assert (quiet["linger.ms"], quiet["max.in.flight.requests.per.connection"]) == (0, 1)
    assert quiet["enable.idempotence"] is True and quiet["acks"] == "all"
    for key in ("linger.ms", "queue.buffering.max.ms"):
        own = KafkaSinkConfig(bootstrap_servers="k:9092", producer_properties={key: 5})
        assert quiet_producer_config(producer_config(own, 1_000_000), own) is None
        assert producer_config(own, 1_000_000)[key] == 5


# -- privacy ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["host.name", "host.id", "os.type", "os.description", "process.command_line",
                                 "process.command_args", "process.owner", "sasl.password", "ssl.key.password",
                                 "api_token", "k8s.pod.name", "container.image.name"])
def test_default_privacy_drops_kip714_private_keys(key: str) -> None:
    """Given the default filter, then host, OS, process, credential and infrastructure keys are dropped."""
    assert not AttributeFilter(PrivacyConfig()).keeps(key)


@pytest.mark.parametrize("key", ["service.name", "client_rack", "topic", "partition", "node_id",
                                 "client_software_name", "process.pid"])
def test_default_privacy_keeps_ordinary_keys(key: str) -> None:
    """Given the default filter, then the labels of Kafka client metrics are kept."""
    assert AttributeFilter(PrivacyConfig()).keeps(key)


def test_allow_wins_over_deny_and_default_drop_keeps_only_allowed() -> None:
    """Given allow=[host.name], then host.name is kept; given defaultAction=drop, only allowed keys stay."""
    assert AttributeFilter(PrivacyConfig(allow=("host.name",))).keeps("host.name")
    strict = AttributeFilter(PrivacyConfig(allow=("topic",), default_action="drop"))
    assert strict.keeps("topic") and not strict.keeps("service.name")


@given(key=st.sampled_from(["host.name", "os.type", "my.secret.thing", "db_password", "k8s.node.name"]),
       where=st.sampled_from(["resource", "point"]), value=st.text(max_size=20))
def test_the_scan_never_hides_a_denied_key(key: str, where: str, value: str) -> None:
    """Given a push with a denied key among ordinary ones (on the resource or on every data point), then the
    receiver's native scan reports it, the fast path declines, and `sanitize` removes every occurrence."""
    from conftest import make_request

    filt = AttributeFilter(PrivacyConfig())
    assert not filt.keeps(key)
    req = (make_request(3, resource={"client_rack": "r1", key: value}) if where == "resource"
           else make_request(3, point_attributes={"topic": "orders", key: value}))
    data = req.SerializeToString()
    assert scan_untouched(data, filt) is None
    result = sanitize(req, filt, serialized=data)
    assert result.dropped_attributes == (1 if where == "resource" else 3)
    rm = req.resource_metrics[0]
    points = rm.scope_metrics[0].metrics[0].gauge.data_points
    assert key not in [kv.key for kv in rm.resource.attributes] + [kv.key for p in points for kv in p.attributes]


def test_ordinary_client_metrics_take_the_fast_path() -> None:
    """Given a Kafka client push with ordinary labels, then nothing needs filtering: the fast path answers."""
    from conftest import make_request

    data = make_request(50).SerializeToString()
    found = scan_untouched(data, AttributeFilter(PrivacyConfig()))
    assert found is not None and found.data_points == 50 and not found.modified


# -- header labels ---------------------------------------------------------------------------------------


@given(st.text(max_size=40))
def test_header_values_round_trip_and_are_ascii(value: str) -> None:
    """Given any text, then its header encoding is printable ASCII and decodes back to it."""
    encoded = L.encode_header_value(value)
    assert encoded.isascii() and all(c.isprintable() for c in encoded)
    assert L.decode_header_value(encoded) == value


def test_header_names_are_unique_and_prefixed() -> None:
    """Given the broker labels, then each HTTP header starts with kct- and names are unique."""
    names = [label.http_header for label in L.BROKER_LABELS]
    assert len(set(names)) == len(names) and all(n.startswith(L.HEADER_PREFIX) for n in names)


def test_a_mounted_kafka_secret_configures_the_producer_and_explicit_properties_win(tmp_path: Path) -> None:
    """Given kafka.clientPropertiesDir laid out as a mounted Secret (SCRAM over SASL_SSL, a CA) and a
    producerProperties entry, then the producer gets the Secret's values in librdkafka's spelling, the
    explicit property over the Secret's, and still idempotence and acks=all; an unknown key in the Secret is a
    ConfigError naming the directory and the key."""
    for key, value in {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u",
                       "sasl.password": "pw\n", "ssl.ca.pem": "PEM", "client.id": "from-secret"}.items():
        (tmp_path / key).write_text(value)
    config = KafkaSinkConfig(bootstrap_servers="k:9093", client_properties_dir=str(tmp_path),
                             producer_properties={"client.id": "explicit"})
    conf = producer_config(config, 1_000_000)
    assert {key: conf[key] for key in ("security.protocol", "sasl.mechanisms", "sasl.username", "sasl.password",
                                       "ssl.ca.pem", "client.id")} == {
        "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "u",
        "sasl.password": "pw", "ssl.ca.pem": "PEM", "client.id": "explicit"}
    assert conf["enable.idempotence"] is True and conf["acks"] == "all" and conf["bootstrap.servers"] == "k:9093"
    (tmp_path / "sasl.kerberos.keytab").write_text("/k")
    with pytest.raises(ConfigError, match=rf"kafka\.clientPropertiesDir {tmp_path}: .*sasl\.kerberos\.keytab"):
        producer_config(config, 1_000_000)
