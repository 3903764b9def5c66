"""The transforms on small DataFrames whose results are worked out by hand: the job's (hourly, alerts,
terminations) and the oracle's Spark SQL client_metrics and roll-ups (tests/aggregation_oracle), which the job's
JVM engine is held to (test_client_windows.py, test_rollups_jvm.py).

Windows are 60 s; `t` is seconds after T0 (a minute boundary), so window k holds t in [60k, 60k+60).
"""

from __future__ import annotations

from typing import Any

import pytest
from aggregation_helpers import point, points_df, window
from aggregation_oracle.sql_engine import aggregate_client_metrics, rollups

from kct.aggregation.config import ThresholdRule
from kct.aggregation.transforms import alerts, hourly, terminations

pytestmark = pytest.mark.spark

SENT = "org.apache.kafka.producer.record.sent.total"
QTIME = "org.apache.kafka.producer.record.queue.time.max"
RTT = "org.apache.kafka.client.request.rtt"


def counter(t: float, value: float, start_s: float, **kw: Any) -> dict[str, Any]:
    return point(SENT, t, value, type="sum", temporality="cumulative", monotonic=True, start_s=start_s, **kw)


def by_window(rows: list[Any]) -> dict[float, Any]:
    return {r.window_start.timestamp(): r for r in rows}


def aggregate(spark: Any, rows: list[dict[str, Any]], **kw: Any) -> list[Any]:
    return aggregate_client_metrics(points_df(spark, rows), window_seconds=60, **kw).collect()


def test_cumulative_counter_with_reset_gives_per_window_deltas(spark: Any) -> None:
    """Given a cumulative counter started at t=5 that resets (new start time, lower value) at t=50,
    When aggregated per minute,
    Then window 0 counts 100 (since start) + 50 + 40 (after the reset) with one reset, and window 1 counts
    90 - 40 = 50 against the last point of window 0, at 50/60 per second."""
    rows = [counter(10, 100, 5), counter(30, 150, 5), counter(50, 40, 45), counter(70, 90, 45)]
    out = by_window(aggregate(spark, rows))
    first, second = out[window(0)], out[window(1)]
    assert (first.delta, first.resets, first.points, first.value_last) == (190.0, 1, 3, 40.0)
    assert (second.delta, second.resets) == (50.0, 0)
    assert second.rate == pytest.approx(50 / 60)


def test_counter_seen_late_is_a_baseline_not_a_burst(spark: Any) -> None:
    """Given a counter whose start time lies far before the look-back horizon (a long-running client),
    When its first points are aggregated,
    Then the first point is only a baseline: the window's delta is the increase after it."""
    rows = [counter(10, 1_000_000, -86_400), counter(40, 1_000_300, -86_400)]
    (only,) = aggregate(spark, rows)
    assert only.delta == 300.0


def test_counter_delta_spans_empty_windows_within_lookback(spark: Any) -> None:
    """Given points in window 0 (100) and window 2 (160) and nothing in window 1,
    When aggregated with a look-back of 5 windows, and again with a look-back of 1,
    Then window 2's delta is 60 in the first case; with look-back 1 the earlier point is out of reach and
    the window-2 point is only a baseline (its start time is older than the horizon)."""
    rows = [counter(10, 100, 5), counter(130, 160, 5)]
    wide = by_window(aggregate(spark, rows, lookback_windows=5))
    narrow = by_window(aggregate(spark, rows, lookback_windows=1))
    assert set(wide) == {window(0), window(2)}
    assert wide[window(2)].delta == 60.0
    assert narrow[window(2)].delta == 0.0


def test_delta_temporality_sums_are_added(spark: Any) -> None:
    """Given a delta-temporality sum with 5 and 7 in window 0 and 3 in window 1,
    When aggregated,
    Then the deltas are 12 and 3 and no reset is reported."""
    rows = [point(SENT, t, v, type="sum", temporality="delta", monotonic=True) for t, v in ((5, 5), (25, 7), (65, 3))]
    out = by_window(aggregate(spark, rows))
    assert (out[window(0)].delta, out[window(0)].resets) == (12.0, 0)
    assert out[window(1)].delta == 3.0


def test_gauge_last_min_max_avg(spark: Any) -> None:
    """Given a gauge at 10, 40, 20 (in time order 20 last) within one window,
    When aggregated,
    Then last=20, min=10, max=40, avg=70/3 and no delta."""
    rows = [point(QTIME, 50, 20.0), point(QTIME, 10, 10.0), point(QTIME, 30, 40.0)]
    (only,) = aggregate(spark, rows)
    assert (only.value_last, only.value_min, only.value_max, only.delta) == (20.0, 10.0, 40.0, None)
    assert only.value_avg == pytest.approx(70 / 3)


def hist(t: float, buckets: list[int], total: float, temporality: str, bounds: list[float],
         **kw: Any) -> dict[str, Any]:
    return point(RTT, t, None, type="histogram", temporality=temporality, count=sum(buckets), sum=total,
                 bucket_counts=buckets, explicit_bounds=bounds, **kw)


