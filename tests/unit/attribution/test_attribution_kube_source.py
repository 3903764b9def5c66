"""The Kubernetes source's requests and its reading of a watch stream, over a stand-in for the API client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from kct.attribution.kube_source import KubeObjectSource, watched_namespaces
from kct.attribution.watch import Gone


class _Response:
    def __init__(self, chunks: list[bytes]) -> None:
        self.data = b"".join(chunks)
        self.chunks = chunks
        self.released = False

    def stream(self, _amt: int, decode_content: bool) -> Iterator[bytes]:
        assert decode_content
        yield from self.chunks

    def release_conn(self) -> None:
        self.released = True


class _Api:
    def __init__(self, response: _Response) -> None:
        self.response = response
        self.requests: list[tuple[str, dict[str, str], list[tuple[str, str]]]] = []

    def call_api(self, path: str, method: str, **kwargs: Any) -> _Response:
        assert method == "GET"
        self.requests.append((path, kwargs["header_params"], kwargs["query_params"]))
        return self.response


def test_replicasets_are_listed_as_metadata_only_and_pods_whole() -> None:
    api = _Api(_Response([json.dumps({"metadata": {"resourceVersion": "7"}, "items": [{"metadata": {}}]}).encode()]))
    source = KubeObjectSource(api)
    listed = source.list("ReplicaSet", "shop")
    source.list("Pod", None)
    assert (listed.resource_version, len(listed.items)) == ("7", 1)
    (rs_path, rs_headers, _), (pod_path, pod_headers, _) = api.requests
    assert rs_path == "/apis/apps/v1/namespaces/shop/replicasets"
    assert rs_headers["Accept"] == "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
    assert (pod_path, pod_headers["Accept"]) == ("/api/v1/pods", "application/json")


def test_a_watch_stream_split_anywhere_gives_whole_events_then_gone() -> None:
    lines = (
        json.dumps({"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "8"}}}) + "\n"
        + json.dumps({"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}) + "\n"
    ).encode()
    response = _Response([lines[:17], lines[17:60], lines[60:]])
    api = _Api(response)
    events = KubeObjectSource(api).watch("Job", None, "5")
    first = next(events)
    assert (first.type, first.resource_version) == ("ADDED", "8")
    with pytest.raises(Gone):
        next(events)
    assert response.released
    path, headers, query = api.requests[0]
    assert path == "/apis/batch/v1/jobs"
    assert headers["Accept"] == "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
    assert ("resourceVersion", "5") in query and ("watch", "true") in query


def test_namespaces_default_to_the_receiver_s_own_and_star_means_all() -> None:
    assert watched_namespaces((), "observability") == ("observability",)
    assert watched_namespaces(("a", "b"), "observability") == ("a", "b")
    assert watched_namespaces(("a", "*"), "observability") == (None,)
