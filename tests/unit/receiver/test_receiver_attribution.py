"""Attribution in the receiver: stored records carry the client's workload as resource attributes, bytes are
the sender's when nothing is added, and each push is counted by outcome."""

from __future__ import annotations

import time
from typing import Any

from conftest import JSON, ReceiverFactory, base_config, make_request
from google.protobuf import json_format
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from kct.attribution.resource_bytes import with_resource_attributes


def _pod(name: str, ip: str, owner: tuple[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name, "namespace": "shop", "uid": f"uid-{name}", "creationTimestamp": "2020-01-01T00:00:00Z",
        "labels": {"app.kubernetes.io/name": "orders"},
    }
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    return {"metadata": meta, "spec": {"nodeName": "node-1"}, "status": {"podIP": ip, "phase": "Running"}}


def _resource(value: bytes) -> list[dict[str, str]]:
    stored = ExportMetricsServiceRequest.FromString(value)
    return [{kv.key: kv.value.string_value for kv in rm.resource.attributes} for rm in stored.resource_metrics]


def _headers(address: str) -> dict[str, str]:
    return {"kct-client-instance-id": "abc", "kct-client-id": "orders-1", "kct-principal": "User:orders",
            "kct-client-source-address": address, "kct-client-source-port": "40000"}


async def test_a_pod_s_push_is_stored_with_its_workload_and_nothing_else_changes(
    make_receiver: ReceiverFactory,
) -> None:
    # Given a receiver whose index knows a Deployment's pod at 10.1.0.5
    receiver = await make_receiver()
    index = receiver.server.pipeline.attributor.index  # type: ignore[union-attr]
    now = time.time_ns() // 1_000_000
    index.upsert_owner("ReplicaSet", {"metadata": {"name": "orders-7d9f", "namespace": "shop",
                                                   "ownerReferences": [{"kind": "Deployment", "name": "orders",
                                                                        "controller": True}]}})
    index.upsert_pod(_pod("orders-7d9f-x", "10.1.0.5", ("ReplicaSet", "orders-7d9f")), now)
    request = make_request(resource={"client_rack": "r1", "service.name": "claimed-by-client"})
    body = request.SerializeToString()
    # When it pushes, and a client outside the cluster pushes the same bytes
    assert (await receiver.post(body, headers=_headers("10.1.0.5"))).status == 200
    assert (await receiver.post(body, headers=_headers("203.0.113.9"))).status == 200
    # Then the pod's record has its workload as resource attributes (replacing the client's service.name),
    # scopes and points unchanged; the outside client's record is the sender's bytes
    pod_record, outside_record = receiver.sink.records
    assert _resource(pod_record.value) == [{
        "client_rack": "r1",
        "k8s.namespace.name": "shop", "k8s.pod.name": "orders-7d9f-x", "k8s.pod.uid": "uid-orders-7d9f-x",
        "k8s.node.name": "node-1", "k8s.replicaset.name": "orders-7d9f", "k8s.deployment.name": "orders",
        "service.name": "orders",
    }]
    stored = ExportMetricsServiceRequest.FromString(pod_record.value)
    assert stored.resource_metrics[0].scope_metrics == request.resource_metrics[0].scope_metrics
    assert dict(pod_record.headers)["kct.modified"] == b"true"
    assert outside_record.value == body
    assert dict(outside_record.headers)["kct.modified"] == b"false"
    # And the pushes are counted by outcome
    metrics = (await receiver.get("/metrics")).body.decode()
    assert 'kct_receiver_attribution_pushes_total{outcome="attributed",source="pod"} 1.0' in metrics
    assert 'kct_receiver_attribution_pushes_total{outcome="unattributed",source=""} 1.0' in metrics


async def test_rules_attribute_a_json_push_from_outside(make_receiver: ReceiverFactory) -> None:
    config = base_config(attribution={"rules": [
        {"principal": "User:orders", "attributes": {"k8s.namespace.name": "shop", "k8s.deployment.name": "orders"}}
    ]})
    receiver = await make_receiver(config)
    doc = json_format.MessageToJson(make_request())
    assert (await receiver.post(doc, content_type=JSON, headers=_headers("198.51.100.1"))).status == 200
    assert _resource(receiver.sink.records[0].value)[0]["k8s.deployment.name"] == "orders"
    metrics = (await receiver.get("/metrics")).body.decode()
    assert 'kct_receiver_attribution_pushes_total{outcome="attributed",source="rule"} 1.0' in metrics


async def test_attribution_off_adds_and_counts_nothing(make_receiver: ReceiverFactory) -> None:
    receiver = await make_receiver(base_config(attribution={"enabled": False}))
    assert receiver.server.pipeline.attributor is None
    body = make_request().SerializeToString()
    assert (await receiver.post(body, headers=_headers("10.1.0.5"))).status == 200
    assert receiver.sink.records[0].value == body
    assert "kct_receiver_attribution_pushes_total{" not in (await receiver.get("/metrics")).body.decode()


def test_resource_attributes_are_added_to_every_resource_and_unknown_fields_kept() -> None:
    # Given two ResourceMetrics, one without a Resource, a schema URL and a duplicate key from the sender
    request = ExportMetricsServiceRequest()
    first = request.resource_metrics.add()
    first.schema_url = "https://opentelemetry.io/schemas/1.26.0"
    kv = first.resource.attributes.add()
    kv.key, kv.value.string_value = "k8s.pod.name", "spoofed"
    first.resource.dropped_attributes_count = 2
    first.scope_metrics.add().scope.name = "librdkafka"
    second = request.resource_metrics.add()
    second.scope_metrics.add().scope.name = "other"
    data = request.SerializeToString() + b"\xa0\x06\x01"  # an unknown varint field (100) at the top level
    # When attributes are added
    out = with_resource_attributes(data, [("k8s.pod.name", "p"), ("k8s.namespace.name", "ns")])
    # Then each resource has them once, the rest is as it was
    parsed = ExportMetricsServiceRequest.FromString(out)
    assert [[(a.key, a.value.string_value) for a in rm.resource.attributes] for rm in parsed.resource_metrics] == [
        [("k8s.pod.name", "p"), ("k8s.namespace.name", "ns")],
        [("k8s.pod.name", "p"), ("k8s.namespace.name", "ns")],
    ]
    assert parsed.resource_metrics[0].resource.dropped_attributes_count == 2
    assert parsed.resource_metrics[0].schema_url == "https://opentelemetry.io/schemas/1.26.0"
    assert [rm.scope_metrics[0].scope.name for rm in parsed.resource_metrics] == ["librdkafka", "other"]
    assert out.endswith(b"\xa0\x06\x01")
    assert with_resource_attributes(data, []) is data


def test_a_single_resource_push_gets_the_attributes_after_its_own() -> None:
    # Given the usual client push: one ResourceMetrics, its Resource first, none of our keys
    request = make_request(resource={"client_rack": "r1", "client_id": "c"})
    data = request.SerializeToString()
    # When attributes are added
    out = with_resource_attributes(data, [("k8s.pod.name", "p"), ("k8s.namespace.name", "ns")])
    # Then the message is the same but for them
    expected = ExportMetricsServiceRequest()
    expected.CopyFrom(request)
    for key, value in (("k8s.pod.name", "p"), ("k8s.namespace.name", "ns")):
        kv = expected.resource_metrics[0].resource.attributes.add()
        kv.key, kv.value.string_value = key, value
    assert ExportMetricsServiceRequest.FromString(out) == expected
    assert out == expected.SerializeToString()  # canonical: as protobuf itself writes it
