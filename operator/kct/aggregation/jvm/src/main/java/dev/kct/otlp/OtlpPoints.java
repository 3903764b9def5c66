package dev.kct.otlp;

import com.google.protobuf.ByteString;
import com.google.protobuf.InvalidProtocolBufferException;
import io.opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest;
import io.opentelemetry.proto.common.v1.AnyValue;
import io.opentelemetry.proto.common.v1.ArrayValue;
import io.opentelemetry.proto.common.v1.KeyValue;
import io.opentelemetry.proto.common.v1.KeyValueList;
import io.opentelemetry.proto.metrics.v1.ExponentialHistogramDataPoint;
import io.opentelemetry.proto.metrics.v1.HistogramDataPoint;
import io.opentelemetry.proto.metrics.v1.Metric;
import io.opentelemetry.proto.metrics.v1.NumberDataPoint;
import io.opentelemetry.proto.metrics.v1.ResourceMetrics;
import io.opentelemetry.proto.metrics.v1.ScopeMetrics;
import io.opentelemetry.proto.metrics.v1.SummaryDataPoint;
import java.math.BigDecimal;
import java.math.MathContext;
import java.math.RoundingMode;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;

/**
 * Spark SQL function: one OTLP {@code ExportMetricsServiceRequest} (bytes) to its data points, column by
 * column ({@link #RETURN_TYPE_DDL}): one struct per push holding an array per point field, the per-metric
 * fields once per metric ({@code metrics}, indexed by {@code metric_ix}) and the resource attributes once
 * per resource ({@code resources}, indexed by {@code resource_ix}). The job turns the arrays into rows with
 * one {@code posexplode} in Spark SQL; no per-point {@code Row} is built here (building and converting them
 * was most of the decoding time).
 *
 * <p>Mirrors {@code kct.aggregation.decode} (the Python decoder) value for value: attribute values become
 * strings the way Python's {@code str()} renders them (doubles as Python {@code repr}, bytes as hex, arrays
 * and key-value lists as their protobuf text format on one line), integer values become doubles, a metric
 * without data or without points yields nothing, and a record that is not a valid push (or is null) yields
 * no points.
 */
public final class OtlpPoints implements UDF1<byte[], Row> {
  private static final long serialVersionUID = 1L;

  /** The returned struct (Spark DDL), field order as in the rows. */
  public static final String RETURN_TYPE_DDL =
      "STRUCT<resources: ARRAY<MAP<STRING, STRING>>, metrics: ARRAY<STRUCT<metric: STRING, unit: STRING, "
          + "type: STRING, temporality: STRING, monotonic: BOOLEAN>>, resource_ix: ARRAY<INT>, "
          + "metric_ix: ARRAY<INT>, attributes: ARRAY<MAP<STRING, STRING>>, attributes_key: ARRAY<STRING>, "
          + "start_time_unix_nano: ARRAY<BIGINT>, time_unix_nano: ARRAY<BIGINT>, value: ARRAY<DOUBLE>, "
          + "count: ARRAY<BIGINT>, sum: ARRAY<DOUBLE>, bucket_counts: ARRAY<ARRAY<BIGINT>>, "
          + "explicit_bounds: ARRAY<ARRAY<DOUBLE>>>";

  private static final Map<String, String> EMPTY = Collections.emptyMap();
  private static final Row NO_POINTS = new Columns().row();

  /** The columns of one push, filled point by point. */
  private static final class Columns {
    final List<Map<String, String>> resources = new ArrayList<>();
    final List<Row> metrics = new ArrayList<>();
    int size;
    int[] resourceIx = new int[16];
    int[] metricIx = new int[16];
    Object[] attributes = new Object[16];
    String[] attributesKey = new String[16];
    long[] start = new long[16];
    long[] time = new long[16];
    Double[] value = new Double[16];
    Long[] count = new Long[16];
    Double[] sum = new Double[16];
    Object[] buckets = new Object[16];
    Object[] bounds = new Object[16];

