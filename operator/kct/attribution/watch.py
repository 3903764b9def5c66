"""Feeding the pod index from the Kubernetes API: list, then watch from the list's resourceVersion.

Kubernetes I/O sits behind `ObjectSource` (one real implementation, `kube_source.KubeObjectSource`, and the
in-memory `fake_source.FakeObjectSource` the unit tests script). `Reflector.run` is the client-go reflector
loop, for one kind in one namespace (or all): list and replace what the index holds; watch from that
resourceVersion and apply each event; when the watch ends (the server's timeout) watch again from the last
resourceVersion seen; when the server answers 410 Gone (the version was compacted away) list again; after any
other error wait (backing off, up to 30 s) and list again, so a missed deletion is repaired by the relist.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from kct.attribution.index import PodIndex

__all__ = ["Gone", "Kind", "ObjectList", "ObjectSource", "Reflector", "WatchEvent", "start_reflectors"]

log = logging.getLogger(__name__)

Kind = Literal["Pod", "ReplicaSet", "Job"]
KINDS: tuple[Kind, ...] = ("Pod", "ReplicaSet", "Job")


class Gone(Exception):
    """The watch's resourceVersion is too old (HTTP 410): list again."""


@dataclass(frozen=True)
class ObjectList:
    items: Sequence[Mapping[str, Any]]
    resource_version: str


@dataclass(frozen=True)
class WatchEvent:
    type: Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]
    object: Mapping[str, Any]

    @property
    def resource_version(self) -> str:
        return str((self.object.get("metadata") or {}).get("resourceVersion", ""))


class ObjectSource(Protocol):
    def list(self, kind: Kind, namespace: str | None) -> ObjectList:
        """Every object of `kind` (all namespaces when None), and the list's resourceVersion."""

    def watch(self, kind: Kind, namespace: str | None, resource_version: str) -> Iterator[WatchEvent]:
        """Events after `resource_version` until the server ends the watch; raises Gone on 410."""


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class Reflector:
    """Keeps `index` in step with one kind in one namespace (None: all)."""

    def __init__(
        self,
        source: ObjectSource,
        index: PodIndex,
        kind: Kind,
        namespace: str | None,
        *,
        stop: threading.Event,
        wall_ms: Callable[[], int] = _wall_ms,
        initial_backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
    ) -> None:
        self.source, self.index, self.kind, self.namespace = source, index, kind, namespace
        self.stop = stop
        self._wall_ms = wall_ms
        self._initial_backoff_s = initial_backoff_s
        self._max_backoff_s = max_backoff_s
        self.lists = 0  # how many times it listed (a relist after 410 or an error counts)
        self.errors = 0

    def run(self) -> None:
        backoff = self._initial_backoff_s
        while not self.stop.is_set():
            try:
                self._list_and_watch()
                backoff = self._initial_backoff_s
            except Gone:
                log.info("attribution: %s watch expired (410 Gone); listing again", self.kind)
            except Exception as exc:  # any failure of the API: wait, then start over
                self.errors += 1
                log.warning("attribution: %s list/watch failed (%s); again in %.1f s", self.kind, exc, backoff)
                self.stop.wait(backoff)
                backoff = min(backoff * 2, self._max_backoff_s)

    def _list_and_watch(self) -> None:
        listed = self.source.list(self.kind, self.namespace)
        self.lists += 1
        now = self._wall_ms()
        if self.kind == "Pod":
            self.index.replace_pods(listed.items, now, self.namespace)
            self.index.sweep(now)
        else:
            self.index.replace_owners(self.kind, listed.items, self.namespace)
        version = listed.resource_version
        while not self.stop.is_set():
            for event in self.source.watch(self.kind, self.namespace, version):
                if self.stop.is_set():
                    return
                version = event.resource_version or version
                self._apply(event)

    def _apply(self, event: WatchEvent) -> None:
        if event.type == "BOOKMARK":
            return
        now = self._wall_ms()
        if self.kind == "Pod":
            if event.type == "DELETED":
                self.index.delete_pod(event.object, now)
                self.index.sweep(now)
            else:
                self.index.upsert_pod(event.object, now)
        elif event.type == "DELETED":
            self.index.delete_owner(self.kind, event.object)
        else:
            self.index.upsert_owner(self.kind, event.object)


def start_reflectors(source: ObjectSource, index: PodIndex, namespaces: Sequence[str | None]) -> threading.Event:
    """One daemon thread per kind and namespace (None: all namespaces); set the returned event to stop them
    (each stops at its next event or the server's watch timeout)."""
    stop = threading.Event()
    for namespace in namespaces:
        for kind in KINDS:
            reflector = Reflector(source, index, kind, namespace, stop=stop)
            threading.Thread(target=reflector.run, name=f"attribution-{kind}-{namespace or 'all'}", daemon=True).start()
    return stop
