#!/usr/bin/env python3
"""Attribution's memory and per-push cost: the pod index at N pods, and the time one push spends in it.

    .venv/bin/python bench/attribution_index.py [--pods 10000] [--pushes 20000]

Memory: the index is built from N pod bodies shaped as the API returns them (labels, owner reference,
status), one ReplicaSet per 5 pods, then the bodies are dropped; the figure is what the index still holds
(tracemalloc, after a collection), in total and per pod, then again once every pod has pushed (each pod's
attributes are built once and kept). Cost: microseconds per push for the lookup of a
pod's address plus adding its attributes to a librdkafka-sized push (ExportMetricsServiceRequest of ~40
metrics), next to an unknown address (lookup only, bytes unchanged), and next to what the receiver's
untouched path saves (decoding and re-encoding the same push with protobuf): the ratio is the figure to
read on a loaded machine. Best of 5 runs.
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from kct.attribution.attributor import Attributor
from kct.attribution.config import AttributionConfig
from kct.attribution.resource_bytes import with_resource_attributes

NOW_MS = 1_800_000_000_000


def pod_body(i: int) -> dict[str, Any]:
    deployment = f"workload-{i // 5:05d}"
    return {
        "metadata": {
            "name": f"{deployment}-7d9f8c6b5-{i:05x}", "namespace": f"team-{i % 50:02d}",
            "uid": f"0b1c2d3e-4f50-6172-8394-{i:012x}", "creationTimestamp": "2026-11-29T12:00:00Z",
            "resourceVersion": str(1000 + i),
            "labels": {"app.kubernetes.io/name": deployment, "app.kubernetes.io/version": "1.4.2",
                       "pod-template-hash": "7d9f8c6b5", "team": f"team-{i % 50:02d}"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-29T11:00:00Z", "prometheus.io/port": "8080"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{deployment}-7d9f8c6b5",
                                 "uid": f"rs-{i // 5}", "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {"nodeName": f"node-{i % 100:03d}", "hostNetwork": False, "containers": [{"name": "app"}]},
        "status": {"phase": "Running", "podIP": f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}",
                   "hostIP": f"192.168.0.{i % 100}"},
    }


def replicaset_body(j: int) -> dict[str, Any]:
    deployment = f"workload-{j:05d}"
    return {"metadata": {"name": f"{deployment}-7d9f8c6b5", "namespace": f"team-{(j * 5) % 50:02d}",
                         "ownerReferences": [{"kind": "Deployment", "name": deployment, "controller": True}]}}


def push_bytes() -> bytes:
    request = ExportMetricsServiceRequest()
    rm = request.resource_metrics.add()
    for key, value in (("client_rack", "r1"), ("client_id", "orders-1"), ("client_software_name", "librdkafka")):
        kv = rm.resource.attributes.add()
        kv.key, kv.value.string_value = key, value
    sm = rm.scope_metrics.add()
    sm.scope.name = "librdkafka"
    for m in range(40):
        metric = sm.metrics.add()
        metric.name = f"org.apache.kafka.producer.metric.{m}"
        for p in range(3):
            dp = metric.gauge.data_points.add()
            dp.time_unix_nano, dp.as_int = NOW_MS * 1_000_000, p
            kv = dp.attributes.add()
            kv.key, kv.value.string_value = "topic", f"orders-{p}"
    serialized: bytes = request.SerializeToString()
    return serialized


def build(pods: int) -> tuple[Attributor, int, int]:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    attributor = Attributor(AttributionConfig())
    index = attributor.index
    index.replace_owners("ReplicaSet", [replicaset_body(j) for j in range((pods + 4) // 5)])
    index.replace_pods([pod_body(i) for i in range(pods)], NOW_MS)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    for i in range(pods):  # every pod pushed once: its attributes are built and kept
        attributor.attribute(pod_body(i)["status"]["podIP"], None, None, NOW_MS + 60_000)
    gc.collect()
    held_pushing = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return attributor, held, held_pushing


def per_push_us(attributor: Attributor, address: str, data: bytes, pushes: int) -> tuple[float, int]:
    best = float("inf")
    size = 0
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(pushes):
            found = attributor.attribute(address, "User:orders", "orders-1", NOW_MS + 60_000)
            out = with_resource_attributes(data, found.attributes) if found.attributes else data
        best = min(best, time.perf_counter() - started)
        size = len(out) - len(data)
    return best / pushes * 1e6, size


def decode_encode_us(data: bytes, pushes: int) -> float:
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(pushes):
            ExportMetricsServiceRequest.FromString(data).SerializeToString()
        best = min(best, time.perf_counter() - started)
    return best / pushes * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--pushes", type=int, default=20_000)
    args = parser.parse_args()
    attributor, held, held_pushing = build(args.pods)
    assert len(attributor.index) == args.pods
    data = push_bytes()
    pod_us, added = per_push_us(attributor, "10.0.0.7", data, args.pushes)
    unknown_us, _ = per_push_us(attributor, "203.0.113.9", data, args.pushes)
    print(f"attribution index memory at {args.pods} pods: {held / 2**20:.2f} MiB ({held / args.pods:.0f} B per pod)")
    print(f"attribution index memory at {args.pods} pods, every pod pushing: {held_pushing / 2**20:.2f} MiB "
          f"({held_pushing / args.pods:.0f} B per pod)")
    print(f"attribution cost per push, pod address ({len(data)} B push, +{added} B of attributes): {pod_us:.1f} us")
    print(f"attribution cost per push, unknown address: {unknown_us:.2f} us")
    reference_us = decode_encode_us(data, args.pushes // 4)
    print(f"protobuf decode + re-encode of the same push: {reference_us:.1f} us "
          f"(attribution = {pod_us / reference_us:.2f}x of it)")


if __name__ == "__main__":
    main()
