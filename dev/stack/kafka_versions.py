"""The Kafka releases the broker plugin supports, and what differs between them.

One place for the version matrix: `make stack-install` caches a broker of each (`kafka_broker.install_libs`),
tests/e2e/test_plugin_versions_e2e.py runs the plugin on each, and the plugin's README table says what that
test checked. Each entry is the newest patch of its minor line that Maven Central serves with all its runtime
dependencies (checked when the line was added; a newer patch is one edit here).

What differs by line:
- the plugin class: KIP-1217's `ClientTelemetryExporterProvider` (which also hands over the push interval)
  exists from 4.2 on; 3.7 to 4.1 have only KIP-714's `ClientTelemetry`, which 4.2+ still load (deprecated).
- logging: Kafka 3.x brokers log through reload4j (log4j 1.2 properties), 4.x through log4j2.

Standard library only (it runs before any virtualenv exists).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "EXPORTER_CLASS",
    "MATRIX",
    "RECEIVER_CLASS",
    "KafkaRelease",
]

# KIP-714's interface: Kafka 3.7 and later (deprecated in 4.2, due to go in 5.0).
RECEIVER_CLASS: Final = "dev.kct.telemetry.KctClientTelemetryReporter"
# KIP-1217's interface: Kafka 4.2 and later.
EXPORTER_CLASS: Final = "dev.kct.telemetry.KctClientTelemetryExporterReporter"

Logging = Literal["reload4j", "log4j2"]


@dataclass(frozen=True)
class KafkaRelease:
    """One Kafka release, e.g. `KafkaRelease("3.9.2")`."""

    version: str

    @property
    def line(self) -> tuple[int, int]:
        major, minor = self.version.split(".")[:2]
        return int(major), int(minor)

    @property
    def line_name(self) -> str:
        return "{}.{}".format(*self.line)

    @property
    def has_exporter_api(self) -> bool:
        """Whether the broker has `ClientTelemetryExporterProvider` (KIP-1217)."""
        return self.line >= (4, 2)

    @property
    def plugin_class(self) -> str:
        """The class the plugin's README says to configure on this release."""
        return EXPORTER_CLASS if self.has_exporter_api else RECEIVER_CLASS

    @property
    def loadable_classes(self) -> tuple[str, ...]:
        """Every plugin class this release's broker can load."""
        return (EXPORTER_CLASS, RECEIVER_CLASS) if self.has_exporter_api else (RECEIVER_CLASS,)

    @property
    def logging(self) -> Logging:
        return "log4j2" if self.line >= (4, 0) else "reload4j"


# Oldest to newest: 3.7 is the first release with KIP-714's broker side.
MATRIX: Final[tuple[KafkaRelease, ...]] = tuple(KafkaRelease(v) for v in (
    "3.7.2", "3.8.1", "3.9.2", "4.0.2", "4.1.2", "4.2.2", "4.3.1", "4.4.0",
))
