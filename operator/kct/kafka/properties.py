"""Kafka client properties (as users write them for Java or librdkafka) -> kafka-python settings.

A `spec.kafka.secretRef` Secret holds one client property per key, the way platform teams already
keep them (`security.protocol`, `sasl.mechanism`, `sasl.username`/`sasl.password` or
`sasl.jaas.config`, PEM material under `ssl.ca.pem`, ...). kafka-python spells them differently and
wants PEM material in files, so this module translates; unknown keys are refused by name rather than
silently ignored.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

__all__ = ["SUPPORTED_PROPERTIES", "kafka_python_settings"]

_DIRECT: Final[dict[str, str]] = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.plain.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "sasl.plain.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.truststore.location": "ssl_cafile",  # PEM truststores only (ssl.truststore.type=PEM)
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "client.id": "client_id",
    "bootstrap.servers": "bootstrap_servers",
}
_PEM: Final[dict[str, str]] = {
    "ssl.ca.pem": "ssl_cafile",
    "ssl.truststore.certificates": "ssl_cafile",
    "ssl.certificate.pem": "ssl_certfile",
    "ssl.keystore.certificate.chain": "ssl_certfile",
    "ssl.key.pem": "ssl_keyfile",
    "ssl.keystore.key": "ssl_keyfile",
}
_IGNORED: Final = frozenset({"ssl.truststore.type", "ssl.keystore.type"})
SUPPORTED_PROPERTIES: Final = frozenset(
    {*_DIRECT, *_PEM, *_IGNORED, "sasl.jaas.config", "ssl.endpoint.identification.algorithm"}
)

_JAAS_VALUE = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def kafka_python_settings(properties: Mapping[str, str], pem_dir: Path | None = None) -> dict[str, Any]:
    """kafka-python `KafkaAdminClient` keyword arguments for `properties`. PEM values are written to
    files in `pem_dir` (a fresh private temporary directory when None)."""
    unknown = sorted(set(properties) - SUPPORTED_PROPERTIES)
    if unknown:
        raise ValueError(
            f"unsupported Kafka client properties {unknown}; supported: {sorted(SUPPORTED_PROPERTIES)}"
        )
    settings: dict[str, Any] = {}
    for key, value in properties.items():
        if key in _DIRECT:
            settings[_DIRECT[key]] = value.strip()
        elif key in _PEM:
            directory = pem_dir if pem_dir is not None else Path(tempfile.mkdtemp(prefix="kct-kafka-"))
            path = directory / key
            path.write_text(value)
            path.chmod(0o600)
            settings[_PEM[key]] = str(path)
        elif key == "sasl.jaas.config":
            found = dict(_JAAS_VALUE.findall(value))
            if "username" in found:
                settings.setdefault("sasl_plain_username", found["username"])
            if "password" in found:
                settings.setdefault("sasl_plain_password", found["password"])
        elif key == "ssl.endpoint.identification.algorithm":
            settings["ssl_check_hostname"] = value.strip().lower() == "https"
    if "sasl_mechanism" in settings:
        settings["sasl_mechanism"] = settings["sasl_mechanism"].upper()
    return settings