    /** Room for one more point; its index. */
    int add(Map<String, String> attrs, long startNanos, long timeNanos) {
      if (size == time.length) {
        int n = size * 2;
        resourceIx = Arrays.copyOf(resourceIx, n);
        metricIx = Arrays.copyOf(metricIx, n);
        attributes = Arrays.copyOf(attributes, n);
        attributesKey = Arrays.copyOf(attributesKey, n);
        start = Arrays.copyOf(start, n);
        time = Arrays.copyOf(time, n);
        value = Arrays.copyOf(value, n);
        count = Arrays.copyOf(count, n);
        sum = Arrays.copyOf(sum, n);
        buckets = Arrays.copyOf(buckets, n);
        bounds = Arrays.copyOf(bounds, n);
      }
      int i = size++;
      resourceIx[i] = resources.size() - 1;
      metricIx[i] = metrics.size() - 1;
      attributes[i] = attrs;
      attributesKey[i] = key(attrs);
      start[i] = startNanos;
      time[i] = timeNanos;
      return i;
    }

    Row row() {
      return RowFactory.create(resources.toArray(), metrics.toArray(), Arrays.copyOf(resourceIx, size),
          Arrays.copyOf(metricIx, size), Arrays.copyOf(attributes, size), Arrays.copyOf(attributesKey, size),
          Arrays.copyOf(start, size), Arrays.copyOf(time, size), Arrays.copyOf(value, size),
          Arrays.copyOf(count, size), Arrays.copyOf(sum, size), Arrays.copyOf(buckets, size),
          Arrays.copyOf(bounds, size));
    }
  }

  @Override
  public Row call(byte[] value) {
    if (value == null) {
      return NO_POINTS;
    }
    ExportMetricsServiceRequest request;
    try {
      request = ExportMetricsServiceRequest.parseFrom(value);
    } catch (InvalidProtocolBufferException e) {
      return NO_POINTS;
    }
    Columns out = new Columns();
    for (ResourceMetrics rm : request.getResourceMetricsList()) {
      out.resources.add(attributes(rm.getResource().getAttributesList()));
      for (ScopeMetrics sm : rm.getScopeMetricsList()) {
        for (Metric metric : sm.getMetricsList()) {
          decodeMetric(out, metric);
        }
      }
    }
    return out.row();
  }

  static String temporality(int value) {
    switch (value) {
      case 1:
        return "delta";
      case 2:
        return "cumulative";
      default:
        return "unspecified";
    }
  }

