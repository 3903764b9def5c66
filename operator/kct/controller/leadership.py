"""Leader election over a `coordination.k8s.io/v1` Lease, so that of several operator replicas exactly one reconciles.

kopf's peering is not leader election: it pauses operators that see each other's heartbeats, and a peer
killed with SIGKILL leaves its record behind until the record's lifetime runs out. Running two replicas for
availability needs a lease with the semantics of client-go's `leaderelection`, which this module follows:

- the holder renews the Lease every `retry_period`;
- a candidate takes the Lease only after it has seen the *same* record (same resourceVersion) unchanged for
  `lease_duration` on its own monotonic clock, so no wall clocks are compared across machines;
- a holder that could not renew for `renew_deadline` (shorter than `lease_duration`) gives up leadership,
  by exiting, before any candidate can have taken over: at no moment do two replicas reconcile;
- a holder that stops cleanly releases the Lease (empty holder), so the standby takes over at its next try.

Takeover after the holder is killed therefore takes at most `lease_duration + retry_period`
(10 s + 2 s by default). Every write is an optimistic update on resourceVersion: two candidates racing for
one expired Lease cannot both win.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

__all__ = [
    "ElectionTiming",
    "KubernetesLeaseStore",
    "LeaderElector",
    "LeaseConflict",
    "LeaseRecord",
    "LeaseStore",
]

log = logging.getLogger("kct.leadership")


class LeaseConflict(Exception):
    """Someone else wrote the Lease between our read and our write (HTTP 409), or created it first."""


@dataclass(frozen=True)
class LeaseRecord:
    """What this module reads from and writes to the Lease's spec, plus the version it was read at."""

    holder: str
    lease_duration_seconds: int
    acquire_time: datetime | None = None
    renew_time: datetime | None = None
    transitions: int = 0
    resource_version: str = ""


@dataclass(frozen=True)
class ElectionTiming:
    """client-go's three durations, in seconds. The defaults give a takeover within 12 s of a kill."""

    lease_duration: float = 10.0
    renew_deadline: float = 7.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "leader election needs 0 < retry period < renew deadline < lease duration, got "
                f"{self.retry_period} s, {self.renew_deadline} s, {self.lease_duration} s"
            )

    @classmethod
    def from_lease_duration(cls, seconds: float) -> ElectionTiming:
        """The renew deadline at 70 % and the retry period at 20 % of the lease duration (10 s -> 7 s, 2 s)."""
        return cls(lease_duration=seconds, renew_deadline=seconds * 0.7, retry_period=seconds * 0.2)


class LeaseStore(Protocol):
    """One named Lease. `create` and `update` raise LeaseConflict when the write lost a race."""

    def get(self) -> LeaseRecord | None: ...

    def create(self, record: LeaseRecord) -> LeaseRecord: ...

    def update(self, record: LeaseRecord) -> LeaseRecord: ...


@dataclass(frozen=True)
class _Observation:
    record: LeaseRecord
    seen_at: float  # our monotonic clock when this resourceVersion was first seen