def test_delta_histograms_merge_and_quantiles_interpolate(spark: Any) -> None:
    """Given two delta histograms over bounds [10, 20, 50]: [2,1,0,0] and [0,3,4,0] (sums 30 and 250),
    When merged in one window,
    Then buckets are [2,4,4,0], count 10, sum 280, and with cumulative counts [2,6,10,10]:
    p50 (rank 5) = 10 + 10*(5-2)/4 = 17.5, p95 (rank 9.5) = 20 + 30*(9.5-6)/4 = 46.25,
    p99 (rank 9.9) = 20 + 30*(9.9-6)/4 = 49.25."""
    bounds = [10.0, 20.0, 50.0]
    rows = [hist(10, [2, 1, 0, 0], 30.0, "delta", bounds), hist(40, [0, 3, 4, 0], 250.0, "delta", bounds)]
    (only,) = aggregate(spark, rows)
    assert (list(only.bucket_counts), only["count"], only.sum) == ([2, 4, 4, 0], 10, 280.0)
    assert (only.p50, only.p95, only.p99) == (pytest.approx(17.5), pytest.approx(46.25), pytest.approx(49.25))


def test_quantile_in_overflow_bucket_is_capped_at_the_highest_bound(spark: Any) -> None:
    """Given a delta histogram over bounds [1, 2] with every observation above 2 (buckets [0,0,4]),
    When aggregated,
    Then p50 is the highest finite bound, 2 (the overflow bucket has no upper edge)."""
    (only,) = aggregate(spark, [hist(10, [0, 0, 4], 40.0, "delta", [1.0, 2.0])])
    assert only.p50 == 2.0


def test_cumulative_histogram_window_delta_is_bucketwise(spark: Any) -> None:
    """Given a cumulative histogram (start long ago) at [1,0,0] then [1,2,0] in window 0 and [2,2,1] in window 1,
    When aggregated,
    Then window 0 holds the increase after its baseline, [0,2,0] (count 2), and window 1 holds [1,0,1]."""
    bounds = [10.0, 20.0]
    rows = [
        hist(10, [1, 0, 0], 5.0, "cumulative", bounds, start_s=-86_400),
        hist(40, [1, 2, 0], 35.0, "cumulative", bounds, start_s=-86_400),
        hist(70, [2, 2, 1], 65.0, "cumulative", bounds, start_s=-86_400),
    ]
    out = by_window(aggregate(spark, rows))
    assert (list(out[window(0)].bucket_counts), out[window(0)]["count"], out[window(0)].sum) == ([0, 2, 0], 2, 30.0)
    assert (list(out[window(1)].bucket_counts), out[window(1)]["count"], out[window(1)].sum) == ([1, 0, 1], 2, 30.0)


def test_series_are_kept_apart_by_attributes_and_instance(spark: Any) -> None:
    """Given the same gauge for two node ids and a second client instance,
    When aggregated,
    Then there is one row per (instance, attributes)."""
    rows = [
        point(QTIME, 10, 1.0, attributes={"node_id": "1"}, attributes_key="node_id=1"),
        point(QTIME, 10, 2.0, attributes={"node_id": "2"}, attributes_key="node_id=2"),
        point(QTIME, 10, 3.0, client_instance_id="inst-2"),
    ]
    out = {(r.client_instance_id, r.attributes_key): r.value_last for r in aggregate(spark, rows)}
    assert out == {("inst-1", "node_id=1"): 1.0, ("inst-1", "node_id=2"): 2.0, ("inst-2", ""): 3.0}


def test_rollups_sum_counters_and_merge_histograms_across_instances(spark: Any) -> None:
    """Given two instances of client id producer-1 with deltas 12 and 30 and delta histograms [1,0] and [0,3],
    When rolled up,
    Then the client_id roll-up has delta 42 over 2 instances and buckets [1,3]."""
    rows = [
        point(SENT, 10, 12.0, type="sum", temporality="delta", monotonic=True),
        point(SENT, 10, 30.0, type="sum", temporality="delta", monotonic=True, client_instance_id="inst-2"),
        hist(10, [1, 0], 1.0, "delta", [5.0]),
        hist(10, [0, 3], 30.0, "delta", [5.0], client_instance_id="inst-2"),
    ]
    metrics = aggregate_client_metrics(points_df(spark, rows), window_seconds=60)
    out = {(r.dimension, r.metric): r for r in rollups(metrics).collect()}
    sent = out[("client_id", SENT)]
    assert (sent.dimension_value, sent.delta, sent.instances) == ("producer-1", 42.0, 2)
    assert list(out[("client_id", RTT)].bucket_counts) == [1, 3]
    assert out[("client_software", SENT)].dimension_value == "librdkafka/2.12.1"
    assert out[("principal", SENT)].dimension_value == "User:alice"


