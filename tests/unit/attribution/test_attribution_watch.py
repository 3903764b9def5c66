"""The list+watch loop over an in-memory source: resume from the last resourceVersion, relist on 410 Gone
and after errors (repairing deletions missed meanwhile)."""

from __future__ import annotations

import threading

from attribution_bodies import owned, pod

from kct.attribution.attributor import Attributor
from kct.attribution.config import AttributionConfig
from kct.attribution.fake_source import FakeObjectSource, WatchScript
from kct.attribution.watch import Gone, ObjectList, Reflector, WatchEvent

T0 = 1_700_000_000_000


def reflector(source: FakeObjectSource, attributor: Attributor, kind: str = "Pod") -> Reflector:
    stop = threading.Event()
    source.on_exhausted = stop.set  # the script is played out: stop the loop where it would wait for more
    return Reflector(source, attributor.index, kind, None, stop=stop, wall_ms=lambda: T0 + 5000,  # type: ignore[arg-type]
                     initial_backoff_s=0.0)


def names(attributor: Attributor, *ips: str) -> list[str | None]:
    return [dict(attributor.attribute(ip, None, None, T0 + 6000).attributes).get("k8s.pod.name") for ip in ips]


def test_watch_resumes_from_the_last_version_and_relists_after_410_gone() -> None:
    # Given a list at version 10, a watch that adds b (11) then expires (410), and a relist at 20 where a is gone
    attributor = Attributor(AttributionConfig(deleted_pod_grace_seconds=0))
    a, b = pod("a", "10.0.0.1", created_ms=T0), pod("b", "10.0.0.2", created_ms=T0, resource_version="11")
    source = FakeObjectSource(
        lists=[ObjectList([a], "10"), ObjectList([b], "20")],
        watches=[
            WatchScript([WatchEvent("ADDED", b)]),  # the server ends the watch (its timeout): watch again
            WatchScript([WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "15"}})], then=Gone("too old")),
        ],
    )
    loop = reflector(source, attributor)
    # When it runs until the script is played out
    loop.run()
    # Then it watched from each version it had seen, listed again after Gone, and a's missed deletion is repaired
    assert source.calls == [
        ("list", "Pod", None, "10"),
        ("watch", "Pod", None, "10"),
        ("watch", "Pod", None, "11"),
        ("list", "Pod", None, "20"),
        ("watch", "Pod", None, "20"),
    ]
    assert (loop.lists, loop.errors) == (2, 0)
    assert names(attributor, "10.0.0.1", "10.0.0.2") == [None, "b"]


def test_an_error_mid_watch_is_retried_with_a_fresh_list() -> None:
    attributor = Attributor(AttributionConfig(deleted_pod_grace_seconds=0))
    a = pod("a", "10.0.0.1", created_ms=T0)
    source = FakeObjectSource(
        lists=[ObjectList([a], "10"), ObjectList([a], "30")],
        watches=[WatchScript([WatchEvent("DELETED", a)], then=ConnectionResetError("reset by peer"))],
    )
    loop = reflector(source, attributor)
    loop.run()
    assert [c[0] for c in source.calls] == ["list", "watch", "list", "watch"]
    assert loop.errors == 1
    assert names(attributor, "10.0.0.1") == ["a"]  # the relist says a lives: it is back


def test_owner_events_feed_the_owner_chain() -> None:
    attributor = Attributor(AttributionConfig())
    attributor.index.upsert_pod(pod("p", "10.0.0.3", created_ms=T0, owner=("ReplicaSet", "web-1")), T0)
    source = FakeObjectSource(
        lists=[ObjectList([], "1")],
        watches=[WatchScript([WatchEvent("ADDED", owned("ReplicaSet", "web-1", ("Deployment", "web")))])],
    )
    reflector(source, attributor, "ReplicaSet").run()
    found = dict(attributor.attribute("10.0.0.3", None, None, T0 + 6000).attributes)
    assert found["k8s.deployment.name"] == "web"
    source2 = FakeObjectSource(
        lists=[ObjectList([owned("ReplicaSet", "web-1", ("Deployment", "web"))], "2")],
        watches=[WatchScript([WatchEvent("DELETED", owned("ReplicaSet", "web-1", ("Deployment", "web")))])],
    )
    reflector(source2, attributor, "ReplicaSet").run()
    assert "k8s.deployment.name" not in dict(attributor.attribute("10.0.0.3", None, None, T0 + 6000).attributes)
