"""The oracle's Python decoder (aggregation_oracle.python_decoder): one OTLP push record into flat data points
(no Spark needed). The JVM decoder the job runs is held to it row for row (test_jvm_decoder.py)."""

from __future__ import annotations

from aggregation_oracle.python_decoder import (
    OTLP_MESSAGE,
    attributes_key,
    decode_push,
    header_labels,
    otlp_descriptor_set,
)

from kct.aggregation.decode import POINT_COLUMNS
from kct.aggregation.synthetic import build_request

S = 1_000_000_000


def test_push_becomes_one_row_per_point_with_broker_labels() -> None:
    """Given a push with an int cumulative sum, a gauge with attributes and a histogram, and broker labels
    in the record headers,
    When decoded,
    Then each data point is a row carrying the labels, type, temporality, a double value or the histogram."""
    value = build_request(
        {"service.name": "orders"},
        [
            {"name": "m.sent", "type": "sum", "points": [{"time": 20 * S, "start": 5 * S, "value": 42}]},
            {"name": "m.queue", "type": "gauge", "unit": "ms",
             "points": [{"time": 20 * S, "value": 1.5, "attributes": {"node_id": 3, "topic": "a"}}]},
            {"name": "m.rtt", "type": "histogram", "temporality": "delta",
             "points": [{"time": 20 * S, "count": 3, "sum": 7.0, "buckets": [1, 2], "bounds": [5.0]}]},
        ],
    )
    headers = [("client_instance_id", b"abc"), ("client_id", b"p-1"), ("terminating", b"true"),
               ("push_interval_ms", b"5000"), ("principal", b"User:bob")]
    rows = decode_push(value, b"key-id", headers)
    assert [r["metric"] for r in rows] == ["m.sent", "m.queue", "m.rtt"]
    sent, queue, rtt = rows
    assert set(sent) == set(POINT_COLUMNS)
    assert (sent["client_instance_id"], sent["client_id"], sent["principal"]) == ("abc", "p-1", "User:bob")
    assert (sent["terminating"], sent["push_interval_ms"]) == (True, 5000)
    assert (sent["type"], sent["temporality"], sent["monotonic"], sent["value"]) == ("sum", "cumulative", True, 42.0)
    assert (sent["start_time_unix_nano"], sent["time_unix_nano"]) == (5 * S, 20 * S)
    assert dict(sent["resource_attributes"]) == {"service.name": "orders"}
    assert (queue["type"], queue["unit"], dict(queue["attributes"])) == ("gauge", "ms", {"node_id": "3", "topic": "a"})
    assert queue["attributes_key"] == "node_id=3,topic=a"
    assert (rtt["type"], rtt["temporality"], rtt["value"]) == ("histogram", "delta", None)
    assert (rtt["count"], rtt["sum"], rtt["bucket_counts"], rtt["explicit_bounds"]) == (3, 7.0, [1, 2], [5.0])


def test_instance_id_falls_back_to_the_record_key_and_plugin_header_names_work() -> None:
    """Given a record without the client_instance_id header but with the plugin's HTTP header names,
    When decoded,
    Then the instance id is the record key and the labels are read from the `kct-` names."""
    value = build_request({}, [{"name": "g", "type": "gauge", "points": [{"time": S, "value": 1.0}]}])
    (row,) = decode_push(value, b"from-key", [("kct-client-id", b"c-9"), ("kct-broker-id", b"2")])
    assert (row["client_instance_id"], row["client_id"], row["broker_id"], row["terminating"]) == (
        "from-key", "c-9", "2", False)


def test_labels_and_attribute_keys_are_stable() -> None:
    """Given headers in any case and attributes in any order,
    When normalised,
    Then the label names are KIP-714's and the attribute key is sorted."""
    assert header_labels([("KCT-PRINCIPAL", b"User:x"), ("other", b"y")]) == {"principal": "User:x"}
    assert attributes_key({"b": "2", "a": "1"}) == "a=1,b=2"


def test_descriptor_set_describes_the_record_value_without_protoc() -> None:
    """Given the descriptor set built from the installed opentelemetry-proto modules,
    When loaded into a fresh descriptor pool,
    Then it resolves ExportMetricsServiceRequest with every imported file before its importers."""
    from google.protobuf import descriptor_pb2, descriptor_pool

    fds = descriptor_pb2.FileDescriptorSet.FromString(otlp_descriptor_set())
    names = [f.name for f in fds.file]
    assert names[-1] == "opentelemetry/proto/collector/metrics/v1/metrics_service.proto"
    assert "opentelemetry/proto/metrics/v1/metrics.proto" in names
    pool = descriptor_pool.DescriptorPool()
    for f in fds.file:
        pool.Add(f)
    assert pool.FindMessageTypeByName(OTLP_MESSAGE).fields_by_name["resource_metrics"]
