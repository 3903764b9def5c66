"""The receiver's `GET /v1/clients` document: the clients it has seen lately, one place for its shape.

The receiver writes it (kct.receiver.clients) and `kubectl kct` reads it (kct.kubectl), so the field names
live here. Through the API server's service proxy the `Authorization` header never reaches the receiver
(the API server consumes it to authenticate the user), so a reader presents the receiver's token in
`READ_TOKEN_HEADER` instead; a direct reader may use `Authorization: Bearer` as pushes do.
"""

from __future__ import annotations

from typing import Final, TypedDict

__all__ = ["CLIENTS_ROUTE", "METRIC_COLUMNS", "READ_TOKEN_HEADER", "ClientEntry", "ClientsDocument"]

CLIENTS_ROUTE: Final = "/v1/clients"
READ_TOKEN_HEADER: Final = "X-Kct-Read-Token"

# The latest figures a client pushed that are worth a `top`, in display order (units in the names).
METRIC_COLUMNS: Final = (
    "records_per_s",
    "bytes_per_s",
    "errors_per_s",
    "request_latency_avg_ms",
    "request_latency_max_ms",
    "queue_time_avg_ms",
    "queue_time_max_ms",
    "throttle_time_avg_ms",
    "throttle_time_max_ms",
)


class ClientEntry(TypedDict):
    client_instance_id: str
    labels: dict[str, str]  # KIP-714 broker-added labels as the broker sent them (client_id, principal, ...)
    attributes: dict[str, str]  # attribution: k8s.namespace.name, k8s.pod.name, k8s.deployment.name, ...
    first_push_ms: int  # Unix epoch milliseconds
    last_push_ms: int
    pushes: int
    metrics: dict[str, float]  # METRIC_COLUMNS the latest push allowed to compute


class ClientsDocument(TypedDict):
    receiver: str  # the replica that answered (its host name)
    now_ms: int
    clients: list[ClientEntry]
    tracked: int
    evicted: int  # clients dropped because the registry was full (the least recently pushed first)
    expired: int  # clients dropped after `idle` without a push
