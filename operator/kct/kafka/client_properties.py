"""A TelemetryReceiver's Kafka Secret, mounted, as the receivers' and the Spark job's clients spell it.

`spec.kafka.secretRef` names one Secret, one Kafka client property per key (kct.kafka.properties lists the
keys). The operator's admin reads it through the API server (kct.kafka.properties: kafka-python); the
receiver pods and the Spark job's driver and executors get it mounted as a directory, one file per key as
kubelet writes a Secret volume, so no value ever passes through a ConfigMap or the resource. This module
reads that directory and translates the keys for the two other clients: librdkafka (the receiver's
producers, the job's Kafka output) and the Java client (Spark's Kafka source, options `kafka.<name>`). One set
of keys for all three clients: a Secret that works for the operator works for the pods.

Pure apart from reading files; no Kafka client is imported.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from kct.kafka.properties import SUPPORTED_PROPERTIES

__all__ = ["java_client_properties", "librdkafka_properties", "read_properties_dir"]

# Not forwarded to either client: `bootstrap.servers` (the spec's bootstrapServers wins) and the store types
# (implied by the PEM keys).
_LIBRDKAFKA: Final[dict[str, str]] = {
    "security.protocol": "security.protocol",
    "sasl.mechanism": "sasl.mechanisms",
    "sasl.mechanisms": "sasl.mechanisms",
    "sasl.username": "sasl.username",
    "sasl.plain.username": "sasl.username",
    "sasl.password": "sasl.password",
    "sasl.plain.password": "sasl.password",
    "ssl.ca.location": "ssl.ca.location",
    "ssl.truststore.location": "ssl.ca.location",
    "ssl.certificate.location": "ssl.certificate.location",
    "ssl.key.location": "ssl.key.location",
    "ssl.key.password": "ssl.key.password",
    "ssl.ca.pem": "ssl.ca.pem",
    "ssl.truststore.certificates": "ssl.ca.pem",
    "ssl.certificate.pem": "ssl.certificate.pem",
    "ssl.keystore.certificate.chain": "ssl.certificate.pem",
    "ssl.key.pem": "ssl.key.pem",
    "ssl.keystore.key": "ssl.key.pem",
    "client.id": "client.id",
}
_JAAS_VALUE = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def read_properties_dir(directory: Path) -> dict[str, str]:
    """The properties of a mounted Secret: each regular file is one (name = key, content = value, surrounding
    whitespace dropped). kubelet's own entries (`..data`, `..2024_...`) start with a dot and are skipped."""
    return {path.name: path.read_text().strip() for path in sorted(directory.iterdir())
            if not path.name.startswith(".") and path.is_file()}


def _check(properties: Mapping[str, str]) -> None:
    unknown = sorted(set(properties) - SUPPORTED_PROPERTIES)
    if unknown:
        raise ValueError(f"unsupported Kafka client properties {unknown}; supported: {sorted(SUPPORTED_PROPERTIES)}")


def _jaas_credentials(properties: Mapping[str, str]) -> dict[str, str]:
    return dict(_JAAS_VALUE.findall(properties.get("sasl.jaas.config", "")))


def librdkafka_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """librdkafka producer properties for the Secret's `properties` (PEM values stay inline: librdkafka reads
    `ssl.ca.pem` and friends itself); raises ValueError naming unsupported keys."""
    _check(properties)
    out = {_LIBRDKAFKA[key]: value for key, value in properties.items() if key in _LIBRDKAFKA}
    credentials = _jaas_credentials(properties)
    if "username" in credentials:
        out.setdefault("sasl.username", credentials["username"])
    if "password" in credentials:
        out.setdefault("sasl.password", credentials["password"])
    if "sasl.mechanisms" in out:
        out["sasl.mechanisms"] = out["sasl.mechanisms"].upper()
    algorithm = properties.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        out["ssl.endpoint.identification.algorithm"] = algorithm.lower() or "none"
    return out


def _jaas_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def java_client_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """Java client properties (Spark's Kafka source takes each as `kafka.<name>`) for the Secret's
    `properties`: username and password become a `sasl.jaas.config` of the mechanism's login module, PEM
    material PEM stores (`ssl.truststore.type=PEM`, ...), inline, so executors need no file of the driver's.
    Files named by `ssl.certificate.location` / `ssl.key.location` are read here (the Java client wants key and
    chain in one store). Raises ValueError naming unsupported keys."""
    _check(properties)
    out = {key: properties[key] for key in ("security.protocol", "ssl.key.password", "client.id") if key in properties}
    out.update(_java_sasl(properties))
    out.update(_java_ssl(properties))
    return out


def _java_sasl(properties: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    get = properties.get
    mechanism = (get("sasl.mechanism") or get("sasl.mechanisms") or "").upper()
    if mechanism:
        out["sasl.mechanism"] = mechanism
    username = get("sasl.username") or get("sasl.plain.username")
    password = get("sasl.password") or get("sasl.plain.password")
    if "sasl.jaas.config" in properties:
        out["sasl.jaas.config"] = properties["sasl.jaas.config"]
    elif username is not None or password is not None:
        module = ("org.apache.kafka.common.security.scram.ScramLoginModule" if mechanism.startswith("SCRAM-")
                  else "org.apache.kafka.common.security.plain.PlainLoginModule")
        out["sasl.jaas.config"] = (f"{module} required username={_jaas_quote(username or '')} "
                                   f"password={_jaas_quote(password or '')};")
    return out


def _java_ssl(properties: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    get = properties.get
    ca_pem = get("ssl.ca.pem") or get("ssl.truststore.certificates")
    ca_file = get("ssl.ca.location") or get("ssl.truststore.location")
    if ca_pem is not None:
        out.update({"ssl.truststore.type": "PEM", "ssl.truststore.certificates": ca_pem})
    elif ca_file is not None:
        out.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": ca_file})
    cert = get("ssl.certificate.pem") or get("ssl.keystore.certificate.chain")
    key = get("ssl.key.pem") or get("ssl.keystore.key")
    if cert is None and "ssl.certificate.location" in properties:
        cert = Path(properties["ssl.certificate.location"]).read_text()
    if key is None and "ssl.key.location" in properties:
        key = Path(properties["ssl.key.location"]).read_text()
    if (cert is None) != (key is None):
        raise ValueError("a client certificate needs both its certificate and its key (ssl.certificate.pem and "
                         "ssl.key.pem)")
    if cert is not None and key is not None:
        out.update({"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": cert, "ssl.keystore.key": key})
    algorithm = get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        out["ssl.endpoint.identification.algorithm"] = "" if algorithm.lower() in ("", "none") else algorithm
    return out
