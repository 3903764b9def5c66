"""The KIP-714 client libraries the client matrix runs against one broker, and where each is cached.

tests/e2e/test_client_matrix_e2e.py starts one process per library version; `make stack-install`
(`stack.py install`) prepares them here, so no test's timeout is spent on a download:

- librdkafka through confluent-kafka (PyPI wheels bundle their librdkafka): each version in a virtualenv of
  its own, `~/.cache/kct/clients/confluent-kafka-<version>/`. The oldest is 2.5.3: librdkafka 2.5.0
  (the first with KIP-714) aborts on an assertion when a subscription matches none of the metrics it
  implements (librdkafka issue 4833, fixed in 2.5.3); the newest is the newest the package index serves.
- Java kafka-clients: the jar in the cached broker of the same release (kafka_versions.MATRIX's
  `kafka_broker.install_libs`), so nothing more to fetch: 3.7 (the first with KIP-714) and the newest.

No other client the registries here serve pushes on its own: the Go, .NET, Node and Rust clients that do
(confluent-kafka-go, Confluent.Kafka, @confluentinc/kafka-javascript, rust-rdkafka) are librdkafka inside,
and franz-go, kafka-go, Sarama and KafkaJS do not implement KIP-714.

Standard library only (it runs before any virtualenv exists).
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

import _proc

__all__ = [
    "CLIENTS",
    "ClientLibrary",
    "install",
    "python_of",
]

Kind = Literal["librdkafka", "java"]


@dataclass(frozen=True)
class ClientLibrary:
    """One client library at one version, e.g. `ClientLibrary("librdkafka", "2.5.3")` (confluent-kafka's
    version, which is the librdkafka it bundles) or `ClientLibrary("java", "3.7.2")` (kafka-clients)."""

    kind: Kind
    version: str

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.version}"


# Oldest to newest within each library.
CLIENTS: Final[tuple[ClientLibrary, ...]] = (
    ClientLibrary("librdkafka", "2.5.3"),
    ClientLibrary("librdkafka", "2.16.1"),
    ClientLibrary("java", "3.7.2"),
    ClientLibrary("java", "4.4.0"),
)


def _venv(version: str) -> Path:
    return _proc.cache_dir("clients") / f"confluent-kafka-{version}"


def python_of(client: ClientLibrary) -> Path:
    """The interpreter of a librdkafka client's virtualenv (it imports that confluent-kafka)."""
    return _venv(client.version) / "bin" / "python"


def _installed(version: str) -> bool:
    return (_venv(version) / ".complete").exists()


def _install_confluent_kafka(version: str) -> None:
    if _installed(version):
        return
    venv = _venv(version)
    with _proc.step(f"confluent-kafka {version} (librdkafka {version}) -> {venv}"):
        # Built in place; `.complete` is written last, so an interrupted install is redone from scratch.
        shutil.rmtree(venv, ignore_errors=True)
        _proc.run([sys.executable, "-m", "venv", venv], tool="confluent-kafka", version=version)
        _proc.run([venv / "bin" / "python", "-m", "pip", "install", "-q", "--only-binary=:all:",
                   f"confluent-kafka=={version}"], tool="confluent-kafka", version=version)
        (venv / ".complete").write_text(version + "\n")


def install() -> None:
    """Every librdkafka version of CLIENTS into the cache (once each); the Java ones come with the brokers."""
    for client in CLIENTS:
        if client.kind == "librdkafka":
            _install_confluent_kafka(client.version)
