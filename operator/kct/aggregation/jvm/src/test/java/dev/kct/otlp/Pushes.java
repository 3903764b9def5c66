package dev.kct.otlp;

import io.opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest;
import io.opentelemetry.proto.common.v1.AnyValue;
import io.opentelemetry.proto.common.v1.KeyValue;
import io.opentelemetry.proto.metrics.v1.AggregationTemporality;
import io.opentelemetry.proto.metrics.v1.Gauge;
import io.opentelemetry.proto.metrics.v1.Histogram;
import io.opentelemetry.proto.metrics.v1.HistogramDataPoint;
import io.opentelemetry.proto.metrics.v1.Metric;
import io.opentelemetry.proto.metrics.v1.NumberDataPoint;
import io.opentelemetry.proto.metrics.v1.ResourceMetrics;
import io.opentelemetry.proto.metrics.v1.ScopeMetrics;
import io.opentelemetry.proto.metrics.v1.Sum;
import io.opentelemetry.proto.resource.v1.Resource;
import java.util.ArrayList;
import java.util.List;

/** OTLP pushes built by hand for the tests, the shape a KIP-714 client's push has: one resource, one scope. */
final class Pushes {
  private Pushes() {}

  static final long SECOND = 1_000_000_000L;

  /** {@code key, value, key, value, ...} as string attributes, in that order. */
  static List<KeyValue> attributes(String... keyValues) {
    List<KeyValue> out = new ArrayList<>();
    for (int i = 0; i < keyValues.length; i += 2) {
      out.add(KeyValue.newBuilder().setKey(keyValues[i])
          .setValue(AnyValue.newBuilder().setStringValue(keyValues[i + 1])).build());
    }
    return out;
  }

  static NumberDataPoint point(long timeSeconds, long startSeconds, double value, String... attributes) {
    return NumberDataPoint.newBuilder().setTimeUnixNano(timeSeconds * SECOND)
        .setStartTimeUnixNano(startSeconds * SECOND).setAsDouble(value).addAllAttributes(attributes(attributes))
        .build();
  }

  static Metric gauge(String name, NumberDataPoint... points) {
    return Metric.newBuilder().setName(name).setUnit("1")
        .setGauge(Gauge.newBuilder().addAllDataPoints(List.of(points))).build();
  }

  static Metric sum(String name, AggregationTemporality temporality, boolean monotonic, NumberDataPoint... points) {
    return Metric.newBuilder().setName(name).setUnit("1").setSum(Sum.newBuilder()
        .setAggregationTemporality(temporality).setIsMonotonic(monotonic).addAllDataPoints(List.of(points)))
        .build();
  }

  static Metric counter(String name, NumberDataPoint... points) {
    return sum(name, AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE, true, points);
  }

  static HistogramDataPoint histogramPoint(long timeSeconds, long startSeconds, List<Long> buckets,
      List<Double> bounds) {
    long count = buckets.stream().mapToLong(Long::longValue).sum();
    return HistogramDataPoint.newBuilder().setTimeUnixNano(timeSeconds * SECOND)
        .setStartTimeUnixNano(startSeconds * SECOND).setCount(count).setSum(count * 2.0)
        .addAllBucketCounts(buckets).addAllExplicitBounds(bounds).build();
  }

  static Metric histogram(String name, AggregationTemporality temporality, HistogramDataPoint... points) {
    return Metric.newBuilder().setName(name).setUnit("ms").setHistogram(Histogram.newBuilder()
        .setAggregationTemporality(temporality).addAllDataPoints(List.of(points))).build();
  }

  static ExportMetricsServiceRequest request(Metric... metrics) {
    return ExportMetricsServiceRequest.newBuilder().addResourceMetrics(ResourceMetrics.newBuilder()
        .setResource(Resource.newBuilder().addAllAttributes(attributes("client_rack", "r1")))
        .addScopeMetrics(ScopeMetrics.newBuilder().addAllMetrics(List.of(metrics)))).build();
  }

  static byte[] push(Metric... metrics) {
    return request(metrics).toByteArray();
  }
}
