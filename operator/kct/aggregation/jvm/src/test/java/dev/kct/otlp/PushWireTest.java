package dev.kct.otlp;

import static dev.kct.otlp.Pushes.SECOND;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;

import com.google.protobuf.CodedOutputStream;
import io.opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest;
import io.opentelemetry.proto.common.v1.AnyValue;
import io.opentelemetry.proto.common.v1.ArrayValue;
import io.opentelemetry.proto.common.v1.KeyValue;
import io.opentelemetry.proto.metrics.v1.AggregationTemporality;
import io.opentelemetry.proto.metrics.v1.ExponentialHistogram;
import io.opentelemetry.proto.metrics.v1.ExponentialHistogramDataPoint;
import io.opentelemetry.proto.metrics.v1.Gauge;
import io.opentelemetry.proto.metrics.v1.Histogram;
import io.opentelemetry.proto.metrics.v1.HistogramDataPoint;
import io.opentelemetry.proto.metrics.v1.Metric;
import io.opentelemetry.proto.metrics.v1.NumberDataPoint;
import io.opentelemetry.proto.metrics.v1.ResourceMetrics;
import io.opentelemetry.proto.metrics.v1.ScopeMetrics;
import io.opentelemetry.proto.metrics.v1.Summary;
import io.opentelemetry.proto.metrics.v1.SummaryDataPoint;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * PushWire reads a push's point times off its wire bytes where it is sure of them and answers null (parse it
 * with protobuf) where it is not: every push it reads, protobuf reads into the same times.
 */
class PushWireTest {

  /** PushWire's answer, after checking it against protobuf's whenever PushWire gives one. */
  private static long[] wireTimes(byte[] push) {
    long[] read = PushWire.times(push);
    if (read != null) {
      assertArrayEquals(PushTimes.parsedTimes(push), read, "PushWire and protobuf disagree");
    }
    return read;
  }

  @Test
  void everyKindOfPointGivesItsTimeInPushOrder() {
    // Given a push with a point of every data kind, in an order that is not the times' order
    byte[] push = Pushes.push(
        Pushes.gauge("g", Pushes.point(3, 0, 1.0)),
        Pushes.counter("c", Pushes.point(1, 0, 1.0), Pushes.point(2, 0, 2.0)),
        Pushes.histogram("h", AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA,
            Pushes.histogramPoint(5, 0, List.of(1L, 2L), List.of(10.0))),
        Metric.newBuilder().setName("e").setExponentialHistogram(ExponentialHistogram.newBuilder()
            .addDataPoints(ExponentialHistogramDataPoint.newBuilder().setTimeUnixNano(4 * SECOND).setCount(1)))
            .build(),
        Metric.newBuilder().setName("s").setSummary(Summary.newBuilder()
            .addDataPoints(SummaryDataPoint.newBuilder().setTimeUnixNano(6 * SECOND).setCount(1))).build());
    // Then the times come point by point, as the push holds them
    assertArrayEquals(new long[] {3 * SECOND, SECOND, 2 * SECOND, 5 * SECOND, 4 * SECOND, 6 * SECOND},
        wireTimes(push));
  }

  @Test
  void aPointWithoutATimeIsAtZeroAndAPushWithoutPointsHasNoTimes() {
    byte[] untimed = Pushes.push(Pushes.gauge("g", NumberDataPoint.newBuilder().setAsInt(1).build()));
    assertArrayEquals(new long[] {0L}, wireTimes(untimed));
    assertArrayEquals(new long[0], wireTimes(Pushes.push(Metric.newBuilder().setName("no data").build())));
    assertArrayEquals(new long[0], wireTimes(new byte[0]), "an empty message is a push without points");
    assertNull(PushWire.times(null));
  }

  @Test
  void repeatedNumbersAreReadPackedOrOneByOne() throws IOException {
    // Given a histogram point whose bucket counts are written unpacked (a sender may; protobuf accepts both)
    byte[] point = concat(
        fixed64(HistogramDataPoint.TIME_UNIX_NANO_FIELD_NUMBER, 7 * SECOND),
        fixed64(HistogramDataPoint.BUCKET_COUNTS_FIELD_NUMBER, 1L),
        fixed64(HistogramDataPoint.BUCKET_COUNTS_FIELD_NUMBER, 2L));
    byte[] metric = concat(bytes(Metric.NAME_FIELD_NUMBER, "h".getBytes(StandardCharsets.UTF_8)),
        bytes(Metric.HISTOGRAM_FIELD_NUMBER, bytes(Histogram.DATA_POINTS_FIELD_NUMBER, point)));
    // Then its time is read, as protobuf reads it
    assertArrayEquals(new long[] {7 * SECOND}, wireTimes(wrap(metric)));
    assertArrayEquals(new long[] {1L, 2L},
        ExportMetricsServiceRequest.parseFrom(wrap(metric)).getResourceMetrics(0).getScopeMetrics(0).getMetrics(0)
            .getHistogram().getDataPoints(0).getBucketCountsList().stream().mapToLong(Long::longValue).toArray());
  }