  private static void decodeMetric(Columns out, Metric metric) {
    String name = metric.getName();
    String unit = metric.getUnit();
    switch (metric.getDataCase()) {
      case GAUGE:
        if (metric.getGauge().getDataPointsCount() > 0) {
          out.metrics.add(RowFactory.create(name, unit, "gauge", null, null));
          for (NumberDataPoint p : metric.getGauge().getDataPointsList()) {
            number(out, p);
          }
        }
        break;
      case SUM:
        if (metric.getSum().getDataPointsCount() > 0) {
          out.metrics.add(RowFactory.create(name, unit, "sum",
              temporality(metric.getSum().getAggregationTemporalityValue()), metric.getSum().getIsMonotonic()));
          for (NumberDataPoint p : metric.getSum().getDataPointsList()) {
            number(out, p);
          }
        }
        break;
      case HISTOGRAM:
        if (metric.getHistogram().getDataPointsCount() > 0) {
          out.metrics.add(RowFactory.create(name, unit, "histogram",
              temporality(metric.getHistogram().getAggregationTemporalityValue()), null));
          for (HistogramDataPoint p : metric.getHistogram().getDataPointsList()) {
            int i = out.add(attributes(p.getAttributesList()), p.getStartTimeUnixNano(), p.getTimeUnixNano());
            out.count[i] = p.getCount();
            out.sum[i] = p.hasSum() ? p.getSum() : null;
            out.buckets[i] = p.getBucketCountsList().toArray(new Long[0]);
            out.bounds[i] = p.getExplicitBoundsList().toArray(new Double[0]);
          }
        }
        break;
      case EXPONENTIAL_HISTOGRAM:
        if (metric.getExponentialHistogram().getDataPointsCount() > 0) {
          out.metrics.add(RowFactory.create(name, unit, "exponential_histogram",
              temporality(metric.getExponentialHistogram().getAggregationTemporalityValue()), null));
          for (ExponentialHistogramDataPoint p : metric.getExponentialHistogram().getDataPointsList()) {
            int i = out.add(attributes(p.getAttributesList()), p.getStartTimeUnixNano(), p.getTimeUnixNano());
            out.count[i] = p.getCount();
            out.sum[i] = p.hasSum() ? p.getSum() : null;
          }
        }
        break;
      case SUMMARY:
        if (metric.getSummary().getDataPointsCount() > 0) {
          out.metrics.add(RowFactory.create(name, unit, "summary", null, null));
          for (SummaryDataPoint p : metric.getSummary().getDataPointsList()) {
            int i = out.add(attributes(p.getAttributesList()), p.getStartTimeUnixNano(), p.getTimeUnixNano());
            out.count[i] = p.getCount();
            out.sum[i] = p.getSum();
          }
        }
        break;
      default: // no data: nothing to emit
        break;
    }
  }

  private static void number(Columns out, NumberDataPoint p) {
    int i = out.add(attributes(p.getAttributesList()), p.getStartTimeUnixNano(), p.getTimeUnixNano());
    out.value[i] = p.getValueCase() == NumberDataPoint.ValueCase.AS_DOUBLE ? p.getAsDouble() : (double) p.getAsInt();
  }

  /** Attributes as strings; a key seen twice keeps its first position and its last value (a Python dict). */
  static Map<String, String> attributes(List<KeyValue> kvs) {
    if (kvs.isEmpty()) {
      return EMPTY;
    }
    Map<String, String> out = new LinkedHashMap<>(kvs.size() * 2);
    for (KeyValue kv : kvs) {
      out.put(kv.getKey(), anyValue(kv.getValue()));
    }
    return out;
  }

  /** {@code k1=v1,k2=v2} sorted by key (code points), "" for no attributes. */
  static String key(Map<String, String> attrs) {
    if (attrs.isEmpty()) {
      return "";
    }
    List<String> keys = new ArrayList<>(attrs.keySet());
    keys.sort(OtlpPoints::compareCodePoints);
    StringBuilder sb = new StringBuilder();
    for (String k : keys) {
      if (sb.length() > 0) {
        sb.append(',');
      }
      sb.append(k).append('=').append(attrs.get(k));
    }
    return sb.toString();
  }

  private static int compareCodePoints(String a, String b) {
    int i = 0;
    int j = 0;
    while (i < a.length() && j < b.length()) {
      int ca = a.codePointAt(i);
      int cb = b.codePointAt(j);
      if (ca != cb) {
        return Integer.compare(ca, cb);
      }
      i += Character.charCount(ca);
      j += Character.charCount(cb);
    }
    return Boolean.compare(i < a.length(), j < b.length());
  }

  static String anyValue(AnyValue v) {
    switch (v.getValueCase()) {
      case STRING_VALUE:
        return v.getStringValue();
      case BOOL_VALUE:
        return v.getBoolValue() ? "true" : "false";
      case INT_VALUE:
        return Long.toString(v.getIntValue());
      case DOUBLE_VALUE:
        return pythonRepr(v.getDoubleValue());
      case BYTES_VALUE:
        return hex(v.getBytesValue());
      case ARRAY_VALUE: {
        StringBuilder sb = new StringBuilder();
        printArray(sb, v.getArrayValue(), "");
        return sb.toString().replace('\n', ' ').strip();
      }
      case KVLIST_VALUE: {
        StringBuilder sb = new StringBuilder();
        printKvList(sb, v.getKvlistValue(), "");
        return sb.toString().replace('\n', ' ').strip();
      }
      default:
        return "";
    }
  }