class LeaderElector:
    """Acquire, renew and release one Lease for `identity`; the I/O goes through a LeaseStore."""

    def __init__(
        self,
        store: LeaseStore,
        identity: str,
        timing: ElectionTiming | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.store = store
        self.identity = identity
        self.timing = timing or ElectionTiming()
        self._clock = clock
        self._wall = wall_clock
        self._observed: _Observation | None = None
        self._last_renewal: float | None = None

    @property
    def is_leader(self) -> bool:
        return self._last_renewal is not None

    def try_acquire_or_renew(self) -> bool:
        """One attempt: True when we hold the Lease afterwards. API errors propagate to the caller."""
        now = self._clock()
        current = self.store.get()
        if current is None:
            return self._won(self._write(self.store.create, self._claim(None)), now)
        if self._observed is None or self._observed.record.resource_version != current.resource_version:
            self._observed = _Observation(current, now)
        if not self._may_take(current, now):
            self._last_renewal = None
            return False
        return self._won(self._write(self.store.update, self._claim(current)), now)

    def _may_take(self, current: LeaseRecord, now: float) -> bool:
        if current.holder in ("", self.identity):
            return True
        assert self._observed is not None
        return now - self._observed.seen_at >= current.lease_duration_seconds

    def _claim(self, current: LeaseRecord | None) -> LeaseRecord:
        stamp = self._wall()
        duration = max(1, round(self.timing.lease_duration))
        if current is None:
            return LeaseRecord(self.identity, duration, acquire_time=stamp, renew_time=stamp)
        if current.holder == self.identity:
            return replace(current, lease_duration_seconds=duration, renew_time=stamp)
        return replace(
            current,
            holder=self.identity,
            lease_duration_seconds=duration,
            acquire_time=stamp,
            renew_time=stamp,
            transitions=current.transitions + 1,
        )

    @staticmethod
    def _write(write: Callable[[LeaseRecord], LeaseRecord], record: LeaseRecord) -> LeaseRecord | None:
        try:
            return write(record)
        except LeaseConflict:
            return None

    def _won(self, written: LeaseRecord | None, now: float) -> bool:
        if written is None:
            self._last_renewal = None
            return False
        self._observed = _Observation(written, now)
        self._last_renewal = now
        return True

    def acquire(self, stop: threading.Event) -> bool:
        """Block until we hold the Lease (True) or `stop` is set (False)."""
        announced = False
        while not stop.is_set():
            try:
                if self.try_acquire_or_renew():
                    log.info("%s holds the lease: this replica reconciles now", self.identity)
                    return True
            except Exception as error:  # the API server restarting must not end the standby
                log.warning("cannot read or write the lease (%s); retrying", error)
            else:
                if not announced and self._observed is not None:
                    log.info("standby: %s holds the lease; this replica waits", self._observed.record.holder)
                    announced = True
            stop.wait(self.timing.retry_period)
        return False

    def keep_renewing(self, on_lost: Callable[[str], None], stop: threading.Event) -> None:
        """Renew every retry period until `stop`; call `on_lost(reason)` once, and return, when the
        Lease was taken by another or could not be renewed within the renew deadline."""
        while not stop.wait(self.timing.retry_period):
            try:
                if self.try_acquire_or_renew():
                    continue
                holder = self._observed.record.holder if self._observed else "?"
                on_lost(f"the lease is now held by {holder}")
                return
            except Exception as error:
                last = self._last_renewal if self._last_renewal is not None else float("-inf")
                if self._clock() - last >= self.timing.renew_deadline:
                    on_lost(f"the lease could not be renewed for {self.timing.renew_deadline:g} s ({error})")
                    return
                log.warning("lease renewal failed (%s); retrying until the renew deadline", error)

    def release(self) -> None:
        """Hand the Lease over at once (empty holder) if we hold it; best effort on the way out."""
        if not self.is_leader or self._observed is None:
            return
        try:
            current = self.store.get()
            if current is not None and current.holder == self.identity:
                self.store.update(replace(current, holder="", lease_duration_seconds=1))
                log.info("%s released the lease", self.identity)
        except Exception as error:
            log.warning("could not release the lease (%s); the standby takes over when it expires", error)
        self._last_renewal = None


def _micro_time(stamp: datetime | None) -> str | None:
    # The API server parses MicroTime as RFC 3339 with exactly six fractional digits; Python's
    # isoformat() drops them when the microseconds are zero.
    return None if stamp is None else stamp.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class KubernetesLeaseStore:
    """The Lease `namespace/name` through the official client (in-cluster config, else KUBECONFIG)."""

    def __init__(self, namespace: str, name: str) -> None:
        from kubernetes import client

        from kct.controller.kube_config import kube_api_client

        self.namespace = namespace
        self.name = name
        # Typed as Any: the client's models are built from dicts here (MicroTime must be formatted by us).
        self._api: Any = client.CoordinationV1Api(kube_api_client())

    def get(self) -> LeaseRecord | None:
        from kubernetes.client.exceptions import ApiException

        try:
            lease = self._api.read_namespaced_lease(self.name, self.namespace, _request_timeout=5)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        spec = lease.spec
        return LeaseRecord(
            holder=spec.holder_identity or "",
            lease_duration_seconds=int(spec.lease_duration_seconds or 0),
            acquire_time=spec.acquire_time,
            renew_time=spec.renew_time,
            transitions=int(spec.lease_transitions or 0),
            resource_version=str(lease.metadata.resource_version),
        )

    def _body(self, record: LeaseRecord) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if record.resource_version:
            metadata["resourceVersion"] = record.resource_version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": record.holder,
                "leaseDurationSeconds": record.lease_duration_seconds,
                "acquireTime": _micro_time(record.acquire_time),
                "renewTime": _micro_time(record.renew_time),
                "leaseTransitions": record.transitions,
            },
        }

    def _written(self, lease: Any, record: LeaseRecord) -> LeaseRecord:
        return replace(record, resource_version=str(lease.metadata.resource_version))

    def create(self, record: LeaseRecord) -> LeaseRecord:
        from kubernetes.client.exceptions import ApiException

        try:
            lease = self._api.create_namespaced_lease(self.namespace, self._body(record), _request_timeout=5)
        except ApiException as error:
            if error.status == 409:
                raise LeaseConflict(f"Lease {self.namespace}/{self.name} was created by another replica") from error
            raise
        return self._written(lease, record)

    def update(self, record: LeaseRecord) -> LeaseRecord:
        from kubernetes.client.exceptions import ApiException

        try:
            lease = self._api.replace_namespaced_lease(
                self.name, self.namespace, self._body(record), _request_timeout=5
            )
        except ApiException as error:
            if error.status == 409:
                raise LeaseConflict(f"Lease {self.namespace}/{self.name} changed since it was read") from error
            raise
        return self._written(lease, record)
