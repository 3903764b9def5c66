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
import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.apache.spark.api.java.function.FlatMapGroupsFunction;
import org.apache.spark.api.java.function.MapFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * The per-(window, series) aggregation of {@code kct.aggregation.transforms} without a row per data point:
 * the topic's records are grouped per client instance with Spark's own grouping ({@code groupByKey}, a
 * shuffle and sort of the records, not of their points), and one Java loop per client decodes its pushes,
 * files every point into its series (primitive arrays), sorts each series by time and walks it once,
 * window by window, computing what {@code _with_increments}, {@code _level1} and {@code _finish} compute.
 *
 * <p>Output ({@link #schema}): one row per (window, series) with the client_metrics columns, except that
 * the window is {@code _ws} (epoch seconds) and {@code last_time} is {@code _last_us} (epoch microseconds),
 * and {@code window_end}, {@code date}, {@code rate} and the quantiles are left to Spark SQL (the Python
 * wrapper, {@code kct.aggregation.client_windows}), so they are the very same expressions as the SQL path's.
 *
 * <p>Semantics, mirrored value for value (Spark's null, NaN and summation order included): series = client
 * instance x metric x type x temporality x monotonic x attributes_key x bucket bounds; points ordered by
 * (window, time, start time, value, count, sum), nulls first, doubles compared as Spark does (NaN largest,
 * -0.0 = 0.0); a cumulative point's increment is over the series' previous point when that lies at most
 * {@code lookbackWindows} windows before the point's window; a reset (the level dropped, or the start time
 * changed) of a monotonic series counts the whole value; a first-seen point counts its whole value when its
 * start time is within the look-back horizon. Batch only: a stream's per-series last points from earlier
 * micro-batches (the SQL path's {@code previous}) are not taken yet.
 */
public final class ClientWindows {
  private ClientWindows() {}

  /**
   * Records (key, value, headers as Spark's Kafka source gives them) to one row per (window, series).
   *
   * @param labelSpec the broker labels, {@code name:header,header;...}: the client instance id first, then
   *     the label columns in output order; each with the (lower-case) header names it is read from
   */
  public static Dataset<Row> aggregate(
      Dataset<Row> records, long windowSeconds, int lookbackWindows, String labelSpec) {
    Labels labels = Labels.parse(labelSpec);
    return records
        .select("key", "value", "headers")
        .groupByKey(new InstanceOf(labels), Encoders.STRING())
        .flatMapGroups(new PerClient(labels, windowSeconds, lookbackWindows), Encoders.row(schema(labels)));
  }

  /** The output columns (see the class comment): the instance id and label columns are named as in {@code labels}. */
  static StructType schema(Labels labels) {
    List<StructField> fields = new ArrayList<>();
    fields.add(DataTypes.createStructField("_ws", DataTypes.LongType, false));
    fields.add(DataTypes.createStructField("_last_us", DataTypes.LongType, false));
    fields.add(DataTypes.createStructField(labels.instanceLabel, DataTypes.StringType, true));
    for (String name : labels.names) {
      fields.add(DataTypes.createStructField(name, DataTypes.StringType, true));
    }
    fields.add(DataTypes.createStructField("resource_attributes", stringMap(), true));
    fields.add(DataTypes.createStructField("metric", DataTypes.StringType, true));
    fields.add(DataTypes.createStructField("unit", DataTypes.StringType, true));
    fields.add(DataTypes.createStructField("type", DataTypes.StringType, true));
    fields.add(DataTypes.createStructField("temporality", DataTypes.StringType, true));
    fields.add(DataTypes.createStructField("monotonic", DataTypes.BooleanType, true));
    fields.add(DataTypes.createStructField("attributes", stringMap(), true));
    fields.add(DataTypes.createStructField("attributes_key", DataTypes.StringType, true));
    fields.add(DataTypes.createStructField("points", DataTypes.LongType, false));
    for (String name : new String[] {"value_last", "value_min", "value_max", "value_avg", "delta"}) {
      fields.add(DataTypes.createStructField(name, DataTypes.DoubleType, true));
    }
    fields.add(DataTypes.createStructField("resets", DataTypes.IntegerType, true));
    fields.add(DataTypes.createStructField("count", DataTypes.LongType, true));
    fields.add(DataTypes.createStructField("sum", DataTypes.DoubleType, true));
    fields.add(DataTypes.createStructField(
        "explicit_bounds", DataTypes.createArrayType(DataTypes.DoubleType, true), true));
    fields.add(DataTypes.createStructField(
        "bucket_counts", DataTypes.createArrayType(DataTypes.LongType, true), true));
    return DataTypes.createStructType(fields);
  }

  private static org.apache.spark.sql.types.MapType stringMap() {
    return DataTypes.createMapType(DataTypes.StringType, DataTypes.StringType, true);
  }

  /** The broker labels read from record headers, as {@code decode._sql_label}: the last header whose
   * lower-cased name is one of the label's names and whose value is not null, decoded as UTF-8. */
  static final class Labels implements Serializable {
    private static final long serialVersionUID = 1L;
    final String instanceLabel;
    final String[] names; // the label columns (instance id excluded)
    private final HashMap<String, Integer> byHeader = new HashMap<>(); // -> 0 = instance id, i + 1 = names[i]

    private Labels(String instanceLabel, String[] names) {
      this.instanceLabel = instanceLabel;
      this.names = names;
    }

    static Labels parse(String spec) {
      String[] entries = spec.split(";");
      String[] names = new String[entries.length - 1];
      String instance = null;
      List<String[]> headers = new ArrayList<>();
      for (int i = 0; i < entries.length; i++) {
        String[] parts = entries[i].split(":", 2);
        if (i == 0) {
          instance = parts[0];
        } else {
          names[i - 1] = parts[0];
        }
        headers.add(parts[1].split(","));
      }
      Labels out = new Labels(instance, names);
      for (int i = 0; i < headers.size(); i++) {
        for (String h : headers.get(i)) {
          out.byHeader.put(h.toLowerCase(Locale.ROOT), i);
        }
      }
      return out;
    }

    /** [instance id label, label columns...] of one record (null where absent). */
    String[] of(List<Row> headers) {
      String[] out = new String[names.length + 1];
      if (headers == null) {
        return out;
      }
      for (Row h : headers) {
        if (h == null || h.isNullAt(0) || h.isNullAt(1)) {
          continue;
        }
        Integer ix = byHeader.get(h.getString(0).toLowerCase(Locale.ROOT));
        if (ix != null) {
          out[ix] = new String((byte[]) h.get(1), StandardCharsets.UTF_8);
        }
      }
      return out;
    }

    /** The instance id as the SQL decoder takes it: the header if not empty, else the record key if not empty. */
    static String instance(String[] labels, Row record) {
      if (labels[0] != null && !labels[0].isEmpty()) {
        return labels[0];
      }
      byte[] key = record.isNullAt(0) ? null : (byte[]) record.get(0);
      return key == null || key.length == 0 ? null : new String(key, StandardCharsets.UTF_8);
    }
  }

  private static List<Row> headers(Row record) {
    return record.isNullAt(2) ? null : record.getList(2);
  }

  /** The grouping key of a record: its client instance id. */
  static final class InstanceOf implements MapFunction<Row, String> {
    private static final long serialVersionUID = 1L;
    private final Labels labels;

    InstanceOf(Labels labels) {
      this.labels = labels;
    }

    @Override
    public String call(Row record) {
      return Labels.instance(labels.of(headers(record)), record);
    }
  }

  /** One client's records -> its (window, series) rows. */
  static final class PerClient implements FlatMapGroupsFunction<String, Row, Row> {
    private static final long serialVersionUID = 1L;
    private final Labels labels;
    private final long size;
    private final int lookback;

    PerClient(Labels labels, long size, int lookback) {
      this.labels = labels;
      this.size = size;
      this.lookback = lookback;
    }

    @Override
    public Iterator<Row> call(String instance, Iterator<Row> records) {
      Client client = new Client();
      while (records.hasNext()) {
        Row record = records.next();
        byte[] value = record.isNullAt(1) ? null : (byte[]) record.get(1);
        if (value == null) {
          continue;
        }
        ExportMetricsServiceRequest request;
        try {
          request = ExportMetricsServiceRequest.parseFrom(value);
        } catch (InvalidProtocolBufferException e) {
          continue; // not a push: no points, as both decoders
        }
        String[] recordLabels = labels.of(headers(record));
        for (ResourceMetrics rm : request.getResourceMetricsList()) {
          Push push = new Push(recordLabels, OtlpPoints.attributes(rm.getResource().getAttributesList()));
          for (ScopeMetrics sm : rm.getScopeMetricsList()) {
            for (Metric metric : sm.getMetricsList()) {
              client.add(push, metric);
            }
          }
        }
      }
      List<Row> out = new ArrayList<>();
      for (Series series : client.series()) {
        series.emit(instance, size, lookback, out);
      }
      return out.iterator();
    }
  }

  /** What a point shares with its push: the record's labels and its resource's attributes. */
  record Push(String[] labels, Map<String, String> resource) {}

  /** A series' identity within a client, minus the attributes (and bucket bounds): one lookup per metric. */
  record MetricKey(String metric, String type, String temporality, Boolean monotonic) {}

  /** Histograms are also told apart by their bucket bounds (List equality: Double.equals, as Spark's string of them). */
  record HistogramKey(String attributesKey, List<Double> bounds) {}

  /** One client's series, filled push by push. */
  static final class Client {
    private final HashMap<MetricKey, HashMap<Object, Series>> byMetric = new HashMap<>();
    private final List<Series> all = new ArrayList<>();

    List<Series> series() {
      return all;
    }

    private HashMap<Object, Series> metric(String name, String type, String temporality, Boolean monotonic) {
      return byMetric.computeIfAbsent(new MetricKey(name, type, temporality, monotonic), k -> new HashMap<>());
    }

    private Series series(HashMap<Object, Series> m, MetricKey key, Object inner, String attributesKey) {
      Series s = m.get(inner);
      if (s == null) {
        s = new Series(key, attributesKey);
        m.put(inner, s);
        all.add(s);
      }
      return s;
    }

    void add(Push push, Metric metric) {
      String name = metric.getName();
      String unit = metric.getUnit();
      switch (metric.getDataCase()) {
        case GAUGE:
          numbers(push, unit, new MetricKey(name, "gauge", null, null), metric.getGauge().getDataPointsList());
          break;
        case SUM:
          numbers(push, unit, new MetricKey(name, "sum",
              OtlpPoints.temporality(metric.getSum().getAggregationTemporalityValue()),
              metric.getSum().getIsMonotonic()), metric.getSum().getDataPointsList());
          break;
        case HISTOGRAM: {
          MetricKey key = new MetricKey(name, "histogram",
              OtlpPoints.temporality(metric.getHistogram().getAggregationTemporalityValue()), null);
          HashMap<Object, Series> m = null;
          for (HistogramDataPoint p : metric.getHistogram().getDataPointsList()) {
            m = m == null ? metric(key.metric(), key.type(), key.temporality(), null) : m;
            Map<String, String> attrs = OtlpPoints.attributes(p.getAttributesList());
            String ak = OtlpPoints.key(attrs);
            List<Double> bounds = p.getExplicitBoundsList();
            Series s = series(m, key, new HistogramKey(ak, bounds), ak);
            int i = s.add(push, unit, attrs, p.getStartTimeUnixNano(), p.getTimeUnixNano());
            s.count[i] = p.getCount();
            s.hasSum[i] = p.hasSum();
            s.sum[i] = p.getSum();
            s.buckets[i] = p.getBucketCountsList();
            s.bounds[i] = bounds;
          }
          break;
        }
        case EXPONENTIAL_HISTOGRAM: {
          MetricKey key = new MetricKey(name, "exponential_histogram",
              OtlpPoints.temporality(metric.getExponentialHistogram().getAggregationTemporalityValue()), null);
          HashMap<Object, Series> m = null;
          for (ExponentialHistogramDataPoint p : metric.getExponentialHistogram().getDataPointsList()) {
            m = m == null ? metric(key.metric(), key.type(), key.temporality(), null) : m;
            Map<String, String> attrs = OtlpPoints.attributes(p.getAttributesList());
            String ak = OtlpPoints.key(attrs);
            Series s = series(m, key, ak, ak);
            int i = s.add(push, unit, attrs, p.getStartTimeUnixNano(), p.getTimeUnixNano());
            s.count[i] = p.getCount();
            s.hasSum[i] = p.hasSum();
            s.sum[i] = p.getSum();
          }
          break;
        }
        case SUMMARY: {
          MetricKey key = new MetricKey(name, "summary", null, null);
          HashMap<Object, Series> m = null;
          for (SummaryDataPoint p : metric.getSummary().getDataPointsList()) {
            m = m == null ? metric(key.metric(), key.type(), null, null) : m;
            Map<String, String> attrs = OtlpPoints.attributes(p.getAttributesList());
            String ak = OtlpPoints.key(attrs);
            Series s = series(m, key, ak, ak);
            int i = s.add(push, unit, attrs, p.getStartTimeUnixNano(), p.getTimeUnixNano());
            s.count[i] = p.getCount();
            s.hasSum[i] = true;
            s.sum[i] = p.getSum();
          }
          break;
        }
        default: // no data: no points
          break;
      }
    }

    private void numbers(Push push, String unit, MetricKey key, List<NumberDataPoint> points) {
      if (points.isEmpty()) {
        return;
      }
      HashMap<Object, Series> m = metric(key.metric(), key.type(), key.temporality(), key.monotonic());
      for (NumberDataPoint p : points) {
        Map<String, String> attrs = OtlpPoints.attributes(p.getAttributesList());
        String ak = OtlpPoints.key(attrs);
        Series s = series(m, key, ak, ak);
        int i = s.add(push, unit, attrs, p.getStartTimeUnixNano(), p.getTimeUnixNano());
        s.value[i] = p.getValueCase() == NumberDataPoint.ValueCase.AS_DOUBLE ? p.getAsDouble() : (double) p.getAsInt();
      }
    }
  }

  /** Spark's order of doubles (SQLOrderingUtil.compareDoubles): -0.0 equals 0.0, NaN equals NaN and is largest. */
  static int compareDoubles(double x, double y) {
    return x == y ? 0 : Double.compare(x, y);
  }

  /** One series' points (column arrays), then its windows. */
  static final class Series {
    final MetricKey key;
    final String attributesKey;
    final boolean numeric;
    final boolean histogram;
    int n;
    long[] time = new long[8];
    long[] start = new long[8];
    double[] value = new double[8];
    long[] count = new long[8];
    double[] sum = new double[8];
    boolean[] hasSum = new boolean[8];
    Object[] push = new Object[8];
    Object[] unit = new Object[8];
    Object[] attrs = new Object[8];
    Object[] buckets;
    Object[] bounds;

    Series(MetricKey key, String attributesKey) {
      this.key = key;
      this.attributesKey = attributesKey;
      this.numeric = key.type().equals("gauge") || key.type().equals("sum");
      this.histogram = key.type().equals("histogram");
      if (histogram) {
        buckets = new Object[8];
        bounds = new Object[8];
      }
    }

    int add(Push p, String u, Map<String, String> a, long startNanos, long timeNanos) {
      if (n == time.length) {
        int m = n * 2;
        time = Arrays.copyOf(time, m);
        start = Arrays.copyOf(start, m);
        value = Arrays.copyOf(value, m);
        count = Arrays.copyOf(count, m);
        sum = Arrays.copyOf(sum, m);
        hasSum = Arrays.copyOf(hasSum, m);
        push = Arrays.copyOf(push, m);
        unit = Arrays.copyOf(unit, m);
        attrs = Arrays.copyOf(attrs, m);
        if (histogram) {
          buckets = Arrays.copyOf(buckets, m);
          bounds = Arrays.copyOf(bounds, m);
        }
      }
      int i = n++;
      push[i] = p;
      unit[i] = u;
      attrs[i] = a;
      start[i] = startNanos;
      time[i] = timeNanos;
      return i;
    }

    /** The SQL path's order of a series' points: time (hence window), start, value, count, sum; nulls first. */
    int compare(int a, int b) {
      int c = Long.compare(time[a], time[b]);
      if (c != 0) {
        return c;
      }
      c = Long.compare(start[a], start[b]);
      if (c != 0) {
        return c;
      }
      if (numeric) {
        return compareDoubles(value[a], value[b]);
      }
      c = Long.compare(count[a], count[b]);
      if (c != 0) {
        return c;
      }
      if (hasSum[a] != hasSum[b]) {
        return hasSum[a] ? 1 : -1;
      }
      return hasSum[a] ? compareDoubles(sum[a], sum[b]) : 0;
    }

    int[] order() {
      int[] order = new int[n];
      boolean sorted = true;
      for (int i = 0; i < n; i++) {
        order[i] = i;
        if (i > 0 && sorted && compare(i - 1, i) > 0) {
          sorted = false;
        }
      }
      if (sorted) {
        return order;
      }
      Integer[] boxed = new Integer[n];
      for (int i = 0; i < n; i++) {
        boxed[i] = i;
      }
      Arrays.sort(boxed, this::compare);
      for (int i = 0; i < n; i++) {
        order[i] = boxed[i];
      }
      return order;
    }

    void emit(String instance, long size, int lookback, List<Row> out) {
      long sizeNanos = size * 1_000_000_000L;
      Window w = null;
      int prev = -1;
      for (int j : order()) {
        long ws = (time[j] / sizeNanos) * size;
        if (w == null || w.ws != ws) {
          if (w != null) {
            out.add(w.row(instance, size));
          }
          w = new Window(this, ws);
        }
        w.add(j, prev, (ws - lookback * size) * 1_000_000_000L);
        prev = j;
      }
      if (w != null) {
        out.add(w.row(instance, size));
      }
    }
  }

  /** The running aggregates of one (window, series): `_level1`'s columns, then `_finish`'s. */
  static final class Window {
    final Series s;
    final long ws;
    final boolean cumulative;
    final boolean monotonic;
    long points;
    int last = -1;
    long lastTimeMicros = Long.MIN_VALUE;
    double min;
    double max;
    double valueSum;
    long countSum;
    double sumSum;
    boolean anySum;
    double incV;
    long incC;
    double incH;
    long incR;
    Long[] buckets;

    Window(Series s, long ws) {
      this.s = s;
      this.ws = ws;
      String temporality = s.key.temporality();
      this.cumulative = "cumulative".equals(temporality) && (s.numeric ? s.key.type().equals("sum") : s.histogram);
      this.monotonic = s.histogram || Boolean.TRUE.equals(s.key.monotonic());
    }

    void add(int j, int prev, long horizonNanos) {
      points++;
      last = j;
      lastTimeMicros = Math.max(lastTimeMicros, s.time[j] / 1000);
      if (s.numeric) {
        double v = s.value[j];
        if (points == 1) {
          min = v;
          max = v;
        } else {
          min = compareDoubles(v, min) < 0 ? v : min;
          max = compareDoubles(v, max) > 0 ? v : max;
        }
        valueSum = valueSum + v;
      } else {
        countSum += s.count[j];
        if (s.hasSum[j]) {
          sumSum = anySum ? sumSum + s.sum[j] : 0.0 + s.sum[j];
          anySum = true;
        }
      }
      Long[] pointBuckets = null;
      if (cumulative) {
        pointBuckets = increment(j, prev, horizonNanos);
      } else if (s.histogram) {
        pointBuckets = boxed(j);
      }
      if (s.histogram) {
        buckets = buckets == null ? pointBuckets : zip(buckets, pointBuckets, true);
      }
    }

    /** `_with_increments` for one cumulative point: adds to the increments; its bucket increments. */
    private Long[] increment(int j, int prev, long horizonNanos) {
      boolean usable = prev >= 0 && s.time[prev] >= horizonNanos;
      boolean fresh = s.start[j] > 0 && s.start[j] >= horizonNanos;
      boolean reset = false;
      if (usable) {
        boolean dropped = s.histogram ? s.count[j] < s.count[prev] : compareDoubles(s.value[j], s.value[prev]) < 0;
        reset = dropped || s.start[j] != s.start[prev];
      }
      boolean whole = (!usable && fresh && monotonic) || (reset && monotonic);
      incR += reset && monotonic ? 1 : 0;
      if (s.numeric) {
        incV = incV + (whole ? s.value[j] : usable ? s.value[j] - s.value[prev] : 0.0);
        return null;
      }
      double h = s.hasSum[j] ? s.sum[j] : 0.0;
      double ph = usable && s.hasSum[prev] ? s.sum[prev] : 0.0;
      incC += whole ? s.count[j] : usable ? s.count[j] - s.count[prev] : 0L;
      incH = incH + (whole ? h : usable ? h - ph : 0.0);
      Long[] b = boxed(j);
      if (whole) {
        return b;
      }
      if (usable) {
        return zip(b, boxed(prev), false);
      }
      Long[] zeros = new Long[b.length];
      Arrays.fill(zeros, 0L);
      return zeros;
    }

    private Long[] boxed(int j) {
      @SuppressWarnings("unchecked")
      List<Long> list = (List<Long>) s.buckets[j];
      return list.toArray(new Long[0]);
    }

    /** Spark's zip_with(a, b, x +/- y): as long as the longer array, null where either is null or missing. */
    private static Long[] zip(Long[] a, Long[] b, boolean add) {
      Long[] out = new Long[Math.max(a.length, b.length)];
      for (int i = 0; i < out.length; i++) {
        Long x = i < a.length ? a[i] : null;
        Long y = i < b.length ? b[i] : null;
        out[i] = x == null || y == null ? null : add ? x + y : x - y;
      }
      return out;
    }

    Row row(String instance, long size) {
      String type = s.key.type();
      boolean isSum = type.equals("sum");
      boolean snapshot = type.equals("exponential_histogram") || type.equals("summary");
      boolean lastSnapshot = "cumulative".equals(s.key.temporality()) || type.equals("summary");
      Push push = (Push) s.push[last];
      Object[] v = new Object[2 + 1 + push.labels().length - 1 + 23];
      int k = 0;
      v[k++] = ws;
      v[k++] = lastTimeMicros;
      v[k++] = instance;
      for (int i = 1; i < push.labels().length; i++) {
        v[k++] = push.labels()[i];
      }
      v[k++] = scala(push.resource());
      v[k++] = s.key.metric();
      v[k++] = s.unit[last];
      v[k++] = type;
      v[k++] = s.key.temporality();
      v[k++] = s.key.monotonic();
      @SuppressWarnings("unchecked")
      Map<String, String> attributes = (Map<String, String>) s.attrs[last];
      v[k++] = scala(attributes);
      v[k++] = s.attributesKey;
      v[k++] = points;
      boolean values = s.numeric;
      v[k++] = values ? (Object) s.value[last] : null;
      v[k++] = values ? (Object) min : null;
      v[k++] = values ? (Object) max : null;
      v[k++] = values ? (Object) (valueSum / points) : null;
      v[k++] = isSum ? (Object) (cumulative ? incV : valueSum) : null;
      v[k++] = cumulative ? (Object) (int) incR : (isSum || s.histogram) ? (Object) 0 : null;
      Object count = null;
      Object total = null;
      if (s.histogram) {
        count = cumulative ? incC : countSum;
        total = cumulative ? incH : anySum ? sumSum : 0.0;
      } else if (snapshot) {
        count = lastSnapshot ? s.count[last] : countSum;
        total = lastSnapshot ? (s.hasSum[last] ? (Object) s.sum[last] : null) : anySum ? (Object) sumSum : null;
      }
      v[k++] = count;
      v[k++] = total;
      if (s.histogram) {
        @SuppressWarnings("unchecked")
        List<Double> bounds = (List<Double>) s.bounds[last];
        v[k++] = bounds.toArray(new Double[0]);
        v[k++] = buckets;
      } else {
        v[k++] = null;
        v[k++] = null;
      }
      return RowFactory.create(Arrays.copyOf(v, k));
    }

    private static scala.collection.Map<String, String> scala(Map<String, String> map) {
      return scala.jdk.javaapi.CollectionConverters.asScala(map);
    }
  }
}
