"""The job's Kafka source options from a mounted Kafka Secret (source.clientPropertiesDir): the Java client's
spelling, read on the driver, the config's own consumerProperties winning."""

from __future__ import annotations

from pathlib import Path

import pytest

from kct.aggregation.config import SourceConfig
from kct.aggregation.source import kafka_options


def test_a_mounted_scram_secret_becomes_kafka_options_and_consumer_properties_win(tmp_path: Path) -> None:
    """Given a mounted Secret (SCRAM over SASL_SSL with a CA) and a consumerProperties entry, When the source's
    options are built, Then they are `kafka.`-prefixed Java client properties: a SCRAM JAAS config, a PEM
    truststore inline, and the explicit consumer property over the Secret's."""
    for key, value in {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u",
                       "sasl.password": "pw", "ssl.ca.pem": "PEM\n", "client.id": "from-secret"}.items():
        (tmp_path / key).write_text(value)
    source = SourceConfig(bootstrap_servers="k:9093", client_properties_dir=str(tmp_path),
                          consumer_properties={"client.id": "explicit"})
    assert kafka_options(source) == {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" '
                                  'password="pw";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.certificates": "PEM",
        "kafka.client.id": "explicit",
    }


def test_without_a_directory_only_consumer_properties_are_options() -> None:
    """Given no Secret directory, Then the options are the consumer properties alone (PLAINTEXT unchanged)."""
    assert kafka_options(SourceConfig(bootstrap_servers="k:9092")) == {}
    assert kafka_options(SourceConfig(bootstrap_servers="k:9092", consumer_properties={"a": "b"})) == {"kafka.a": "b"}


def test_an_unknown_key_in_the_secret_stops_the_job_naming_it(tmp_path: Path) -> None:
    """Given a Secret with a key no client translation knows, Then building the options fails naming it."""
    (tmp_path / "sasl.kerberos.keytab").write_text("/k")
    with pytest.raises(ValueError, match=r"sasl\.kerberos\.keytab"):
        kafka_options(SourceConfig(bootstrap_servers="k:9093", client_properties_dir=str(tmp_path)))