  private static String hex(ByteString bytes) {
    StringBuilder sb = new StringBuilder(bytes.size() * 2);
    for (int i = 0; i < bytes.size(); i++) {
      int b = bytes.byteAt(i) & 0xff;
      sb.append(Character.forDigit(b >> 4, 16)).append(Character.forDigit(b & 0xf, 16));
    }
    return sb.toString();
  }

  // ---- Python's str() of the AnyValue container messages: protobuf text format, 2-space indents ----

  private static void printArray(StringBuilder sb, ArrayValue array, String indent) {
    for (AnyValue item : array.getValuesList()) {
      sb.append(indent).append("values {\n");
      printAnyValueFields(sb, item, indent + "  ");
      sb.append(indent).append("}\n");
    }
  }

  private static void printKvList(StringBuilder sb, KeyValueList list, String indent) {
    for (KeyValue kv : list.getValuesList()) {
      sb.append(indent).append("values {\n");
      String inner = indent + "  ";
      if (!kv.getKey().isEmpty()) {
        sb.append(inner).append("key: ");
        quoteString(sb, kv.getKey());
        sb.append('\n');
      }
      if (kv.hasValue()) {
        sb.append(inner).append("value {\n");
        printAnyValueFields(sb, kv.getValue(), inner + "  ");
        sb.append(inner).append("}\n");
      }
      sb.append(indent).append("}\n");
    }
  }

  private static void printAnyValueFields(StringBuilder sb, AnyValue v, String indent) {
    switch (v.getValueCase()) {
      case STRING_VALUE:
        sb.append(indent).append("string_value: ");
        quoteString(sb, v.getStringValue());
        sb.append('\n');
        break;
      case BOOL_VALUE:
        sb.append(indent).append("bool_value: ").append(v.getBoolValue() ? "true" : "false").append('\n');
        break;
      case INT_VALUE:
        sb.append(indent).append("int_value: ").append(v.getIntValue()).append('\n');
        break;
      case DOUBLE_VALUE:
        sb.append(indent).append("double_value: ").append(textDouble(v.getDoubleValue())).append('\n');
        break;
      case BYTES_VALUE:
        sb.append(indent).append("bytes_value: ");
        quoteBytes(sb, v.getBytesValue().toByteArray());
        sb.append('\n');
        break;
      case ARRAY_VALUE:
        sb.append(indent).append("array_value {\n");
        printArray(sb, v.getArrayValue(), indent + "  ");
        sb.append(indent).append("}\n");
        break;
      case KVLIST_VALUE:
        sb.append(indent).append("kvlist_value {\n");
        printKvList(sb, v.getKvlistValue(), indent + "  ");
        sb.append(indent).append("}\n");
        break;
      default:
        break;
    }
  }

  // Python's str() of a message is upb's text encoder: string fields escape ASCII controls, DEL, quotes and
  // backslashes (other characters verbatim), bytes fields escape every byte outside printable ASCII (octal).

