"""Helpers for the broker-plugin end-to-end tests (not a test module, not fixtures).

- `otlp_endpoint(url, token=None)`: an OTLP/HTTP-shaped endpoint on the address the plugin posts to,
  recording every push (`Push`: path, headers, body, arrival time); with `token` (a function giving the
  token it accepts now) it answers 401 to any other bearer token, recording those in `refused`. Leaving the
  block closes it, connections included, so the plugin sees the endpoint down (connection refused).
- `client_metrics_subscription(bootstrap, name, configs)`: a CLIENT_METRICS resource for the block.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from helpers import wait_for_client_metrics
from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType, KafkaAdminClient
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

__all__ = ["Endpoint", "Push", "client_metrics_subscription", "otlp_endpoint"]


@dataclass(frozen=True)
class Push:
    path: str
    headers: dict[str, str]
    body: bytes
    received_at: float = 0.0  # time.time() when the endpoint read it

    def label(self, name: str) -> str | None:
        value = self.headers.get(name)
        return None if value is None else urllib.parse.unquote(value)

    def metric_names(self) -> set[str]:
        request = ExportMetricsServiceRequest.FromString(self.body)
        return {m.name for rm in request.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}

    def collected_at(self) -> float | None:
        """When the client collected this push: the newest data point's time_unix_nano, in seconds."""
        request = ExportMetricsServiceRequest.FromString(self.body)
        newest = 0
        for rm in request.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    kind = m.WhichOneof("data")
                    if kind is None:
                        continue
                    for point in getattr(m, kind).data_points:
                        newest = max(newest, point.time_unix_nano)
        return newest / 1e9 if newest else None


@dataclass
class Endpoint:
    pushes: list[Push] = field(default_factory=list)
    refused: list[Push] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def for_client(self, client_id: str) -> list[Push]:
        with self.lock:
            return [p for p in self.pushes if p.label("kct-client-id") == client_id]

    def snapshot(self) -> list[Push]:
        with self.lock:
            return list(self.pushes)


@contextlib.contextmanager
def otlp_endpoint(url: str, token: Callable[[], str] | None = None) -> Iterator[Endpoint]:
    """An OTLP/HTTP-shaped endpoint on the address the broker plugin posts to, recording every push."""
    parsed = urllib.parse.urlsplit(url)
    endpoint = Endpoint()
    # Keep-alive connections outlive server.shutdown() in their handler threads; closing them on exit keeps
    # the plugin's pooled connection from reaching this endpoint after the test (and from masking the next
    # listener on the same port).
    connections: set[socket.socket] = set()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the plugin expects

        def setup(self) -> None:
            super().setup()
            with endpoint.lock:
                connections.add(self.connection)

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            push = Push(self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.time())
            accepted = token is None or push.headers.get("authorization") == f"Bearer {token()}"
            with endpoint.lock:
                (endpoint.pushes if accepted else endpoint.refused).append(push)
            self.send_response(200 if accepted else 401)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    try:
        server = ThreadingHTTPServer((parsed.hostname or "127.0.0.1", parsed.port or 80), Handler)
    except OSError as exc:
        pytest.fail(f"cannot listen on the plugin's endpoint {url}: {exc} (another receiver still running?)")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield endpoint
    finally:
        server.shutdown()
        server.server_close()
        with endpoint.lock:
            for connection in connections:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def client_metrics_subscription(bootstrap: str, name: str, configs: dict[str, str]) -> Iterator[None]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kct-e2e-admin")
    try:
        # raise_on_unknown=False: kafka-python's pre-check describes the resource, and brokers before 4.0
        # describe a CLIENT_METRICS resource that does not exist yet as having no config keys at all.
        admin.alter_configs([ConfigResource(ConfigResourceType.CLIENT_METRICS, name, configs)], raise_on_unknown=False)
        wait_for_client_metrics(bootstrap, name, configs)
        yield
    finally:
        deletes = {key: (AlterConfigOp.DELETE, None) for key in configs}
        with contextlib.suppress(Exception):
            admin.alter_configs([ConfigResource(ConfigResourceType.CLIENT_METRICS, name, deletes)],
                                raise_on_unknown=False)
        admin.close()
