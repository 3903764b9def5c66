"""The admin port: the few CLIENT_METRICS calls the operator and the CLI need.

One `Protocol`, one real implementation (`kct.kafka.kafka_python`) and one in-memory fake
(`kct.kafka.fake`) so reconcile logic is tested without a broker. Calls are blocking; async callers
run them in a thread. Configs are the broker's own strings (`metrics`, `interval.ms`, `match`);
`kct.kafka.clientmetrics` converts between them and the spec.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Protocol

__all__ = ["ClientMetricsAdmin"]


class ClientMetricsAdmin(Protocol):
    """CLIENT_METRICS config resources of one Kafka cluster."""

    def list_subscriptions(self) -> list[str]:
        """Names of every CLIENT_METRICS resource on the cluster."""
        ...

    def describe_subscription(self, name: str) -> dict[str, str]:
        """The configs set on CLIENT_METRICS resource `name` (empty when it does not exist)."""
        ...

    def alter_subscription(self, name: str, set_configs: Mapping[str, str], delete_configs: Collection[str]) -> None:
        """One IncrementalAlterConfigs: SET `set_configs`, DELETE `delete_configs`."""
        ...

    def delete_subscription(self, name: str) -> None:
        """Delete every config of `name`, which deletes the subscription. No-op when absent."""
        ...

    def close(self) -> None: ...
