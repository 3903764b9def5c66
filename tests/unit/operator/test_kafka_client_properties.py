"""A TelemetryReceiver's Kafka Secret, mounted, as librdkafka and the Java client spell it
(kct.kafka.client_properties): one set of keys for the operator's admin, the receivers and the Spark job."""

from __future__ import annotations

from pathlib import Path

import pytest

from kct.kafka.client_properties import java_client_properties, librdkafka_properties, read_properties_dir
from kct.kafka.properties import kafka_python_settings

CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
CERT = "-----BEGIN CERTIFICATE-----\nMIIC\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"
SCRAM = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "scram-sha-512",
    "sasl.username": "kct-admin",
    "sasl.password": 'p"w\\d',
    "ssl.ca.pem": CA,
}


def test_a_mounted_secret_is_read_one_property_per_file_without_kubelets_own_entries(tmp_path: Path) -> None:
    """Given a directory laid out as kubelet mounts a Secret (files, `..data` link and a timestamped dir),
    When read, Then each visible file is one property, its value stripped of surrounding whitespace."""
    (tmp_path / "..2026_01_01").mkdir()
    (tmp_path / "..data").symlink_to("..2026_01_01")
    (tmp_path / "security.protocol").write_text("SASL_SSL\n")
    (tmp_path / "ssl.ca.pem").write_text(CA)
    assert read_properties_dir(tmp_path) == {"security.protocol": "SASL_SSL", "ssl.ca.pem": CA.strip()}


def test_librdkafka_gets_scram_credentials_and_the_ca_inline() -> None:
    """Given a SCRAM Secret, When translated for librdkafka, Then the keys are librdkafka's, the mechanism
    upper case, the PEM inline (librdkafka reads ssl.ca.pem itself)."""
    assert librdkafka_properties(SCRAM) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "kct-admin",
        "sasl.password": 'p"w\\d',
        "ssl.ca.pem": CA,
    }


def test_librdkafka_takes_credentials_from_a_jaas_config_and_a_client_certificate_in_java_spelling() -> None:
    """Given Java-style keys (a JAAS config, PEM key store entries, no hostname check), When translated for
    librdkafka, Then the username and password come from the JAAS config and the certificate and key are
    librdkafka's PEM properties; bootstrap.servers and store types are dropped (the spec's cluster wins)."""
    properties = {
        "security.protocol": "SSL",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" '
                            'password="p";',
        "ssl.truststore.certificates": CA,
        "ssl.keystore.certificate.chain": CERT,
        "ssl.keystore.key": KEY,
        "ssl.keystore.type": "PEM",
        "ssl.endpoint.identification.algorithm": "",
        "bootstrap.servers": "elsewhere:9092",
    }
    assert librdkafka_properties(properties) == {
        "security.protocol": "SSL",
        "sasl.username": "u",
        "sasl.password": "p",
        "ssl.ca.pem": CA,
        "ssl.certificate.pem": CERT,
        "ssl.key.pem": KEY,
        "ssl.endpoint.identification.algorithm": "none",
    }


def test_java_gets_a_scram_jaas_config_with_quotes_escaped_and_a_pem_truststore() -> None:
    """Given a SCRAM Secret whose password holds a quote and a backslash, When translated for the Java client,
    Then sasl.jaas.config uses the SCRAM login module with both escaped, and the CA is an inline PEM truststore
    (the executors need no file of the driver's)."""
    assert java_client_properties(SCRAM) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            'username="kct-admin" password="p\\"w\\\\d";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.certificates": CA,
    }


def test_java_plain_login_a_ca_file_and_a_client_certificate_from_files(tmp_path: Path) -> None:
    """Given PLAIN credentials, a CA file and a client certificate and key given as files, When translated for
    the Java client, Then PLAIN's login module, a PEM truststore by location, and a PEM key store with the
    files' contents inline (the Java client wants key and chain in one store)."""
    cert, key = tmp_path / "client.crt", tmp_path / "client.key"
    cert.write_text(CERT)
    key.write_text(KEY)
    properties = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "PLAIN",
        "sasl.plain.username": "u",
        "sasl.plain.password": "p",
        "ssl.ca.location": "/etc/ca.crt",
        "ssl.certificate.location": str(cert),
        "ssl.key.location": str(key),
        "ssl.endpoint.identification.algorithm": "none",
    }
    assert java_client_properties(properties) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" '
                            'password="p";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/etc/ca.crt",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.certificate.chain": CERT,
        "ssl.keystore.key": KEY,
        "ssl.endpoint.identification.algorithm": "",
    }


def test_a_certificate_without_its_key_is_refused_for_java() -> None:
    """Given a client certificate but no key, When translated for the Java client, Then a ValueError says both
    are needed (the Java client would fail later, less clearly)."""
    with pytest.raises(ValueError, match="both its certificate and its key"):
        java_client_properties({"security.protocol": "SSL", "ssl.certificate.pem": CERT})


@pytest.mark.parametrize("translate", [librdkafka_properties, java_client_properties, kafka_python_settings])
def test_every_client_refuses_the_same_unknown_key_by_name(translate: object) -> None:
    """Given a key none of the translations knows, When translated for any of the three clients, Then each
    refuses it naming the key: a Secret that one client accepts, all accept."""
    assert callable(translate)
    with pytest.raises(ValueError, match=r"unsupported Kafka client properties \['sasl\.kerberos\.keytab'\]"):
        translate({"security.protocol": "SASL_SSL", "sasl.kerberos.keytab": "/k"})


def test_the_operators_admin_gets_the_same_secret_as_kafka_python_settings(tmp_path: Path) -> None:
    """Given the SCRAM Secret the pods mount, and an mTLS one, When translated for the operator's admin
    (kafka-python), Then SCRAM maps to security_protocol, sasl_mechanism and the plain username/password
    settings (kafka-python's names for SCRAM too), and the PEM material is written to owner-only files."""
    scram = kafka_python_settings(SCRAM, tmp_path)
    assert {key: scram[key] for key in ("security_protocol", "sasl_mechanism", "sasl_plain_username",
                                        "sasl_plain_password")} == {
        "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "kct-admin",
        "sasl_plain_password": 'p"w\\d'}
    assert Path(scram["ssl_cafile"]).read_text() == CA
    mtls = kafka_python_settings({"security.protocol": "SSL", "ssl.ca.pem": CA, "ssl.certificate.pem": CERT,
                                  "ssl.key.pem": KEY}, tmp_path)
    assert mtls["security_protocol"] == "SSL"
    assert (Path(mtls["ssl_certfile"]).read_text(), Path(mtls["ssl_keyfile"]).read_text()) == (CERT, KEY)
    assert Path(mtls["ssl_keyfile"]).stat().st_mode & 0o077 == 0
