"""OTLP/HTTP behaviour of the receiver, end to end over a real socket, with an in-memory sink."""

from __future__ import annotations

import asyncio
import json
import re

from conftest import JSON, PROTOBUF, TOKEN, Receiver, ReceiverFactory, base_config, encode, make_request
from google.protobuf import json_format
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from waiting import eventually_async

from kct.otlp import labels as L


def _headers(record_headers: tuple[tuple[str, bytes], ...]) -> dict[str, str]:
    return {k: v.decode() for k, v in record_headers}


async def test_protobuf_push_is_stored_untouched_and_answered_200(receiver: Receiver) -> None:
    """Given a valid protobuf push with nothing private, when posted, then 200 with an empty
    ExportMetricsServiceResponse and one record whose value is the sender's exact bytes."""
    body = make_request().SerializeToString()
    reply = await receiver.post(body)
    assert reply.status == 200
    assert reply.headers["Content-Type"].startswith(PROTOBUF)
    assert ExportMetricsServiceResponse.FromString(reply.body) == ExportMetricsServiceResponse()
    assert len(receiver.sink.records) == 1
    record = receiver.sink.records[0]
    assert record.value == body
    headers = _headers(record.headers)
    assert headers[L.RECORD_META_MODIFIED] == "false"
    assert headers[L.RECORD_META_FORMAT] == "otlp_proto"
    assert headers[L.RECORD_META_DATA_POINTS] == "3"


async def test_gzip_and_zstd_pushes_are_decompressed(receiver: Receiver) -> None:
    """Given the same push gzip- and zstd-encoded, then both are stored as the uncompressed protobuf."""
    body = make_request().SerializeToString()
    for encoding in ("gzip", "zstd"):
        reply = await receiver.post(encode(body, encoding), encoding=encoding)
        assert reply.status == 200, reply.body
    assert [r.value for r in receiver.sink.records] == [body, body]


async def test_zstd_stream_with_a_2_mib_window_is_decompressed(receiver: Receiver) -> None:
    """Given a push compressed as librdkafka's zstd does (a streaming frame: no content size, a 2 MiB window,
    which Kafka 3.7 brokers hand to the plugin as they are), when posted with the default limits,
    then it is decompressed and stored: a declared window of a few MiB is ordinary, not a bomb."""
    import io

    import zstandard

    body = make_request().SerializeToString()
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=21)
    out = io.BytesIO()
    with zstandard.ZstdCompressor(compression_params=params).stream_writer(out, closefd=False) as writer:
        writer.write(body)
    frame = out.getvalue()
    assert frame[4] == 0 and frame[5] >> 3 == 21 - 10  # no content size; window 2^21
    reply = await receiver.post(frame, encoding="zstd")
    assert reply.status == 200, reply.body
    assert [r.value for r in receiver.sink.records] == [body]


async def test_json_push_is_stored_as_protobuf_and_answered_in_json(receiver: Receiver) -> None:
    """Given an OTLP/JSON push (camelCase, int64 as string, hex exemplar ids), then 200 JSON and the record
    holds the equivalent protobuf."""
    doc = {
        "resourceMetrics": [{
            "resource": {"attributes": [{"key": "client_instance_id", "value": {"stringValue": "abc"}}]},
            "scopeMetrics": [{"metrics": [{
                "name": "org.apache.kafka.consumer.fetch.latency",
                "sum": {"aggregationTemporality": 2, "isMonotonic": True, "dataPoints": [{
                    "asInt": "42", "timeUnixNano": "1700000000000000000",
                    "exemplars": [{"asInt": "1", "traceId": "5b8efff798038103d269b633813fc60c",
                                   "spanId": "eee19b7ec3c1b174"}],
                }]},
            }]}],
        }],
        "someFutureField": {"ignored": True},
    }
    reply = await receiver.post(json.dumps(doc).encode(), content_type=JSON)
    assert reply.status == 200, reply.body
    assert reply.headers["Content-Type"].startswith(JSON)
    assert json.loads(reply.body) == {}
    stored = ExportMetricsServiceRequest.FromString(receiver.sink.records[0].value)
    point = stored.resource_metrics[0].scope_metrics[0].metrics[0].sum.data_points[0]
    assert point.as_int == 42
    assert point.exemplars[0].trace_id.hex() == "5b8efff798038103d269b633813fc60c"
    assert receiver.sink.records[0].key == b"abc"


