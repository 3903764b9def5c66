"""The Kubernetes source's requests and its reading of a watch stream, over an in-memory transport."""

from __future__ import annotations

import io
import json

import pytest

from kct.attribution.kube_source import ApiError, KubeObjectSource, watched_namespaces
from kct.attribution.watch import Gone


class _Transport:
    """Answers every GET with `body` (a 200), or raises `error`; records what was asked."""

    def __init__(self, body: bytes = b"", error: Exception | None = None) -> None:
        self.body, self.error = body, error
        self.requests: list[tuple[str, str]] = []
        self.closed = 0

    def get(self, path: str, accept: str, timeout_s: float) -> io.BytesIO:
        assert timeout_s > 0
        self.requests.append((path, accept))
        if self.error is not None:
            raise self.error
        transport = self

        class _Body(io.BytesIO):
            def close(self) -> None:
                transport.closed += 1
                super().close()

        return _Body(self.body)


def test_replicasets_are_listed_as_metadata_only_and_pods_whole() -> None:
    transport = _Transport(json.dumps({"metadata": {"resourceVersion": "7"}, "items": [{"metadata": {}}]}).encode())
    source = KubeObjectSource(transport)
    listed = source.list("ReplicaSet", "shop")
    source.list("Pod", None)
    assert (listed.resource_version, len(listed.items)) == ("7", 1)
    assert transport.requests == [
        ("/apis/apps/v1/namespaces/shop/replicasets",
         "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"),
        ("/api/v1/pods", "application/json"),
    ]
    assert transport.closed == 2


def test_a_watch_gives_events_line_by_line_then_gone() -> None:
    lines = (
        json.dumps({"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "8"}}}) + "\n"
        + json.dumps({"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}) + "\n"
    ).encode()
    transport = _Transport(lines)
    events = KubeObjectSource(transport).watch("Job", None, "5")
    first = next(events)
    assert (first.type, first.resource_version) == ("ADDED", "8")
    with pytest.raises(Gone):
        next(events)
    assert transport.closed == 1
    path, accept = transport.requests[0]
    assert path.startswith("/apis/batch/v1/jobs?watch=true&resourceVersion=5&")
    assert accept == "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"


def test_a_refusal_reaches_the_reflector_as_an_error() -> None:
    source = KubeObjectSource(_Transport(error=ApiError(403, "pods is forbidden")))
    with pytest.raises(ApiError, match="403"):
        source.list("Pod", "shop")


def test_namespaces_default_to_the_receiver_s_own_and_star_means_all() -> None:
    assert watched_namespaces((), "observability") == ("observability",)
    assert watched_namespaces(("a", "b"), "observability") == ("a", "b")
    assert watched_namespaces(("a", "*"), "observability") == (None,)