  private static void quoteString(StringBuilder sb, String text) {
    sb.append('"');
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (c < 32 || c == 127 || c == '"' || c == '\'' || c == '\\') {
        escape(sb, c);
      } else {
        sb.append(c);
      }
    }
    sb.append('"');
  }

  private static void quoteBytes(StringBuilder sb, byte[] bytes) {
    sb.append('"');
    for (byte raw : bytes) {
      int b = raw & 0xff;
      if (b < 32 || b >= 127 || b == '"' || b == '\'' || b == '\\') {
        escape(sb, b);
      } else {
        sb.append((char) b);
      }
    }
    sb.append('"');
  }

  private static void escape(StringBuilder sb, int b) {
    switch (b) {
      case '\n':
        sb.append("\\n");
        break;
      case '\r':
        sb.append("\\r");
        break;
      case '\t':
        sb.append("\\t");
        break;
      case '"':
        sb.append("\\\"");
        break;
      case '\'':
        sb.append("\\'");
        break;
      case '\\':
        sb.append("\\\\");
        break;
      default:
        sb.append('\\').append((char) ('0' + (b >> 6))).append((char) ('0' + ((b >> 3) & 7)))
            .append((char) ('0' + (b & 7)));
    }
  }

  /** A double as upb's text encoder writes it: C's {@code %.15g}, or {@code %.17g} when 15 digits do not
   * round-trip; {@code inf}, {@code -inf}, {@code nan}. */
  static String textDouble(double d) {
    if (Double.isNaN(d)) {
      return "nan";
    }
    if (Double.isInfinite(d)) {
      return d > 0 ? "inf" : "-inf";
    }
    if (d == 0.0) {
      return (Double.doubleToRawLongBits(d) < 0) ? "-0" : "0";
    }
    BigDecimal exact = new BigDecimal(d);
    int precision = 15;
    BigDecimal rounded = exact.round(new MathContext(precision, RoundingMode.HALF_EVEN));
    if (rounded.doubleValue() != d) {
      precision = 17;
      rounded = exact.round(new MathContext(precision, RoundingMode.HALF_EVEN));
    }
    rounded = rounded.stripTrailingZeros();
    String digits = rounded.unscaledValue().abs().toString();
    int exp = digits.length() - rounded.scale() - 1; // exponent of the first digit
    if (exp >= -4 && exp < precision) {
      return rounded.toPlainString();
    }
    return scientific(d < 0, digits, exp);
  }

  private static String scientific(boolean negative, String digits, int exp) {
    StringBuilder sb = new StringBuilder();
    if (negative) {
      sb.append('-');
    }
    sb.append(digits.charAt(0));
    if (digits.length() > 1) {
      sb.append('.').append(digits, 1, digits.length());
    }
    sb.append('e').append(exp < 0 ? '-' : '+');
    int abs = Math.abs(exp);
    if (abs < 10) {
      sb.append('0');
    }
    return sb.append(abs).toString();
  }

  /** Python's {@code repr(float)}: the shortest digits that round-trip, fixed or scientific as Python. */
  static String pythonRepr(double d) {
    if (Double.isNaN(d)) {
      return "nan";
    }
    if (Double.isInfinite(d)) {
      return d > 0 ? "inf" : "-inf";
    }
    if (d == 0.0) {
      return (Double.doubleToRawLongBits(d) < 0) ? "-0.0" : "0.0";
    }
    BigDecimal exact = new BigDecimal(d);
    BigDecimal shortest = exact;
    for (int precision = 1; precision <= 17; precision++) {
      BigDecimal candidate = exact.round(new MathContext(precision, RoundingMode.HALF_EVEN));
      if (candidate.doubleValue() == d) {
        shortest = candidate;
        break;
      }
    }
    shortest = shortest.stripTrailingZeros();
    String digits = shortest.unscaledValue().abs().toString();
    int decpt = digits.length() - shortest.scale(); // value = 0.DIGITS x 10^decpt
    StringBuilder sb = new StringBuilder();
    if (d < 0) {
      sb.append('-');
    }
    if (decpt > -4 && decpt <= 16) {
      if (decpt <= 0) {
        sb.append("0.");
        for (int i = 0; i < -decpt; i++) {
          sb.append('0');
        }
        sb.append(digits);
      } else if (decpt >= digits.length()) {
        sb.append(digits);
        for (int i = digits.length(); i < decpt; i++) {
          sb.append('0');
        }
        sb.append(".0");
      } else {
        sb.append(digits, 0, decpt).append('.').append(digits.substring(decpt));
      }
    } else {
      return scientific(d < 0, digits, decpt - 1);
    }
    return sb.toString();
  }
}
