"""ApiServerProxySource, the real way the operator reads receiver registries, against a stand-in API server on
loopback: the pods it picks (the receiver's selector labels, Running and Ready only), the token it reads, the
pod proxy URL it calls with the token in X-Kct-Read-Token (the API server keeps Authorization), its errors."""

from __future__ import annotations

import base64
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from stand_in_api_server import StandInApiServer, stand_in_api_server

from kct.controller.receiver_clients import ApiServerProxySource, ReceiverRef, read_receiver


def _pod(name: str, phase: str, ready: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"phase": phase, "conditions": [{"type": "Ready", "status": ready}]}}


DOCUMENT = {"receiver": "telemetry-receiver-a", "now_ms": 1, "clients": [], "tracked": 0, "evicted": 0, "expired": 0}
ROUTES: dict[str, tuple[int, Any]] = {
    "/api/v1/namespaces/kafka/pods": (200, {"kind": "PodList", "apiVersion": "v1", "items": [
        _pod("telemetry-receiver-b", "Running", "True"), _pod("telemetry-receiver-a", "Running", "True"),
        _pod("telemetry-receiver-c", "Running", "False"), _pod("telemetry-receiver-d", "Pending", "False"),
    ]}),
    "/api/v1/namespaces/kafka/secrets/telemetry-token":
        (200, {"kind": "Secret", "apiVersion": "v1", "metadata": {"name": "telemetry-token"},
               "data": {"token": base64.b64encode(b"s3cret\n").decode()}}),
    "/api/v1/namespaces/kafka/pods/https:telemetry-receiver-a:4318/proxy/v1/clients": (200, DOCUMENT),
    "/api/v1/namespaces/kafka/pods/https:telemetry-receiver-b:4318/proxy/v1/clients":
        (403, {"kind": "Status", "message": "pods \"telemetry-receiver-b\" is forbidden: cannot get pods/proxy"}),
}


@pytest.fixture
def api_server() -> Iterator[StandInApiServer]:
    with stand_in_api_server(ROUTES) as served:
        yield served


@pytest.fixture
def source(api_server: StandInApiServer) -> ApiServerProxySource:
    configuration = client.Configuration()
    configuration.host = api_server.url
    configuration.api_key = {"authorization": "operator-token"}
    configuration.api_key_prefix = {"authorization": "Bearer"}
    return ApiServerProxySource(client.ApiClient(configuration))


def test_every_ready_replica_is_asked_through_the_pod_proxy_with_the_read_token(
    source: ApiServerProxySource, api_server: StandInApiServer
) -> None:
    """Given a receiver with two ready pods (one refusing the proxy), one unready and one pending, When the
    operator reads it, Then the ready pods are found by the receiver's selector labels, each is asked through
    the API server's pod proxy with the Secret's token in X-Kct-Read-Token and the operator's own credentials
    in Authorization, the answer is kept and the refusal is reported."""
    receiver = ReceiverRef.from_body({"metadata": {"namespace": "kafka", "name": "telemetry"}, "spec": {}})

    read = read_receiver(source, receiver)

    assert read.documents == [DOCUMENT]
    assert len(read.problems) == 1 and "telemetry-receiver-b" in read.problems[0] and "403" in read.problems[0]
    listing = next(path for path, _ in api_server.seen if path.startswith("/api/v1/namespaces/kafka/pods?"))
    selector = urllib.parse.parse_qs(urllib.parse.urlsplit(listing).query)["labelSelector"][0]
    assert set(selector.split(",")) == {"app.kubernetes.io/name=kct-receiver", "app.kubernetes.io/instance=telemetry",
                                        "app.kubernetes.io/component=receiver"}
    proxied = {path: headers for path, headers in api_server.seen if "/proxy/" in path}
    assert sorted(proxied) == ["/api/v1/namespaces/kafka/pods/https:telemetry-receiver-a:4318/proxy/v1/clients",
                               "/api/v1/namespaces/kafka/pods/https:telemetry-receiver-b:4318/proxy/v1/clients"]
    for headers in proxied.values():
        assert headers["x-kct-read-token"] == "s3cret"
        assert headers["authorization"] == "Bearer operator-token"


def test_a_missing_token_secret_is_a_problem_not_a_crash(source: ApiServerProxySource,
                                                        api_server: StandInApiServer) -> None:
    """Given a receiver whose token Secret does not exist, When it is read, Then nothing is asked and the
    problem names the receiver."""
    receiver = ReceiverRef.from_body({"metadata": {"namespace": "kafka", "name": "telemetry"},
                                      "spec": {"receiver": {"auth": {"tokenSecretRef": {"name": "gone"}}}}})

    read = read_receiver(source, receiver)

    assert read.documents == [] and len(read.problems) == 1 and read.problems[0].startswith("kafka/telemetry: ")
    assert not [path for path, _ in api_server.seen if "/proxy/" in path]


def test_the_proxy_scheme_follows_the_receivers_tls_mode() -> None:
    """Given receivers serve TLS unless told otherwise, Then the pod proxy is asked over https by default and
    over http only for `spec.receiver.tls.mode: disabled` (an http request to a TLS listener gets no answer)."""
    meta = {"namespace": "kafka", "name": "telemetry"}

    def scheme(tls: dict[str, str]) -> str:
        return ReceiverRef.from_body({"metadata": meta, "spec": {"receiver": {"tls": tls}}}).scheme

    assert ReceiverRef.from_body({"metadata": meta, "spec": {}}).scheme == "https"
    assert scheme({"mode": "issued"}) == "https"
    assert scheme({"mode": "disabled"}) == "http"
