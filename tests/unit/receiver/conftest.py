"""A real receiver (aiohttp on a free loopback port) over an in-memory sink, and a small client."""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
import zstandard
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from kct.receiver.config import ReceiverConfig, parse_receiver_config
from kct.receiver.server import ReceiverServer
from kct.receiver.sink import MemorySink
from kct.receiver.tokens import BearerTokens

TOKEN = "test-token"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"


def base_config(**sections: Any) -> ReceiverConfig:
    doc: dict[str, Any] = {
        "listen": {"host": "127.0.0.1", "port": 0},
        "auth": {"bearerTokenEnv": "UNUSED_IN_TESTS"},
        "kafka": {"bootstrapServers": "unused:9092", "topic": "client-telemetry"},
        "logging": {"level": "WARNING"},
    }
    doc.update(sections)
    return parse_receiver_config(doc)


def make_request(
    points: int = 3,
    *,
    resource: Mapping[str, str] | None = None,
    point_attributes: Mapping[str, str] | None = None,
    name: str = "org.apache.kafka.producer.queue.bytes",
) -> ExportMetricsServiceRequest:
    req = ExportMetricsServiceRequest()
    rm = req.resource_metrics.add()
    for key, value in (resource or {"client_rack": "r1"}).items():
        kv = rm.resource.attributes.add()
        kv.key, kv.value.string_value = key, value
    sm = rm.scope_metrics.add()
    sm.scope.name = "librdkafka"
    metric = sm.metrics.add()
    metric.name = name
    for i in range(points):
        dp = metric.gauge.data_points.add()
        dp.time_unix_nano = 1_700_000_000_000_000_000 + i
        dp.as_int = i
        for key, value in (point_attributes or {"topic": "orders"}).items():
            kv = dp.attributes.add()
            kv.key, kv.value.string_value = key, value
    return req


def encode(body: bytes, encoding: str) -> bytes:
    if encoding == "gzip":
        return gzip.compress(body)
    if encoding == "zstd":
        return zstandard.ZstdCompressor().compress(body)
    return body


@dataclass
class Reply:
    status: int
    headers: Mapping[str, str]
    body: bytes


@dataclass
class Receiver:
    server: ReceiverServer
    sink: MemorySink
    session: aiohttp.ClientSession

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    async def post(
        self,
        body: bytes | Any,
        *,
        content_type: str = PROTOBUF,
        encoding: str = "",
        token: str | None = TOKEN,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        h = {"Content-Type": content_type}
        if encoding:
            h["Content-Encoding"] = encoding
        if token is not None:
            h["Authorization"] = f"Bearer {token}"
        h.update(headers or {})
        async with self.session.post(f"{self.url}/v1/metrics", data=body, headers=h) as resp:
            return Reply(resp.status, dict(resp.headers), await resp.read())

    async def get(self, path: str) -> Reply:
        async with self.session.get(f"{self.url}{path}") as resp:
            return Reply(resp.status, dict(resp.headers), await resp.read())


ReceiverFactory = Callable[..., Awaitable[Receiver]]


@pytest.fixture
async def make_receiver() -> AsyncIterator[ReceiverFactory]:
    started: list[Receiver] = []

    async def factory(config: ReceiverConfig | None = None, token: str | BearerTokens | None = TOKEN) -> Receiver:
        sink = MemorySink()
        server = ReceiverServer(config or base_config(), sink, token=token)
        await server.start()
        session = aiohttp.ClientSession(auto_decompress=False)
        receiver = Receiver(server, sink, session)
        started.append(receiver)
        return receiver

    yield factory
    for receiver in started:
        await receiver.session.close()
        if not receiver.server.draining:
            await receiver.server.stop()


@pytest.fixture
async def receiver(make_receiver: ReceiverFactory) -> Receiver:
    return await make_receiver()