async def test_broker_labels_become_record_headers_and_key(receiver: Receiver) -> None:
    """Given the plugin's kct-* headers (one percent-encoded non-ASCII value), then the record is keyed by the
    client instance id and carries every label under its KIP-714 name, decoded."""
    labels = {
        "kct-client-instance-id": "Wh0AAAAAQAaXMNu7xq6j4w",
        "kct-client-id": L.encode_header_value("producteur-été"),
        "kct-client-software-name": "librdkafka",
        "kct-client-software-version": "2.16.0",
        "kct-client-source-address": "10.1.2.3",
        "kct-client-source-port": "40000",
        "kct-principal": "User:alice",
        "kct-broker-id": "1",
        "kct-listener": "PLAINTEXT",
        "kct-terminating": "false",
        "kct-push-interval-ms": "30000",
        "kct-payload-content-type": "application/x-protobuf",
    }
    reply = await receiver.post(make_request().SerializeToString(), headers=labels)
    assert reply.status == 200, reply.body
    record = receiver.sink.records[0]
    assert record.key == b"Wh0AAAAAQAaXMNu7xq6j4w"
    headers = _headers(record.headers)
    assert headers["client_id"] == "producteur-été"
    for label in L.BROKER_LABELS:
        assert label.name in headers
    assert headers[L.RECORD_META_INSTANCE_ID_SOURCE] == "header"
    assert re.fullmatch(r"[0-9a-f]{32}", headers[L.RECORD_META_PUSH_ID])


async def test_private_attributes_are_dropped_and_value_reencoded(receiver: Receiver) -> None:
    """Given resource and point attributes that KIP-714 calls private (host, OS, command line, a token),
    then they are absent from the stored value, the rest is kept, and the record says it was modified."""
    req = make_request(
        resource={"host.name": "db-7.internal", "os.type": "linux", "process.command_line": "java -jar app",
                  "service.name": "billing"},
        point_attributes={"topic": "orders", "sasl.password": "hunter2"},
    )
    reply = await receiver.post(req.SerializeToString())
    assert reply.status == 200
    record = receiver.sink.records[0]
    stored = ExportMetricsServiceRequest.FromString(record.value)
    assert [kv.key for kv in stored.resource_metrics[0].resource.attributes] == ["service.name"]
    point = stored.resource_metrics[0].scope_metrics[0].metrics[0].gauge.data_points[0]
    assert [kv.key for kv in point.attributes] == ["topic"]
    assert b"hunter2" not in record.value and b"db-7" not in record.value
    assert _headers(record.headers)[L.RECORD_META_MODIFIED] == "true"


async def test_invalid_points_give_partial_success(receiver: Receiver) -> None:
    """Given a push where 2 of 5 points have no value, then 200 with partial_success.rejected_data_points = 2
    and an error message, and the record holds the 3 valid points."""
    req = make_request(5)
    points = req.resource_metrics[0].scope_metrics[0].metrics[0].gauge.data_points
    points[1].ClearField("as_int")
    points[3].ClearField("as_int")
    reply = await receiver.post(req.SerializeToString())
    assert reply.status == 200
    response = ExportMetricsServiceResponse.FromString(reply.body)
    assert response.partial_success.rejected_data_points == 2
    assert "without a value" in response.partial_success.error_message
    stored = ExportMetricsServiceRequest.FromString(receiver.sink.records[0].value)
    assert len(stored.resource_metrics[0].scope_metrics[0].metrics[0].gauge.data_points) == 3


async def test_partial_success_in_json(receiver: Receiver) -> None:
    """Given a JSON push with a nameless metric, then the JSON answer has partialSuccess."""
    req = make_request(2)
    extra = req.resource_metrics[0].scope_metrics[0].metrics.add()
    extra.gauge.data_points.add().as_int = 1
    reply = await receiver.post(json_format.MessageToJson(req).encode(), content_type=JSON)
    assert reply.status == 200
    body = json.loads(reply.body)
    assert int(body["partialSuccess"]["rejectedDataPoints"]) == 1
    assert "without a name" in body["partialSuccess"]["errorMessage"]


