"""dev/stack/kafka_broker.py passes the plugin's TLS files (CA, client certificate and key) into server.properties."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "dev" / "stack"))
import kafka_broker  # (dev/stack is not a package)


def _properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_ca_and_client_certificate_become_the_plugins_tls_properties(tmp_path: Path) -> None:
    """Given a CA bundle and a client certificate with its key, Then the plugin's section names all three files."""
    tls = kafka_broker.PluginTls(ca_file=tmp_path / "ca.crt", cert_file=tmp_path / "tls.crt",
                                 key_file=tmp_path / "tls.key")
    props = _properties(kafka_broker._server_properties(tmp_path, "https://r:4318/v1/metrics", 1, 2, True, None,
                                                        plugin_tls=tls))
    assert props["kct.telemetry.endpoint"] == "https://r:4318/v1/metrics"
    assert props["kct.telemetry.tls.ca.file"] == str(tmp_path / "ca.crt")
    assert props["kct.telemetry.tls.cert.file"] == str(tmp_path / "tls.crt")
    assert props["kct.telemetry.tls.key.file"] == str(tmp_path / "tls.key")


def test_a_ca_alone_sets_only_the_ca_file(tmp_path: Path) -> None:
    """Given only a CA (TLS without mTLS), Then no client certificate property is written."""
    text = kafka_broker._server_properties(tmp_path, "https://r", 1, 2, True, None,
                                           plugin_tls=kafka_broker.PluginTls(ca_file=tmp_path / "ca.crt"))
    tls_keys = sorted(k for k in _properties(text) if k.startswith("kct.telemetry.tls."))
    assert tls_keys == ["kct.telemetry.tls.ca.file"]


def test_without_plugin_tls_or_without_the_plugin_nothing_is_written(tmp_path: Path) -> None:
    """Given no TLS files, or TLS files for a broker without the plugin, Then no kct.telemetry.tls property exists
    (a broker without the plugin has no kct.telemetry section at all)."""
    plain = kafka_broker._server_properties(tmp_path, "http://e", 1, 2, True, None)
    no_plugin = kafka_broker._server_properties(tmp_path, "http://e", 1, 2, False, None,
                                                plugin_tls=kafka_broker.PluginTls(ca_file=tmp_path / "ca.crt"))
    assert "kct.telemetry.tls." not in plain
    assert "kct.telemetry." not in no_plugin


@pytest.mark.parametrize("given", ["cert_file", "key_file"])
def test_a_client_certificate_without_its_key_is_refused(tmp_path: Path, given: str) -> None:
    """Given only one of certificate and key, Then the builder refuses it, naming both (as the plugin would)."""
    with pytest.raises(ValueError, match=r"cert_file .* and key_file .* go together"):
        kafka_broker.PluginTls(**{given: tmp_path / "x"})