def test_rollups_keep_each_grouping_set_apart_and_carry_attributes_and_bounds(spark: Any) -> None:
    """Given delta histograms over bounds [5] with attributes {node: 1}: inst-1 (principal User:alice) [1,0],
    inst-2 (no principal) [0,3], and a delta counter of inst-2 only,
    When rolled up,
    Then each roll-up row has the attributes and bounds of its series; the histogram's client_id row merges
    both instances ([1,3]), its principal rows hold [1,0] for User:alice and [0,3] for the missing
    principal (an empty dimension value, not the merged buckets of another grouping set), and the
    counter's rows hold no buckets."""
    attrs = {"attributes": {"node": "1"}, "attributes_key": "node=1"}
    rows = [
        hist(10, [1, 0], 1.0, "delta", [5.0], **attrs),
        hist(10, [0, 3], 30.0, "delta", [5.0], client_instance_id="inst-2", principal=None, **attrs),
        point(SENT, 10, 30.0, type="sum", temporality="delta", monotonic=True, client_instance_id="inst-2",
              principal=None),
    ]
    out = rollups(aggregate_client_metrics(points_df(spark, rows), window_seconds=60)).collect()
    got = {(r.dimension, r.dimension_value, r.metric): r for r in out}
    assert len(got) == len(out) == 7
    for key in (("client_id", "producer-1", RTT), ("principal", "User:alice", RTT), ("principal", "", RTT)):
        assert (got[key].attributes, list(got[key].explicit_bounds)) == ({"node": "1"}, [5.0])
    assert list(got[("client_id", "producer-1", RTT)].bucket_counts) == [1, 3]
    assert list(got[("principal", "User:alice", RTT)].bucket_counts) == [1, 0]
    assert list(got[("principal", "", RTT)].bucket_counts) == [0, 3]
    counter_row = got[("principal", "", SENT)]
    assert (counter_row.delta, counter_row.bucket_counts, counter_row.attributes) == (30.0, None, {})


def test_terminations_carry_the_reason(spark: Any) -> None:
    """Given a terminating push with a client.terminating metric (reason label) and an ordinary push,
    When terminations are derived,
    Then there is one row, for the terminating push, with the reason."""
    reason = "Consumer closed by application"
    rows = [
        point(QTIME, 10, 1.0, offset=1),
        point(QTIME, 70, 1.0, terminating=True, offset=2),
        point("org.apache.kafka.client.terminating", 70, 1.0, terminating=True, offset=2,
              attributes={"reason": reason}, attributes_key=f"reason={reason}"),
    ]
    (only,) = terminations(points_df(spark, rows)).collect()
    assert (only.client_instance_id, only.reason, only.offset, only.terminating) == ("inst-1", reason, 2, True)


def test_threshold_rule_fires_after_the_duration(spark: Any) -> None:
    """Given queue time max of 6000 ms in windows 0-4, 100 ms in window 5 and 7000 ms in window 6,
    When the KIP-714 rule (max > 5000 ms for more than 180 s) is evaluated,
    Then windows 3 and 4 fire (breach of 240 s and 300 s since window 0); window 6 (60 s) does not."""
    values = [6000, 6000, 6000, 6000, 6000, 100, 7000]
    rows = [point(QTIME, 60 * k + 30, float(v)) for k, v in enumerate(values)]
    metrics = aggregate_client_metrics(points_df(spark, rows), window_seconds=60)
    rule = ThresholdRule(name="queue-latency", metric=QTIME, field="max", op=">", threshold=5000, for_seconds=180)
    found = alerts(metrics, [rule])
    assert found is not None
    fired = sorted((r.window_start.timestamp(), r.breach_seconds, r.rule) for r in found.collect())
    assert fired == [(window(3), 240, "queue-latency"), (window(4), 300, "queue-latency")]
    assert alerts(metrics, []) is None


def test_hourly_rollup_adds_deltas_and_weights_averages(spark: Any) -> None:
    """Given a counter with deltas 100 (window 0) and 60 (window 1) and a gauge averaging 1 over 1 point
    and 4 over 3 points,
    When rolled up per hour,
    Then the hour holds delta 160 (rate 160/3600), the gauge's avg (1 + 12) / 4 and its last value."""
    rows = [counter(10, 100, 5), counter(70, 160, 5), point(QTIME, 10, 1.0),
            point(QTIME, 65, 2.0), point(QTIME, 75, 6.0), point(QTIME, 85, 4.0)]
    metrics = aggregate_client_metrics(points_df(spark, rows), window_seconds=60)
    out = {r.metric: r for r in hourly(metrics).collect()}
    assert (out[SENT].delta, out[SENT].points) == (160.0, 2)
    assert out[SENT].rate == pytest.approx(160 / 3600)
    assert (out[QTIME].value_avg, out[QTIME].value_last, out[QTIME].value_max) == (13 / 4, 4.0, 6.0)