async def test_missing_or_wrong_token_is_401(receiver: Receiver) -> None:
    """Given no token or a wrong one, then 401 with WWW-Authenticate and nothing stored."""
    body = make_request().SerializeToString()
    for token in (None, "wrong", TOKEN + "x"):
        reply = await receiver.post(body, token=token)
        assert reply.status == 401
        assert "Bearer" in reply.headers["WWW-Authenticate"]
    assert receiver.sink.records == []


async def test_push_interval_rate_limit_answers_429_with_retry_after(receiver: Receiver) -> None:
    """Given a client instance with a 60 s push interval, when it pushes twice in a row, then the second is
    429 with a Retry-After of about a minute, and only one record exists; a terminating push is let through
    once."""
    body = make_request().SerializeToString()
    labels = {"kct-client-instance-id": "inst-1", "kct-push-interval-ms": "60000"}
    assert (await receiver.post(body, headers=labels)).status == 200
    second = await receiver.post(body, headers=labels)
    assert second.status == 429
    assert 40 <= int(second.headers["Retry-After"]) <= 60
    terminating = {**labels, "kct-terminating": "true"}
    assert (await receiver.post(body, headers=terminating)).status == 200
    assert (await receiver.post(body, headers=terminating)).status == 429
    assert len(receiver.sink.records) == 2


async def test_pushes_a_broker_forwarded_are_not_paced_again(receiver: Receiver) -> None:
    """Given pushes with the plugin's kct-broker-id (the broker enforced the interval when they arrived there),
    when two of one instance reach the receiver back to back (the plugin's queue delayed the first), then
    both are stored; the same two without a broker id are paced (the second is 429)."""
    body = make_request().SerializeToString()
    forwarded = {"kct-client-instance-id": "inst-b", "kct-push-interval-ms": "60000", "kct-broker-id": "2"}
    assert [(await receiver.post(body, headers=forwarded)).status for _ in range(2)] == [200, 200]
    direct = {"kct-client-instance-id": "inst-d", "kct-push-interval-ms": "60000"}
    assert [(await receiver.post(body, headers=direct)).status for _ in range(2)] == [200, 429]
    assert [r.key for r in receiver.sink.records] == [b"inst-b", b"inst-b", b"inst-d"]


async def test_quota_throttle_answers_429_with_computed_retry_after(make_receiver: ReceiverFactory) -> None:
    """Given a push-rate quota of 1/s for client id "noisy" (10 x 1 s windows), when it pushes 12 times at
    once, then the first 9 pass (the rate is measured over at least 9 windows) and the rest get 429 with
    Retry-After >= 1 s; another client id is not affected."""
    config = base_config(quotas={"overrides": [{"clientId": "noisy", "pushRate": 1.0}]})
    receiver = await make_receiver(config)
    body = make_request().SerializeToString()
    statuses = []
    for i in range(12):
        reply = await receiver.post(body, headers={"kct-client-id": "noisy", "kct-client-instance-id": f"i{i}"})
        statuses.append(reply.status)
        if reply.status == 429:
            assert int(reply.headers["Retry-After"]) >= 1
    assert statuses.count(200) == 9 and statuses.count(429) == 3
    assert (await receiver.post(body, headers={"kct-client-id": "quiet"})).status == 200


async def test_sink_unavailable_answers_503_and_nothing_is_acknowledged(receiver: Receiver) -> None:
    """Given Kafka down (the sink refuses), then 503 with Retry-After and the rate-limit state is rolled back,
    so the retry succeeds once Kafka is back."""
    body = make_request().SerializeToString()
    labels = {"kct-client-instance-id": "inst-2", "kct-push-interval-ms": "60000"}
    receiver.sink.available = False
    reply = await receiver.post(body, headers=labels)
    assert reply.status == 503
    assert int(reply.headers["Retry-After"]) >= 1
    assert (await receiver.get("/readyz")).status == 503
    receiver.sink.available = True
    assert (await receiver.post(body, headers=labels)).status == 200
    assert (await receiver.get("/readyz")).status == 200
    assert len(receiver.sink.records) == 1


