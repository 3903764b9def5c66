package dev.kct.otlp;

import com.google.protobuf.InvalidProtocolBufferException;
import io.opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest;
import io.opentelemetry.proto.metrics.v1.ExponentialHistogramDataPoint;
import io.opentelemetry.proto.metrics.v1.HistogramDataPoint;
import io.opentelemetry.proto.metrics.v1.Metric;
import io.opentelemetry.proto.metrics.v1.NumberDataPoint;
import io.opentelemetry.proto.metrics.v1.ResourceMetrics;
import io.opentelemetry.proto.metrics.v1.ScopeMetrics;
import io.opentelemetry.proto.metrics.v1.SummaryDataPoint;
import java.util.function.LongConsumer;
import java.util.stream.LongStream;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.api.java.UDF2;

/**
 * A push's point times, without decoding its points into rows: what a stream over records (ClientWindows)
 * needs to know of a record before aggregating it. {@code PushTimes} gives {@code [earliest, newest]}
 * time_unix_nano of the push's data points (null: not a push, or no points); {@link Before} counts the
 * points before a time (a micro-batch's late points). Times are compared as signed longs, as both decoders
 * store them. Each push is read off its wire bytes ({@link PushWire}), or parsed with protobuf where that is
 * not sure: the same times either way.
 */
public final class PushTimes implements UDF1<byte[], long[]> {
  private static final long serialVersionUID = 1L;

  @Override
  public long[] call(byte[] value) {
    long[] range = {Long.MAX_VALUE, Long.MIN_VALUE};
    boolean[] any = {false};
    if (!each(value, t -> {
      any[0] = true;
      range[0] = Math.min(range[0], t);
      range[1] = Math.max(range[1], t);
    }) || !any[0]) {
      return null;
    }
    return range;
  }

  /** The number of the push's data points with time_unix_nano before {@code untilNanos}. */
  public static final class Before implements UDF2<byte[], Long, Long> {
    private static final long serialVersionUID = 1L;

    @Override
    public Long call(byte[] value, Long untilNanos) {
      long[] n = {0};
      if (untilNanos == null) {
        return 0L;
      }
      long until = untilNanos;
      each(value, t -> {
        if (t < until) {
          n[0]++;
        }
      });
      return n[0];
    }
  }

  /** Every data point's time_unix_nano; false when `value` is not a push (no points, as both decoders). */
  static boolean each(byte[] value, LongConsumer time) {
    long[] read = PushWire.times(value);
    if (read == null) {
      return parsed(value, time);
    }
    for (long t : read) {
      time.accept(t);
    }
    return true;
  }

  /**
   * The push's point times as protobuf's full parse gives them, in their order; null: not a push. What
   * {@link #each} falls back on, and what tests hold {@link PushWire#times} to.
   */
  public static long[] parsedTimes(byte[] value) {
    LongStream.Builder times = LongStream.builder();
    return parsed(value, times::add) ? times.build().toArray() : null;
  }

  private static boolean parsed(byte[] value, LongConsumer time) {
    if (value == null) {
      return false;
    }
    ExportMetricsServiceRequest request;
    try {
      request = ExportMetricsServiceRequest.parseFrom(value);
    } catch (InvalidProtocolBufferException e) {
      return false;
    }
    for (ResourceMetrics rm : request.getResourceMetricsList()) {
      for (ScopeMetrics sm : rm.getScopeMetricsList()) {
        for (Metric metric : sm.getMetricsList()) {
          times(metric, time);
        }
      }
    }
    return true;
  }

  private static void times(Metric metric, LongConsumer time) {
    switch (metric.getDataCase()) {
      case GAUGE:
        for (NumberDataPoint p : metric.getGauge().getDataPointsList()) {
          time.accept(p.getTimeUnixNano());
        }
        break;
      case SUM:
        for (NumberDataPoint p : metric.getSum().getDataPointsList()) {
          time.accept(p.getTimeUnixNano());
        }
        break;
      case HISTOGRAM:
        for (HistogramDataPoint p : metric.getHistogram().getDataPointsList()) {
          time.accept(p.getTimeUnixNano());
        }
        break;
      case EXPONENTIAL_HISTOGRAM:
        for (ExponentialHistogramDataPoint p : metric.getExponentialHistogram().getDataPointsList()) {
          time.accept(p.getTimeUnixNano());
        }
        break;
      case SUMMARY:
        for (SummaryDataPoint p : metric.getSummary().getDataPointsList()) {
          time.accept(p.getTimeUnixNano());
        }
        break;
      default:
        break;
    }
  }
}
