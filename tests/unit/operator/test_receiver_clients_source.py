"""ApiServerProxySource, the real way the operator reads receiver registries, against a stand-in API server on
loopback: the pods it picks (the receiver's selector labels, Running and Ready only), the token it reads, the
pod proxy URL it calls with the token in X-Kct-Read-Token (the API server keeps Authorization), its errors."""

from __future__ import annotations

import base64
import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from kubernetes import client

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


class _ApiServer(BaseHTTPRequestHandler):
    seen: ClassVar[list[tuple[str, dict[str, str]]]] = []

    def do_GET(self) -> None:
        _ApiServer.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
        status, body = ROUTES.get(self.path.split("?")[0], (404, {"message": "not found"}))
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def source() -> Iterator[ApiServerProxySource]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ApiServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{server.server_address[1]}"
    configuration.api_key = {"authorization": "operator-token"}
    configuration.api_key_prefix = {"authorization": "Bearer"}
    _ApiServer.seen.clear()
    yield ApiServerProxySource(client.ApiClient(configuration))
    server.shutdown()
    thread.join()


def test_every_ready_replica_is_asked_through_the_pod_proxy_with_the_read_token(source: ApiServerProxySource) -> None:
    """Given a receiver with two ready pods (one refusing the proxy), one unready and one pending, When the
    operator reads it, Then the ready pods are found by the receiver's selector labels, each is asked through
    the API server's pod proxy with the Secret's token in X-Kct-Read-Token and the operator's own credentials
    in Authorization, the answer is kept and the refusal is reported."""
    receiver = ReceiverRef.from_body({"metadata": {"namespace": "kafka", "name": "telemetry"}, "spec": {}})

    read = read_receiver(source, receiver)

    assert read.documents == [DOCUMENT]
    assert len(read.problems) == 1 and "telemetry-receiver-b" in read.problems[0] and "403" in read.problems[0]
    listing = next(path for path, _ in _ApiServer.seen if path.startswith("/api/v1/namespaces/kafka/pods?"))
    selector = urllib.parse.parse_qs(urllib.parse.urlsplit(listing).query)["labelSelector"][0]
    assert set(selector.split(",")) == {"app.kubernetes.io/name=kct-receiver", "app.kubernetes.io/instance=telemetry",
                                        "app.kubernetes.io/component=receiver"}
    proxied = {path: headers for path, headers in _ApiServer.seen if "/proxy/" in path}
    assert sorted(proxied) == ["/api/v1/namespaces/kafka/pods/https:telemetry-receiver-a:4318/proxy/v1/clients",
                               "/api/v1/namespaces/kafka/pods/https:telemetry-receiver-b:4318/proxy/v1/clients"]
    for headers in proxied.values():
        assert headers["x-kct-read-token"] == "s3cret"
        assert headers["authorization"] == "Bearer operator-token"


def test_a_missing_token_secret_is_a_problem_not_a_crash(source: ApiServerProxySource) -> None:
    """Given a receiver whose token Secret does not exist, When it is read, Then nothing is asked and the
    problem names the receiver."""
    receiver = ReceiverRef.from_body({"metadata": {"namespace": "kafka", "name": "telemetry"},
                                      "spec": {"receiver": {"auth": {"tokenSecretRef": {"name": "gone"}}}}})

    read = read_receiver(source, receiver)

    assert read.documents == [] and len(read.problems) == 1 and read.problems[0].startswith("kafka/telemetry: ")
    assert not [path for path, _ in _ApiServer.seen if "/proxy/" in path]


def test_the_proxy_scheme_follows_the_receivers_tls_mode() -> None:
    """Given receivers serve TLS unless told otherwise, Then the pod proxy is asked over https by default and
    over http only for `spec.receiver.tls.mode: disabled` (an http request to a TLS listener gets no answer)."""
    meta = {"namespace": "kafka", "name": "telemetry"}

    def scheme(tls: dict[str, str]) -> str:
        return ReceiverRef.from_body({"metadata": meta, "spec": {"receiver": {"tls": tls}}}).scheme

    assert ReceiverRef.from_body({"metadata": meta, "spec": {}}).scheme == "https"
    assert scheme({"mode": "issued"}) == "https"
    assert scheme({"mode": "disabled"}) == "http"