async def test_inflight_limit_queues_in_order_then_answers_503(make_receiver: ReceiverFactory) -> None:
    """Given at most 2 pushes in flight, 1 waiting, a 200 ms bound on the wait and a sink taking 300 ms, when 6
    pushes arrive at once, then 2 are admitted, 1 waits, 3 are refused at once (queue_full) and the waiting
    one when its bound passes (queue_wait): every 503 with Retry-After, one record per 200, none for a 503."""
    receiver = await make_receiver(base_config(
        limits={"maxInflightRequests": 2, "maxQueuedRequests": 1, "maxQueueWaitMs": 200}))
    receiver.sink.delay_s = 0.3
    body = make_request().SerializeToString()
    replies = await asyncio.gather(*(receiver.post(body) for _ in range(6)))
    statuses = sorted(r.status for r in replies)
    assert statuses.count(200) == 2 and statuses.count(503) == 4
    assert all(int(r.headers["Retry-After"]) >= 1 for r in replies if r.status == 503)
    assert len(receiver.sink.records) == 2
    text = (await receiver.get("/metrics")).body.decode()
    assert 'kct_receiver_rejections_total{http_response_status_code="503",reason="queue_full"} 3.0' in text
    assert 'kct_receiver_rejections_total{http_response_status_code="503",reason="queue_wait"} 1.0' in text
    assert "kct_receiver_admission_queued 0.0" in text


async def test_pushes_waiting_for_a_place_are_served_in_arrival_order(make_receiver: ReceiverFactory) -> None:
    """Given one push in flight at a time and a generous bound on the wait, when 4 pushes are sent one after
    the other while the first is held by the sink, then all get 200 and are stored in the order they came."""
    receiver = await make_receiver(base_config(limits={"maxInflightRequests": 1, "maxQueueWaitMs": 10_000}))
    receiver.sink.delay_s = 0.05
    admission = receiver.server.pipeline.admission
    body = make_request().SerializeToString()
    posts = []
    for n in range(4):
        posts.append(asyncio.create_task(receiver.post(body, headers={L.CLIENT_INSTANCE_ID.http_header: f"c{n}"})))
        # the next push is sent once this one holds the place or waits for it, so arrival order is known
        await eventually_async(
            lambda n=n: admission.requests + admission.queued + len(receiver.sink.records) == n + 1,
            timeout=5, interval=0.005, what=f"push {n} admitted, queued or stored")
    replies = await asyncio.gather(*posts)
    assert [r.status for r in replies] == [200] * 4
    stored = [_headers(record.headers)[L.CLIENT_INSTANCE_ID.name] for record in receiver.sink.records]
    assert stored == ["c0", "c1", "c2", "c3"]


async def test_health_ready_and_prometheus_metrics(receiver: Receiver) -> None:
    """Given one accepted and one refused push, then /healthz and /readyz are 200 and /metrics exposes the
    layers' semantic-convention names and the rejection by reason."""
    await receiver.post(make_request().SerializeToString())
    await receiver.post(b"\x00garbage")
    assert (await receiver.get("/healthz")).status == 200
    assert (await receiver.get("/readyz")).status == 200
    text = (await receiver.get("/metrics")).body.decode()
    for name in (
        "http_server_request_duration_seconds_bucket",
        "http_server_active_requests",
        "kct_receiver_pipeline_stage_duration_seconds_bucket",
        "messaging_client_operation_duration_seconds_bucket",
        "messaging_client_sent_messages_total",
        'kct_receiver_rejections_total{http_response_status_code="400",reason="bad_protobuf"} 1.0',
        'kct_receiver_data_points_total{outcome="accepted"} 3.0',
    ):
        assert name in text, name


async def test_disabled_layers_export_nothing(make_receiver: ReceiverFactory) -> None:
    """Given the pipeline and sink layers switched off, then /metrics has only ingress metrics."""
    receiver = await make_receiver(base_config(observability={"pipeline": False, "sink": False}))
    await receiver.post(make_request().SerializeToString())
    text = (await receiver.get("/metrics")).body.decode()
    assert "http_server_request_duration_seconds" in text
    assert "kct_receiver_pipeline" not in text and "messaging_client" not in text


