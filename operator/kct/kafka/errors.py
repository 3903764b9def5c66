"""Errors of the Kafka admin port, independent of the client library behind it.

    KafkaAdminError (Exception)                    anything the admin call could not do
    ├── KafkaUnreachableError (+ ConnectionError)  no broker answered in time: retry with backoff
    ├── KafkaNotAuthorizedError (+ PermissionError) authentication failed or ALTER_CONFIGS /
    │                                              DESCRIBE_CONFIGS on CLUSTER is missing: retry, slowly
    └── InvalidClientMetricsConfigError (+ ValueError) the broker refused the configs: the spec is wrong

`kct.controller.reasons` maps each to a `Ready=False` reason; implementations map their library's errors here.
"""

from __future__ import annotations

__all__ = [
    "InvalidClientMetricsConfigError",
    "KafkaAdminError",
    "KafkaNotAuthorizedError",
    "KafkaUnreachableError",
]


class KafkaAdminError(Exception):
    """An admin call failed."""


class KafkaUnreachableError(KafkaAdminError, ConnectionError):
    """No broker of the cluster could be reached (or answered) in time."""


class KafkaNotAuthorizedError(KafkaAdminError, PermissionError):
    """Authentication failed, or the principal lacks the ACLs the call needs."""


class InvalidClientMetricsConfigError(KafkaAdminError, ValueError):
    """The broker refused the CLIENT_METRICS configs (e.g. a regex RE2/J rejects)."""
