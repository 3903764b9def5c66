"""dev/stack/kafka_versions.py and the parts of kafka_broker.py that differ by Kafka release."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "dev" / "stack"))
import kafka_broker  # (dev/stack is not a package)
from kafka_versions import EXPORTER_CLASS, MATRIX, RECEIVER_CLASS, KafkaRelease


def test_the_matrix_has_one_release_per_line_from_3_7_oldest_first() -> None:
    """Given the matrix, Then it starts at 3.7 (KIP-714's broker side), one release per minor line, in order."""
    lines = [r.line for r in MATRIX]
    assert lines[0] == (3, 7)
    assert lines == sorted(set(lines))
    assert kafka_broker.KAFKA_VERSION in {r.version for r in MATRIX}


def test_class_and_logging_follow_the_line() -> None:
    """Given releases on both sides of 4.0 and 4.2, Then the class is KIP-1217's from 4.2, logging log4j2 from 4.0."""
    assert (KafkaRelease("4.1.2").plugin_class, KafkaRelease("4.1.2").logging) == (RECEIVER_CLASS, "log4j2")
    assert (KafkaRelease("4.2.2").plugin_class, KafkaRelease("4.2.2").loadable_classes) == \
        (EXPORTER_CLASS, (EXPORTER_CLASS, RECEIVER_CLASS))
    assert (KafkaRelease("3.9.2").logging, KafkaRelease("3.9.2").loadable_classes) == ("reload4j", (RECEIVER_CLASS,))


def test_server_properties_name_the_release_class_unless_told(tmp_path: Path) -> None:
    """Given a 3.8 broker, Then metric.reporters names the 3.7+ class, or the class asked for (a test of the
    wrong class), and the stack's default stays the 4.2+ class."""
    def reporters(**kwargs: str) -> str:
        text = kafka_broker._server_properties(tmp_path, "http://e", 1, 2, True, None, **kwargs)
        return next(line for line in text.splitlines() if line.startswith("metric.reporters="))

    assert reporters(version="3.8.1") == f"metric.reporters={RECEIVER_CLASS}"
    assert reporters(version="3.8.1", plugin_class=EXPORTER_CLASS) == f"metric.reporters={EXPORTER_CLASS}"
    assert reporters() == f"metric.reporters={EXPORTER_CLASS}"


def test_logging_configuration_follows_the_line(tmp_path: Path) -> None:
    """Given a 3.x and a 4.x broker directory, Then 3.x gets reload4j properties, 4.x log4j2's."""
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    new.mkdir()
    assert kafka_broker._logging_option(old, "3.7.2") == f"-Dlog4j.configuration=file:{old / 'log4j.properties'}"
    assert "log4j.rootLogger=INFO, stdout" in (old / "log4j.properties").read_text()
    assert kafka_broker._logging_option(new, "4.0.2") == f"-Dlog4j2.configurationFile={new / 'log4j2.properties'}"
    assert "rootLogger.level = INFO" in (new / "log4j2.properties").read_text()
