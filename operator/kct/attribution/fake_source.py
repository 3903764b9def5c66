"""An in-memory `ObjectSource` for unit tests: scripted lists and watch streams, and what was asked."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from kct.attribution.watch import Kind, ObjectList, WatchEvent

__all__ = ["FakeObjectSource", "WatchScript"]


@dataclass
class WatchScript:
    """One watch call's answer: these events, then the end of the stream, Gone, or another error."""

    events: list[WatchEvent]
    then: Exception | None = None


@dataclass
class FakeObjectSource:
    lists: list[ObjectList] = field(default_factory=list)  # answered in order, the last one repeated
    watches: list[WatchScript] = field(default_factory=list)  # answered in order
    on_exhausted: Callable[[], None] = lambda: None  # called when a watch is asked for beyond the script
    calls: list[tuple[str, Kind, str | None, str]] = field(default_factory=list)

    def list(self, kind: Kind, namespace: str | None) -> ObjectList:
        answer = self.lists.pop(0) if len(self.lists) > 1 else self.lists[0]
        self.calls.append(("list", kind, namespace, answer.resource_version))
        return answer

    def watch(self, kind: Kind, namespace: str | None, resource_version: str) -> Iterator[WatchEvent]:
        self.calls.append(("watch", kind, namespace, resource_version))
        if not self.watches:
            self.on_exhausted()
            return
        script = self.watches.pop(0)
        yield from script.events
        if script.then is not None:
            raise script.then