async def test_graceful_stop_finishes_inflight_pushes(receiver: Receiver) -> None:
    """Given a push waiting on a slow sink, when the server is stopped (SIGTERM path), then that push still
    gets 200 and its record, /readyz turned 503 meanwhile, and the sink is closed afterwards."""
    receiver.sink.delay_s = 0.5
    pending = asyncio.create_task(receiver.post(make_request().SerializeToString()))
    await eventually_async(lambda: receiver.sink.inflight() == 1, timeout=5, interval=0.01,
                           what="the push to wait on the sink")
    stopping = asyncio.create_task(receiver.server.stop())
    await eventually_async(lambda: receiver.server.draining, timeout=5, interval=0.01, what="the server to drain")
    assert receiver.sink.inflight() == 1 and not pending.done()  # stopped while the push was in flight
    reply = await pending
    await stopping
    assert reply.status == 200
    assert len(receiver.sink.records) == 1
    assert receiver.sink.closed


async def test_plain_otlp_sender_is_keyed_by_resource_attribute_in_priority_order(receiver: Receiver) -> None:
    """Given a push without broker headers whose resource has service.instance.id before client_instance_id,
    then the key is client_instance_id (it outranks service.instance.id) and the source says "resource";
    without any id attribute a random key is generated."""
    req = make_request(resource={"service.instance.id": "svc-uuid", "client_instance_id": "kafka-id"})
    assert (await receiver.post(req.SerializeToString())).status == 200
    record = receiver.sink.records[0]
    assert record.key == b"kafka-id"
    assert _headers(record.headers)[L.RECORD_META_INSTANCE_ID_SOURCE] == "resource"
    assert (await receiver.post(make_request(resource={"a": "b"}).SerializeToString())).status == 200
    generated = receiver.sink.records[1]
    assert re.fullmatch(rb"[0-9a-f]{32}", generated.key)
    assert _headers(generated.headers)[L.RECORD_META_INSTANCE_ID_SOURCE] == "generated"


async def test_principal_header_resolves_user_quotas_by_principal_name(make_receiver: ReceiverFactory) -> None:
    """Given a <user alice> push-rate quota of 1/s, when pushes carry kct-principal "User:alice", then the
    quota applies (Kafka names quota users by principal name) and user bob is unaffected."""
    receiver = await make_receiver(base_config(quotas={"windowCount": 2, "overrides": [
        {"user": "alice", "pushRate": 1.0}]}))
    body = make_request().SerializeToString()
    statuses = [(await receiver.post(body, headers={"kct-principal": "User:alice"})).status for _ in range(3)]
    assert statuses[-1] == 429
    assert (await receiver.post(body, headers={"kct-principal": "User:bob"})).status == 200


async def test_inflight_budget_is_released_whatever_the_outcome(make_receiver: ReceiverFactory) -> None:
    """Given a 700 KB in-flight byte budget, when two ~400 KB pushes wait on a slow sink at once, then one is
    refused with 503 naming the limit; and after accepted, refused (bad body, Kafka down) and over-budget
    pushes no push and no byte remains counted in flight."""
    receiver = await make_receiver(base_config(limits={"maxInflightBytes": 700_000,
                                                       "maxDecompressedBytes": 600_000}))
    body = make_request().SerializeToString()
    assert (await receiver.post(encode(body, "gzip"), encoding="gzip")).status == 200
    assert (await receiver.post(b"\x00garbage")).status == 400
    receiver.sink.available = False
    assert (await receiver.post(body)).status == 503
    receiver.sink.available = True
    receiver.sink.delay_s = 0.3
    big = make_request(10_000).SerializeToString()
    assert 350_000 < len(big) < 600_000
    replies = await asyncio.gather(receiver.post(big), receiver.post(big))
    assert sorted(r.status for r in replies) == [200, 503]
    assert any(b"maxInflightBytes" in r.body for r in replies)
    admission = receiver.server.pipeline.admission
    assert (admission.requests, admission.bytes) == (0, 0)
