"""The HTTP face of the receiver (aiohttp): OTLP/HTTP `POST /v1/metrics`, `/healthz`, `/readyz`, `/metrics`,
and `GET /v1/clients` (the clients seen lately, for `kubectl kct`; the push token guards it, see below).

Answers follow the OTLP/HTTP specification: 200 with an ExportMetricsServiceResponse (partial_success when
points were dropped) in the request's content type; errors carry a google.rpc.Status in that content type;
429 and 503 carry Retry-After. The handler only checks what needs no body (token, content type and
encoding, declared length, admission), reads the body with a hard cap, and hands the rest to `Pipeline`.
The lean path screens a head with the same checks (`screen_head`) before it reads a body that is not all
there yet, and bounds connections (`connections` in the config; kct.receiver.ingest says how).

aiohttp's own request decompression is switched off (`auto_decompress=False`): it would inflate a bomb
before we could cap it. Every connection is accepted by the lean ingest protocol (`kct.receiver.ingest`),
which answers plain pushes itself and hands anything else to aiohttp. Why: the receiver's README ("The
per-push path"), measured with `bench/receiver_throughput.py --compare-http`.

`GET /v1/clients` names clients, principals and pods, so it takes the same tokens as pushes (whoever may push
is a broker, trusted with those already): in `Authorization: Bearer`, or in `X-Kct-Read-Token` for a reader
going through the API server's service proxy, which consumes `Authorization` itself (kct.otlp.clients_doc).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from kct.otlp.clients_doc import CLIENTS_ROUTE, READ_TOKEN_HEADER
from kct.receiver.accesslog import PushAccessLog
from kct.receiver.codec import Negotiated, encode_export_response, encode_status, negotiate, response_format
from kct.receiver.config import ReceiverConfig
from kct.receiver.errors import (
    BadRequest,
    PayloadTooLarge,
    PushRejected,
    RequestTimeout,
    Unauthorized,
    Unavailable,
)
from kct.receiver.ingest import Answer, ConnectionBudget, ConnectionDeadlines, LeanIngestProtocol
from kct.receiver.pipeline import Pipeline, Push
from kct.receiver.sink import Sink
from kct.receiver.telemetry import CONTENT_TYPE_LATEST, Telemetry
from kct.receiver.tls import TlsReloader, build_ssl_context, certificate_identity
from kct.receiver.tokens import BearerTokens

__all__ = ["ReceiverServer", "build_ssl_context"]

log = logging.getLogger(__name__)

ROUTE = "/v1/metrics"


class ReceiverServer:
    """Owns the pipeline, the aiohttp application and the lifecycle (start, drain on SIGTERM, stop)."""

    def __init__(
        self,
        config: ReceiverConfig,
        sink: Sink,
        *,
        token: str | BearerTokens | None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.config = config
        self.sink = sink
        self.telemetry = telemetry or Telemetry(config.observability, config.kafka.topic)
        self.pipeline = Pipeline(config, sink, self.telemetry)
        self.tokens = BearerTokens(token) if isinstance(token, str) else token
        tls = config.listen.tls
        # mTLS: the certificate is the sender's identity; else the broker's `kct-principal` header is believed
        # only from a sender that proved it holds the token (kct.receiver.tls, docs/security.md).
        self.mtls = tls is not None and tls.client_ca_file is not None
        self.pipeline.principal_from = "certificate" if self.mtls else "header" if self.tokens is not None else "none"
        self.tls_reloader: TlsReloader | None = None
        self.draining = False
        self._runner: web.AppRunner | None = None
        self._lean_server: asyncio.Server | None = None
        self.connection_deadlines = ConnectionDeadlines(config)
        self.connection_budget = ConnectionBudget()
        self._tasks: list[asyncio.Task[None]] = []
        self.port: int | None = None
        self._refusal_log: dict[str, tuple[float, int]] = {}
        self._parser_refusals = _ParserRefusalLog(self)
        self.telemetry.track_sink(sink.inflight, sink.ready)
        budget = self.connection_budget
        self.telemetry.track_connections(lambda: budget.open, lambda: budget.buffered)
        admission = self.pipeline.admission
        self.telemetry.track_admission(lambda: admission.queued)
        self.app = self._build_app()

    # -- application -----------------------------------------------------------------------------
    def _build_app(self) -> web.Application:
        app = web.Application(client_max_size=self.config.limits.max_compressed_bytes)
        # Only pushes the lean ingest path hands over reach this route (chunked bodies, Expect, odd heads):
        # plain ones are answered before aiohttp sees them. Same handler (`handle_push`) either way.
        app.router.add_post(ROUTE, self._post_metrics)
        app.router.add_get(CLIENTS_ROUTE, self._clients)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get(self.config.observability.metrics_path, self._prometheus)
        return app

    async def _read_body(self, request: web.Request) -> bytes:
        limit = self.config.limits.max_compressed_bytes
        try:
            return await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise PayloadTooLarge(
                "compressed_too_large", f"body exceeds limits.maxCompressedBytes ({limit} bytes)"
            ) from None
        except ConnectionError:
            # The sender closed (or half-closed: aiohttp closes on EOF) before the declared body arrived.
            raise BadRequest(
                "incomplete_body", "the connection closed before the request body was complete"
            ) from None

    def peer_principal(self, cert: Any) -> str | None:
        """The identity of a connection's verified client certificate (`getpeercert()`), None without mTLS, without
        a certificate or when its subject is not in `listen.tls.allowedSubjects`."""
        tls = self.config.listen.tls
        if not self.mtls or tls is None:
            return None
        return certificate_identity(cert, tls.allowed_subjects)

    def _request_peer(self, request: web.Request) -> str | None:
        transport = request.transport
        return self.peer_principal(transport.get_extra_info("peercert")) if transport is not None else None

    async def _post_metrics(self, request: web.Request) -> web.StreamResponse:
        answer = await self.handle_push(
            request.headers, request.content_length, lambda: self._read_body(request), self._request_peer(request)
        )
        return web.Response(status=answer.status, body=answer.body, content_type=answer.content_type,
                            headers=dict(answer.headers) if answer.headers else None)

    async def handle_push(
        self,
        headers: Mapping[str, str],
        declared_length: int | None,
        read_body: Callable[[], Awaitable[bytes]],
        peer_principal: str | None,
        arrived: float | None = None,
    ) -> Answer:
        """One `POST /v1/metrics`, whichever HTTP layer read it (`headers` answer lower-case names). `arrived`:
        when the request was whole (time.monotonic(); None: now), from which its wait for a turn counts
        (kct.receiver.admission)."""
        tel = self.telemetry
        started = time.perf_counter()
        tel.active_add(1)
        status, size = 500, -1
        fmt = response_format(headers.get("content-type"))
        try:
            try:
                negotiated = self._check_head(headers, declared_length, peer_principal)
                fmt = negotiated.fmt
                content_type = headers.get("content-type", "")
                content_encoding = headers.get("content-encoding", "")
                admission = self.pipeline.admission
                await admission.enter(arrived)
                try:
                    body = await read_body()
                    size = len(body)
                    outcome = await self.pipeline.process(
                        Push(headers, body, negotiated, content_type, content_encoding, peer_principal)
                    )
                finally:
                    admission.leave()
                status = 200
                return Answer(200, encode_export_response(fmt, outcome.rejected_data_points, outcome.error_message),
                              negotiated.response_content_type)
            except PushRejected as exc:
                status = exc.status
                tel.rejected(exc.reason, status)
                if status >= 500:
                    self._warn_refused(exc)
                return _error_answer(fmt, exc)
        except Exception:
            log.exception("unexpected error handling a push")
            tel.rejected("internal_error", 500)
            return Answer(500, encode_status(fmt, 500, "internal error"), _content_type(fmt))
        finally:
            tel.active_add(-1)
            tel.request_done("POST", ROUTE, status, time.perf_counter() - started, size)

    def _check_head(self, headers: Mapping[str, str], declared_length: int | None,
                    peer_principal: str | None) -> Negotiated:
        """What the head alone decides (client certificate, token, content type and encoding, draining, declared
        length): raises the PushRejected, else the negotiated formats."""
        if self.mtls and peer_principal is None:
            raise Unauthorized("client_certificate", "a client certificate signed by the client CA, with an "
                               "allowed subject, is required")
        if self.tokens is not None:
            _authenticate(headers, self.tokens)
        negotiated = negotiate(headers.get("content-type", ""), headers.get("content-encoding", ""))
        if self.draining:
            raise Unavailable("draining", "the receiver is shutting down", retry_after_s=1)
        limit = self.config.limits.max_compressed_bytes
        if declared_length is not None and declared_length > limit:
            raise PayloadTooLarge(
                "compressed_too_large",
                f"Content-Length {declared_length} exceeds limits.maxCompressedBytes ({limit} bytes)",
            )
        return negotiated

    def screen_head(self, headers: Mapping[str, str], declared_length: int,
                    peer_principal: str | None = None) -> Answer | None:
        """The lean path's check of a head whose body is still to come: the refusal `handle_push` would give
        from the head alone (counted the same way), or None."""
        try:
            self._check_head(headers, declared_length, peer_principal)
        except PushRejected as exc:
            self.telemetry.rejected(exc.reason, exc.status)
            self.telemetry.request_done("POST", ROUTE, exc.status, 0.0, -1)
            if exc.status >= 500:
                self._warn_refused(exc)
            return _error_answer(response_format(headers.get("content-type")), exc)
        return None

    def connection_closed(self, reason: str) -> Answer:
        """Count a connection the lean path closes (ingest.PushHandler) and give what to answer first:
        503 with Retry-After when over a cap, 408 on a header or body timeout."""
        self.telemetry.connection_closed(reason)
        if reason.endswith("_limit"):
            exc: PushRejected = Unavailable(
                reason, f"too many connections or buffered bytes ({reason}); retry later",
                retry_after_s=self.config.limits.overload_retry_after_seconds,
            )
            self._warn_refused(exc)
        else:
            exc = RequestTimeout(reason, f"the request did not arrive in time ({reason})")
        return _error_answer("protobuf", exc)

    def parser_refused(self, exc: HttpProcessingError) -> None:
        """aiohttp's HTTP parser refused a request (it answers 400 itself): count it, log it throttled."""
        status = exc.code or 400
        self.telemetry.rejected("bad_http", status)
        self._warn_refused(BadRequest("bad_http", f"malformed HTTP request: {exc.message}"), status=status)

    def _warn_refused(self, exc: PushRejected, *, status: int | None = None) -> None:
        """Log server-side refusals (503) and malformed HTTP at most once per second per reason, with how many
        were skipped: during a Kafka outage, or from a broken or hostile sender, there can be thousands per
        second."""
        now = time.monotonic()
        last, skipped = self._refusal_log.get(exc.reason, (0.0, 0))
        if now - last < 1.0:
            self._refusal_log[exc.reason] = (last, skipped + 1)
            return
        self._refusal_log[exc.reason] = (now, 0)
        log.warning("push refused", extra={"reason": exc.reason, "status": status or exc.status, "error": exc.message,
                                            "similar_refusals_not_logged": skipped})

    async def _clients(self, request: web.Request) -> web.Response:
        if self.mtls and self._request_peer(request) is None:
            return web.json_response({"error": "a client certificate with an allowed subject is required"}, status=401)
        if self.tokens is not None and not _reader_authenticated(request.headers, self.tokens):
            return web.json_response(
                {"error": f"missing or invalid token (Authorization: Bearer, or {READ_TOKEN_HEADER})"},
                status=401, headers={"WWW-Authenticate": 'Bearer realm="kct-receiver"'},
            )
        return web.json_response(self.pipeline.clients.document(time.time_ns() // 1_000_000))

    async def _healthz(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, _request: web.Request) -> web.Response:
        if self.draining:
            return web.Response(status=503, text="draining\n")
        if not self.sink.ready():
            reason = getattr(self.sink, "ready_reason", "sink not ready")
            return web.Response(status=503, text=f"not ready: {reason}\n")
        return web.Response(text="ready\n")

    async def _prometheus(self, _request: web.Request) -> web.Response:
        body = self.telemetry.render()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        """Connect the sink, then listen. `self.port` is the bound port (useful with port 0)."""
        cfg = self.config
        await self.sink.start()
        self.pipeline.quotas.reload_if_changed()
        logging.getLogger("aiohttp.server").addFilter(self._parser_refusals)
        runner_kwargs: dict[str, Any] = {
            "handle_signals": False,
            "auto_decompress": False,  # we decompress ourselves, with a cap
            "keepalive_timeout": cfg.connections.idle_timeout_ms / 1000.0,
            "shutdown_timeout": cfg.shutdown.drain_timeout_ms / 1000.0,
        }
        if not cfg.logging.access_log:
            runner_kwargs["access_log"] = None
        self._runner = web.AppRunner(self.app, **runner_kwargs)
        await self._runner.setup()
        ssl_context = build_ssl_context(cfg.listen.tls) if cfg.listen.tls is not None else None
        server = self._lean_server = await self._start_lean(ssl_context)
        if cfg.listen.tls is not None and ssl_context is not None:
            self.tls_reloader = TlsReloader(cfg.listen.tls, ssl_context)
            self._tasks.append(asyncio.create_task(self._reload_tls_forever(), name="kct-tls-reload"))
        sockets = server.sockets
        self.port = sockets[0].getsockname()[1] if sockets else cfg.listen.port
        if cfg.quotas.overrides_file is not None:
            self._tasks.append(asyncio.create_task(self._reload_quotas_forever(), name="kct-quota-reload"))
        log.info("receiver listening", extra={"host": cfg.listen.host, "port": self.port,
                                               "tls": ssl_context is not None, "topic": cfg.kafka.topic})

    async def _start_lean(self, ssl_context: ssl.SSLContext | None) -> asyncio.Server:
        """Listen with the lean ingest protocol in front of aiohttp's request handler (ingest.py)."""
        assert self._runner is not None and self._runner.server is not None
        cfg = self.config
        factory, deadlines, budget = self._runner.server, self.connection_deadlines, self.connection_budget
        # aiohttp logs what it serves (runner_kwargs above); the pushes answered here log themselves.
        access_log = PushAccessLog() if cfg.logging.access_log else None
        self._tasks.append(asyncio.create_task(deadlines.run(), name="kct-connection-deadlines"))
        return await asyncio.get_running_loop().create_server(
            lambda: LeanIngestProtocol(self, factory, deadlines, budget, access_log),
            cfg.listen.host,
            cfg.listen.port,
            ssl=ssl_context,
            backlog=cfg.listen.backlog,
            reuse_port=cfg.listen.reuse_port or None,
        )

    async def _drain_lean(self) -> None:
        """Stop listening, close idle lean connections, give the pushes in flight the drain timeout."""
        if self._lean_server is None:
            return
        self._lean_server.close()
        deadline = time.monotonic() + self.config.shutdown.drain_timeout_ms / 1000.0
        connections = self.connection_deadlines.connections
        while connections and time.monotonic() < deadline:
            self.connection_deadlines.sweep(time.monotonic())  # its task is cancelled; the timeouts still hold
            for protocol in list(connections):
                if protocol.idle:
                    protocol.close()
            await asyncio.sleep(0.05)
        for protocol in list(connections):
            protocol.close()

    async def _reload_tls_forever(self) -> None:
        assert self.tls_reloader is not None and self.config.listen.tls is not None
        interval = self.config.listen.tls.reload_interval_ms / 1000.0
        while True:
            await asyncio.sleep(interval)
            try:
                # Hashing two small files: cheaper than a thread hop, so on the loop.
                self.tls_reloader.reload_if_changed()
            except Exception:
                log.exception("TLS reload crashed")

    async def _reload_quotas_forever(self) -> None:
        interval = self.config.quotas.reload_interval_ms / 1000.0
        while True:
            await asyncio.sleep(interval)
            try:
                self.pipeline.quotas.reload_if_changed()
            except Exception:
                log.exception("quota overrides reload crashed")

    async def stop(self) -> None:
        """Drain: refuse new pushes, stop listening, let in-flight pushes finish, flush the producer."""
        self.draining = True
        log.info("draining", extra={"inflight": self.pipeline.admission.requests})
        for task in self._tasks:
            task.cancel()
        await self._drain_lean()
        if self._runner is not None:
            await self._runner.cleanup()
        await self.sink.close(self.config.shutdown.drain_timeout_ms / 1000.0)
        logging.getLogger("aiohttp.server").removeFilter(self._parser_refusals)
        log.info("stopped")

    async def run_until_signalled(self) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await self.start()
        await stop.wait()
        await self.stop()


class _ParserRefusalLog(logging.Filter):
    """aiohttp logs every request its HTTP parser refuses (bad request line, header, chunk, Content-Length;
    answered 400 by aiohttp itself) at ERROR with a traceback, so any sender could flood the log. This filter
    on the `aiohttp.server` logger turns those into a counted rejection (reason `bad_http`) and a throttled
    one-line warning; every other aiohttp record passes."""

    def __init__(self, server: ReceiverServer) -> None:
        super().__init__()
        self._server = server

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError) and (exc.code or 400) < 500:
            self._server.parser_refused(exc)
            return False
        return True


def _authenticate(headers: Mapping[str, str], tokens: BearerTokens) -> None:
    scheme, _, presented = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not tokens.accepts(presented.strip().encode()):
        raise Unauthorized("unauthenticated", "missing or invalid bearer token")


def _reader_authenticated(headers: Mapping[str, str], tokens: BearerTokens) -> bool:
    read_token = headers.get(READ_TOKEN_HEADER)
    if read_token is not None:
        return tokens.accepts(read_token.strip().encode())
    scheme, _, presented = headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and tokens.accepts(presented.strip().encode())


def _error_answer(fmt: str, exc: PushRejected) -> Answer:
    headers: list[tuple[str, str]] = []
    if exc.retry_after_s is not None:
        headers.append(("Retry-After", str(exc.retry_after_s)))
    if exc.status == 401:
        headers.append(("WWW-Authenticate", 'Bearer realm="kct-receiver"'))
    return Answer(exc.status, encode_status(fmt, exc.status, exc.message), _content_type(fmt), tuple(headers))


def _content_type(fmt: str) -> str:
    return "application/json" if fmt == "json" else "application/x-protobuf"
