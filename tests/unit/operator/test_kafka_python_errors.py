"""kafka-python's exceptions map onto the admin port's few typed errors."""

from __future__ import annotations

import kafka.errors as kafka_errors
import pytest

from kct.kafka.errors import (
    InvalidClientMetricsConfigError,
    KafkaAdminError,
    KafkaNotAuthorizedError,
    KafkaUnreachableError,
)
from kct.kafka.kafka_python import KafkaPythonClientMetricsAdmin, translate_error


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (kafka_errors.KafkaTimeoutError("Unable to bootstrap"), KafkaUnreachableError),
        (kafka_errors.KafkaConnectionError("111 ECONNREFUSED"), KafkaUnreachableError),
        (kafka_errors.NodeNotReadyError("No node_id provided"), KafkaUnreachableError),
        (kafka_errors.RequestTimedOutError(), KafkaUnreachableError),
        (kafka_errors.ClusterAuthorizationFailedError(), KafkaNotAuthorizedError),
        (kafka_errors.SaslAuthenticationFailedError("bad password"), KafkaNotAuthorizedError),
        (kafka_errors.InvalidConfigurationError("Illegal client matching pattern"), InvalidClientMetricsConfigError),
        (kafka_errors.InvalidRequestError("interval must be between 100 and 3600000"), InvalidClientMetricsConfigError),
        (kafka_errors.InvalidReplicationFactorError("larger than available brokers"), InvalidClientMetricsConfigError),
        (kafka_errors.UnknownError("boom"), KafkaAdminError),
    ],
)
def test_translate_error(error: Exception, expected: type[KafkaAdminError]) -> None:
    """Given a kafka-python error, When translated, Then it is the matching port error, and the message
    keeps the library's name for the cause once."""
    translated = translate_error(error)
    assert type(translated) is expected
    assert str(translated).count(type(error).__name__) == 1


def test_errors_are_builtin_subclasses() -> None:
    """Given the port's errors, Then callers can catch them as built-ins too."""
    assert issubclass(KafkaUnreachableError, ConnectionError)
    assert issubclass(KafkaNotAuthorizedError, PermissionError)
    assert issubclass(InvalidClientMetricsConfigError, ValueError)


def test_unreachable_cluster_raises_typed_error() -> None:
    """Given nothing listening on the bootstrap address, When listing, Then KafkaUnreachableError
    (after the bootstrap timeout), not a kafka-python exception."""
    admin = KafkaPythonClientMetricsAdmin("127.0.0.1:1", request_timeout_ms=500, connections=1)
    with pytest.raises(KafkaUnreachableError):
        admin.list_subscriptions()
    admin.close()