  @Test
  void aFieldTheSchemaDoesNotKnowIsLeftToProtobuf() throws IOException {
    byte[] push = concat(Pushes.push(Pushes.gauge("g", Pushes.point(1, 0, 1.0))), varint(1000, 5));
    assertNull(PushWire.times(push));
    assertArrayEquals(new long[] {SECOND}, PushTimes.parsedTimes(push), "protobuf keeps it as an unknown field");
  }

  @Test
  void aMetricWhoseDataFieldRepeatsIsLeftToProtobufWhichMergesThePoints() throws IOException {
    // Given one metric with two gauge fields (protobuf merges them into one gauge of both points)
    byte[] gauge1 = Gauge.newBuilder().addDataPoints(Pushes.point(1, 0, 1.0)).build().toByteArray();
    byte[] gauge2 = Gauge.newBuilder().addDataPoints(Pushes.point(2, 0, 2.0)).build().toByteArray();
    byte[] metric = concat(bytes(Metric.GAUGE_FIELD_NUMBER, gauge1), bytes(Metric.GAUGE_FIELD_NUMBER, gauge2));
    assertNull(PushWire.times(wrap(metric)));
    assertArrayEquals(new long[] {SECOND, 2 * SECOND}, PushTimes.parsedTimes(wrap(metric)));
  }

  @Test
  void aPointWithTwoTimesIsLeftToProtobufWhichTakesTheLast() throws IOException {
    byte[] point = concat(Pushes.point(1, 0, 1.0).toByteArray(),
        fixed64(NumberDataPoint.TIME_UNIX_NANO_FIELD_NUMBER, 9 * SECOND));
    byte[] metric = bytes(Metric.GAUGE_FIELD_NUMBER, bytes(Gauge.DATA_POINTS_FIELD_NUMBER, point));
    assertNull(PushWire.times(wrap(metric)));
    assertArrayEquals(new long[] {9 * SECOND}, PushTimes.parsedTimes(wrap(metric)));
  }

  @Test
  void brokenPushesAreNotPushesToEither() throws IOException {
    byte[] push = Pushes.push(Pushes.gauge("g", Pushes.point(1, 0, 1.0)));
    byte[] truncated = Arrays.copyOf(push, push.length - 1);
    assertNull(PushWire.times(truncated));
    assertNull(PushTimes.parsedTimes(truncated));
    // A metric name that is not UTF-8: proto3 strings must be, and protobuf rejects the push.
    byte[] badName = wrap(bytes(Metric.NAME_FIELD_NUMBER, new byte[] {'a', (byte) 0xC3, '('}));
    assertNull(PushWire.times(badName));
    assertNull(PushTimes.parsedTimes(badName));
    // A name in UTF-8 beyond ASCII is a string like any other.
    assertNotNull(PushWire.times(wrap(bytes(Metric.NAME_FIELD_NUMBER, "größe".getBytes(StandardCharsets.UTF_8)))));
  }

  @Test
  void messagesNestedDeeperThanItsLimitAreLeftToProtobuf() {
    // Given a point attribute whose value nests arrays far below MAX_DEPTH messages
    AnyValue value = AnyValue.newBuilder().setStringValue("leaf").build();
    for (int i = 0; i < PushWire.MAX_DEPTH; i++) {
      value = AnyValue.newBuilder().setArrayValue(ArrayValue.newBuilder().addValues(value)).build();
    }
    NumberDataPoint point = Pushes.point(1, 0, 1.0).toBuilder()
        .addAttributes(KeyValue.newBuilder().setKey("deep").setValue(value)).build();
    byte[] push = Pushes.push(Pushes.gauge("g", point));
    assertNull(PushWire.times(push));
    assertArrayEquals(new long[] {SECOND}, PushTimes.parsedTimes(push));
  }

  // ---- wire bytes by hand, for the shapes the builders never write ----

  /** A metric's bytes inside a request of one resource and one scope. */
  private static byte[] wrap(byte[] metric) throws IOException {
    byte[] scope = bytes(ScopeMetrics.METRICS_FIELD_NUMBER, metric);
    byte[] resource = bytes(ResourceMetrics.SCOPE_METRICS_FIELD_NUMBER, scope);
    return bytes(ExportMetricsServiceRequest.RESOURCE_METRICS_FIELD_NUMBER, resource);
  }

  private interface Write {
    void to(CodedOutputStream out) throws IOException;
  }

  private static byte[] written(Write write) throws IOException {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    CodedOutputStream out = CodedOutputStream.newInstance(bytes);
    write.to(out);
    out.flush();
    return bytes.toByteArray();
  }

  private static byte[] bytes(int field, byte[] payload) throws IOException {
    return written(out -> out.writeByteArray(field, payload));
  }

  private static byte[] fixed64(int field, long value) throws IOException {
    return written(out -> out.writeFixed64(field, value));
  }

  private static byte[] varint(int field, long value) throws IOException {
    return written(out -> out.writeUInt64(field, value));
  }

  private static byte[] concat(byte[]... parts) {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    for (byte[] part : parts) {
      out.writeBytes(part);
    }
    return out.toByteArray();
  }
}
