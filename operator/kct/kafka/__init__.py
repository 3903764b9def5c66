"""Kafka admin port: CLIENT_METRICS config resources behind one small Protocol.

`port.ClientMetricsAdmin` is the interface, `kafka_python.KafkaPythonClientMetricsAdmin` the real
implementation (import it explicitly; it pulls in kafka-python), `fake.InMemoryClientMetricsAdmin`
the fake for unit tests, `clientmetrics` the pure config format, `errors` the exceptions.
"""

from kct.kafka.errors import (
    InvalidClientMetricsConfigError,
    KafkaAdminError,
    KafkaNotAuthorizedError,
    KafkaUnreachableError,
)
from kct.kafka.port import ClientMetricsAdmin

__all__ = [
    "ClientMetricsAdmin",
    "InvalidClientMetricsConfigError",
    "KafkaAdminError",
    "KafkaNotAuthorizedError",
    "KafkaUnreachableError",
]
