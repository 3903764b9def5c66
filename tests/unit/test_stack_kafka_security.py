"""dev/stack/kafka_security.py and the broker's secured listeners (kafka_broker.SecureListeners): the stack's
CA, certificates and SCRAM password, and the properties that turn them into SASL_SSL and mTLS listeners.

The listeners themselves serve real clients in tests/e2e/test_kafka_sasl_e2e.py."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "dev" / "stack"))
import kafka_broker
import kafka_security
from preconditions import missing_precondition


@pytest.fixture(autouse=True)
def _openssl() -> None:
    """The stack makes its CA and certificates with the openssl command (CI fails without it, as everywhere)."""
    if shutil.which("openssl") is None:
        missing_precondition("the openssl command (dev/stack/kafka_security.py makes the stack's CA with it)")


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))


def test_material_is_made_once_and_the_broker_certificate_again_when_its_addresses_change(tmp_path: Path) -> None:
    """Given a fresh state directory, When ensure() runs twice with the same hosts, Then the CA, certificates
    and password are made once (owner-only keys), the broker's certificate names the hosts and is signed by
    the stack's CA; When a host is added, Then only the broker's certificate is made again."""
    first = kafka_security.ensure(tmp_path, ["127.0.0.1", "localhost"])
    snapshot = {p.name: p.read_bytes() for p in first.directory.iterdir()}
    again = kafka_security.ensure(tmp_path, ["127.0.0.1", "localhost"])
    assert {p.name: p.read_bytes() for p in again.directory.iterdir()} == snapshot
    for secret in (first.password_file, first.client_key, first.broker_pem, first.directory / "ca.key"):
        assert secret.stat().st_mode & 0o077 == 0, secret
    text = subprocess.run(["openssl", "x509", "-noout", "-text", "-in", str(first.directory / "broker.crt")],
                          capture_output=True, text=True, check=True).stdout
    assert "IP Address:127.0.0.1" in text and "DNS:localhost" in text
    verified = subprocess.run(["openssl", "verify", "-CAfile", str(first.ca_file), str(first.directory / "broker.crt"),
                               str(first.client_cert)], capture_output=True, text=True, check=False)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    ssl.create_default_context(cafile=str(first.ca_file))  # a CA Python's TLS accepts as a trust anchor

    node = kafka_security.ensure(tmp_path, ["127.0.0.1", "localhost", "10.250.0.2"])
    assert node.broker_pem.read_bytes() != snapshot["broker.pem"]
    assert node.ca_file.read_bytes() == snapshot["ca.crt"]
    assert node.password == snapshot["sasl-password"].decode().strip()
    assert f"sasl.password={node.password}" in node.sasl_properties_file.read_text()


def test_secure_listeners_add_sasl_ssl_and_mtls_and_leave_plaintext_as_it_was(tmp_path: Path) -> None:
    """Given secure listeners (and a node stack's pod listener), When the broker's properties are written, Then
    PLAINTEXT is unchanged and first, SASL_SSL and SSL listen and are advertised on loopback (SASL_SSL for pods
    too), SCRAM-SHA-512 is the mechanism of every SASL listener, the SSL listener requires a client certificate,
    the stores are the PEM files; without them the properties have none of it."""
    security = kafka_security.ensure(tmp_path, ["127.0.0.1"])
    secure = kafka_broker.SecureListeners(security, pod_sasl_ssl_listener="10.250.0.2:19095")
    on = _props(kafka_broker._server_properties(Path("/d"), "http://e", 19092, 19093, True, None, "10.250.0.2:19094",
                                                secure=secure))
    off = _props(kafka_broker._server_properties(Path("/d"), "http://e", 19092, 19093, True, None, None))

    assert on["advertised.listeners"] == ("PLAINTEXT://127.0.0.1:19092,PODS://10.250.0.2:19094,"
                                          "SASL_SSL://127.0.0.1:19095,SSL://127.0.0.1:19096,"
                                          "PODS_SASL://10.250.0.2:19095")
    assert on["inter.broker.listener.name"] == "PLAINTEXT"
    assert set(on["listener.security.protocol.map"].split(",")) == {
        "PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT", "PODS:PLAINTEXT", "SASL_SSL:SASL_SSL", "SSL:SSL",
        "PODS_SASL:SASL_SSL"}
    assert on["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    for listener in ("sasl_ssl", "pods_sasl"):
        assert "ScramLoginModule required" in on[f"listener.name.{listener}.scram-sha-512.sasl.jaas.config"]
    assert on["listener.name.ssl.ssl.client.auth"] == "required"
    assert (on["ssl.keystore.type"], on["ssl.truststore.type"]) == ("PEM", "PEM")
    assert on["ssl.keystore.location"] == str(security.broker_pem.resolve())
    assert off["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert not any(key.startswith(("ssl.", "sasl.", "listener.name.")) for key in off)
    assert secure.env()["KCT_KAFKA_SASL_PASSWORD_FILE"] == str(security.password_file.resolve())
    assert security.password not in "".join(secure.env().values())
