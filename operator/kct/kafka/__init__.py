"""Kafka admin ports: CLIENT_METRICS config resources and topics, each behind one small Protocol.

`port.ClientMetricsAdmin` and `topics.TopicAdmin` are the interfaces (with `topics.plan_topic`, the pure
"partitions only grow" planner); `kafka_python` holds the real implementations (import it explicitly; it
pulls in kafka-python), `fake` the in-memory fakes for unit tests, `clientmetrics` the pure config format,
`errors` the exceptions. The ports, planners and fakes import no Kafka client (import-linter checks it).
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
