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
import java.math.BigDecimal;
import java.time.Instant;
import java.time.LocalDate;
import java.time.ZoneId;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.Objects;
import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.util.ArrayBasedMapData;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The per-(window, series) aggregation of {@code kct.aggregation.transforms} without a row per data point:
 * the topic's records are shuffled per client instance with Spark's own shuffle (repartitioned by instance
 * id and sorted by it within partitions: the records move, ~100 points each, not their points), and one
 * Java loop per client decodes its pushes, files every point into its series (column arrays), sorts each
 * series by time (when not already in order) and walks it once, window by window, computing what
 * {@code _with_increments}, {@code _level1} and {@code _finish} compute, quantiles included.
 *
 * <p>Output ({@link #schema}): the client_metrics rows ({@code transforms.CLIENT_METRICS_COLUMNS}, same
 * types), one per (window, series), as Spark InternalRows.
 *
 * <p>Semantics, mirrored value for value (Spark's null, NaN and summation order included): series = client
 * instance x metric x type x temporality x monotonic x attributes_key x bucket bounds; points ordered by
 * (window, time, start time, value, count, sum), nulls first, doubles compared as Spark does (NaN largest,
 * -0.0 = 0.0); a cumulative point's increment is over the series' previous point when that lies at most
 * {@code lookbackWindows} windows before the point's window; a reset (the level dropped, or the start time
 * changed) of a monotonic series counts the whole value; a first-seen point counts its whole value when its
 * start time is within the look-back horizon. For a stream, each series' last point from earlier micro-batches
 * (the SQL path's {@code previous}) seeds it, and a time range restricts the points taken.
 */
public final class ClientWindows {
  private ClientWindows() {}

  /**
   * Records, each with its client instance id, to one row per (window, series). The records are
   * repartitioned by instance id and sorted by it within each partition (Spark's shuffle and sort, of the
   * records), then each partition's clients are aggregated one after the other; rows go in and out as
   * Spark's InternalRow (no encoder: with Row and Encoders.row, Spark's generated serializer of the output
   * rows took ~40 % of the CPU samples).
   *
   * @param keyed columns {@code _cid} (the client instance id, as the SQL decoder computes it), {@code value}
   *     (the push) and {@code headers} (as Spark's Kafka source gives them)
   * @param labelSpec the broker labels, {@code name:header,header;...}: the client instance id column's
   *     name first, then the label columns in output order, each with the header names it is read from
   * @param quantileSpec the quantile columns, {@code p50=0.5;...}
   * @param timeZone the session time zone, in which {@code date} is the window start's date
   */
  public static Dataset<Row> aggregate(Dataset<Row> keyed, long windowSeconds, int lookbackWindows,
      String labelSpec, String quantileSpec, String timeZone) {
    return aggregate(keyed, null, false, windowSeconds, lookbackWindows, labelSpec, quantileSpec, timeZone);
  }

  /**
   * As {@link #aggregate(Dataset, long, int, String, String, String)}, for a stream: {@code previous} (may be
   * null) holds each cumulative series' last point from earlier micro-batches ({@code LAST_POINT_COLUMNS}
   * of {@code transforms}), which a series' first point here pairs with; with {@code withLast}, the rows
   * also hold each cumulative series' newest point (a point here, or its {@code previous} row): column
   * {@code _kind} is 0 for client_metrics rows, 1 for last points (their LAST_POINT_COLUMNS and their window's
   * {@code date} filled, with {@code time_unix_nano}, {@code start_time_unix_nano} and {@code value} as extra
   * columns).
   */
  public static Dataset<Row> aggregate(Dataset<Row> keyed, Dataset<Row> previous, boolean withLast,
      long windowSeconds, int lookbackWindows, String labelSpec, String quantileSpec, String timeZone) {
    return aggregate(keyed, previous, withLast, Long.MIN_VALUE, Long.MAX_VALUE, windowSeconds, lookbackWindows,
        labelSpec, quantileSpec, timeZone);
  }

  /**
   * As {@link #aggregate(Dataset, Dataset, boolean, long, int, String, String, String)}, over the points with
   * {@code fromNanos <= time_unix_nano < untilNanos} only (the others are ignored, as if not in the push): a
   * stream's micro-batch keeps the records of windows not final yet and aggregates only the windows it
   * finalizes, without the points of windows finalized earlier.
   */
  public static Dataset<Row> aggregate(Dataset<Row> keyed, Dataset<Row> previous, boolean withLast,
      long fromNanos, long untilNanos, long windowSeconds, int lookbackWindows, String labelSpec,
      String quantileSpec, String timeZone) {
    Labels labels = Labels.parse(labelSpec);
    Spec spec = new Spec(windowSeconds, lookbackWindows, timeZone, quantileSpec, labels.names.length, withLast);
    spec.fromNanos = fromNanos;
    spec.untilNanos = untilNanos;
    Dataset<Row> input = keyed.select("_cid", "value", "headers");
    if (previous != null) {
      Dataset<Row> seeds = previous.select(functions.col("client_instance_id").as("_cid"), functions.struct(
          "metric", "type", "temporality", "monotonic", "attributes_key", "explicit_bounds", "time_unix_nano",
          "start_time_unix_nano", "value", "count", "sum", "bucket_counts").as("_seed"));
      input = input.unionByName(seeds, true);
    }
    org.apache.spark.sql.classic.Dataset<Row> sorted = (org.apache.spark.sql.classic.Dataset<Row>) input
        .repartition(functions.col("_cid"))
        .sortWithinPartitions("_cid");
    RDD<InternalRow> records = sorted.queryExecution().toRdd();
    RDD<InternalRow> rows = records.toJavaRDD().mapPartitions(new PerClient(labels, spec, CHUNK_ROWS)).rdd();
    return sorted.sparkSession().internalCreateDataFrame(rows, schema(labels, spec), false);
  }

  /**
   * How many rows a partition's clients fill before {@link TableOrder} orders them and hands them on (at a
   * client's end): the tables' sort then merges runs of this many rows, and a task holds this many row objects
   * at once (a few MB). Measured over 180,000 rows: 16,384 wrote as fast as 65,536 (0.83-0.85 vs 0.82-0.89
   * task CPU-s, 0.96-1.21 in client order) and left the collector half the work in the build.
   */
  static final int CHUNK_ROWS = 1 << 14;

  /** What the rows are computed with: window size, look-back, the session's time zone (for `date`) and the
   * quantiles, {@code name=q;...} with q as the SQL path writes it (a decimal literal there). */
  static final class Spec implements Serializable {
    private static final long serialVersionUID = 1L;
    final long size;
    final int lookback;
    final String zone;
    final String[] quantileNames;
    final BigDecimal[] quantiles;
    final int labelCount;
    final boolean withLast;
    long fromNanos = Long.MIN_VALUE; // points outside [fromNanos, untilNanos) are ignored
    long untilNanos = Long.MAX_VALUE;

    boolean takes(long timeNanos) {
      return timeNanos >= fromNanos && timeNanos < untilNanos;
    }

    /** The last day {@link #date} computed: immutable, so a thread reads a whole one or an older one. */
    private record Day(long from, long until, UTF8String date) {}

    private transient volatile Day day;

    /** The date of a window starting at {@code ws} (epoch seconds) in the zone, as `date`. Rows come window after
     * window, nearly all of one day: the day found last is kept, rather than the zone parsed and the date
     * formatted for every row. */
    UTF8String date(long ws) {
      Day d = day;
      if (d == null || ws < d.from() || ws >= d.until()) {
        ZoneId z = ZoneId.of(zone);
        LocalDate date = LocalDate.ofInstant(Instant.ofEpochSecond(ws), z);
        d = new Day(date.atStartOfDay(z).toEpochSecond(), date.plusDays(1).atStartOfDay(z).toEpochSecond(),
            UTF8String.fromString(date.toString()));
        day = d;
      }
      return d.date();
    }

    Spec(long size, int lookback, String zone, String quantileSpec, int labelCount, boolean withLast) {
      this.size = size;
      this.lookback = lookback;
      this.zone = zone;
      this.labelCount = labelCount;
      this.withLast = withLast;
      quantileNames = Quantiles.names(quantileSpec);
      quantiles = Quantiles.levels(quantileSpec);
    }
  }

  /** The output columns (see the class comment): the instance id and label columns are named as in {@code labels}. */
  static StructType schema(Labels labels, Spec spec) {
    List<StructField> fields = new ArrayList<>();
    fields.add(DataTypes.createStructField("window_start", DataTypes.TimestampType, true));
    fields.add(DataTypes.createStructField("window_end", DataTypes.TimestampType, true));
    // Never null (a stream's last points hold their window's date too): a partitioned write then copies no row
    // to turn an empty partition value into null (Spark's Empty2Null projects every row of a nullable string
    // partition column, after the sort: the client_metrics write of 180,000 rows took 0.81-0.93 task CPU-s
    // with it, 0.72-0.78 without).
    fields.add(DataTypes.createStructField("date", DataTypes.StringType, false));
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
    fields.add(DataTypes.createStructField("last_time", DataTypes.TimestampType, true));
    for (String name : new String[] {"value_last", "value_min", "value_max", "value_avg", "delta", "rate"}) {
      fields.add(DataTypes.createStructField(name, DataTypes.DoubleType, true));
    }
    fields.add(DataTypes.createStructField("resets", DataTypes.IntegerType, true));
    fields.add(DataTypes.createStructField("count", DataTypes.LongType, true));
    fields.add(DataTypes.createStructField("sum", DataTypes.DoubleType, true));
    fields.add(DataTypes.createStructField(
        "explicit_bounds", DataTypes.createArrayType(DataTypes.DoubleType, true), true));
    fields.add(DataTypes.createStructField(
        "bucket_counts", DataTypes.createArrayType(DataTypes.LongType, true), true));
    for (String name : spec.quantileNames) {
      fields.add(DataTypes.createStructField(name, DataTypes.DoubleType, true));
    }
    if (spec.withLast) {
      fields.add(DataTypes.createStructField("_kind", DataTypes.IntegerType, false));
      fields.add(DataTypes.createStructField("time_unix_nano", DataTypes.LongType, true));
      fields.add(DataTypes.createStructField("start_time_unix_nano", DataTypes.LongType, true));
      fields.add(DataTypes.createStructField("value", DataTypes.DoubleType, true));
    }
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

    /** [instance id label, label columns...] of one record (null where absent), as Spark strings. */
    UTF8String[] of(ArrayData headers) {
      UTF8String[] out = new UTF8String[names.length + 1];
      if (headers == null) {
        return out;
      }
      for (int i = 0; i < headers.numElements(); i++) {
        if (headers.isNullAt(i)) {
          continue;
        }
        InternalRow h = headers.getStruct(i, 2);
        if (h.isNullAt(0) || h.isNullAt(1)) {
          continue;
        }
        Integer ix = byHeader.get(h.getUTF8String(0).toString().toLowerCase(Locale.ROOT));
        if (ix != null) {
          out[ix] = UTF8String.fromBytes(h.getBinary(1)); // CAST(binary AS STRING): the bytes as they are
        }
      }
      return out;
    }
  }

  /** One partition's records, sorted by client instance id -> the (window, series) rows, client by client. */
  static final class PerClient implements FlatMapFunction<Iterator<InternalRow>, InternalRow> {
    private static final long serialVersionUID = 1L;
    private final Labels labels;
    private final Spec spec;
    private final int chunkRows;

    PerClient(Labels labels, Spec spec, int chunkRows) {
      this.labels = labels;
      this.spec = spec;
      this.chunkRows = chunkRows;
    }

    @Override
    public Iterator<InternalRow> call(Iterator<InternalRow> records) {
      TableOrder tableOrder = new TableOrder(schema(labels, spec));
      return new Iterator<>() {
        private final ArrayDeque<InternalRow> ready = new ArrayDeque<>();
        private final List<InternalRow> chunk = new ArrayList<>(); // clients' rows not in table order yet
        private final StringMaps maps = new StringMaps();
        private InternalRow pending; // the first record of the next client, read ahead

        @Override
        public boolean hasNext() {
          while (ready.isEmpty()) {
            if (pending != null || records.hasNext()) {
              nextClient();
              if (chunk.size() >= chunkRows) {
                flush();
              }
            } else if (!chunk.isEmpty()) {
              flush();
            } else {
              break;
            }
          }
          return !ready.isEmpty();
        }

        private void flush() {
          tableOrder.sortInto(chunk, ready);
          chunk.clear();
        }

        @Override
        public InternalRow next() {
          if (!hasNext()) {
            throw new NoSuchElementException();
          }
          return ready.poll();
        }

        private void nextClient() {
          InternalRow first = pending != null ? pending : records.next();
          pending = null;
          UTF8String instance = first.isNullAt(0) ? null : first.getUTF8String(0).clone();
          Client client = new Client(spec);
          add(client, first);
          while (records.hasNext()) {
            InternalRow record = records.next();
            UTF8String id = record.isNullAt(0) ? null : record.getUTF8String(0);
            if (!Objects.equals(id, instance)) {
              pending = record.copy(); // the source may reuse its row object
              break;
            }
            add(client, record);
          }
          for (Series series : client.series()) {
            series.emit(instance, spec, maps, chunk);
          }
        }
      };
    }

    private void add(Client client, InternalRow record) {
      if (record.numFields() > 3 && !record.isNullAt(3)) {
        client.seed(record.getStruct(3, 12).copy());
        return;
      }
      if (record.isNullAt(1)) {
        return;
      }
      ExportMetricsServiceRequest request;
      try {
        request = ExportMetricsServiceRequest.parseFrom(record.getBinary(1));
      } catch (InvalidProtocolBufferException e) {
        return; // not a push: no points, as both decoders
      }
      UTF8String[] recordLabels = labels.of(record.isNullAt(2) ? null : record.getArray(2));
      for (ResourceMetrics rm : request.getResourceMetricsList()) {
        Push push = new Push(recordLabels, OtlpPoints.attributes(rm.getResource().getAttributesList()));
        for (ScopeMetrics sm : rm.getScopeMetricsList()) {
          for (Metric metric : sm.getMetricsList()) {
            client.add(push, metric);
          }
        }
      }
    }
  }

  /**
   * Rows in the order the tables are written in ({@code kct.aggregation.outputs}: partitioned by date, each date's
   * rows sorted by metric, then window start; strings by their UTF-8 bytes and nulls first, as Spark sorts
   * them), a chunk of rows at a time. The writes sort again (a partitioned write must, and cannot know the
   * order), but Spark's sort (TimSort) over a few runs in order takes a few comparisons a row where rows in
   * client order took ~17 (n log n): that sort was ~13 % of a warm run's task samples. Rows that are not
   * client_metrics rows (a stream's last points, {@code _kind} 1) follow the chunk's others, in their order.
   */
  static final class TableOrder {
    private final int startAt;
    private final int dateAt;
    private final int metricAt;
    private final int kindAt; // -1: every row is a client_metrics row

    TableOrder(StructType schema) {
      startAt = schema.fieldIndex("window_start");
      dateAt = schema.fieldIndex("date");
      metricAt = schema.fieldIndex("metric");
      kindAt = Arrays.asList(schema.fieldNames()).indexOf("_kind");
    }

    /** A (date, metric) group of rows: a window's rows share their series' strings, so mostly found by identity. */
    private record Group(UTF8String date, UTF8String metric) {}

    private static int compareNullsFirst(UTF8String a, UTF8String b) {
      if (a == null || b == null) {
        return a == null ? (b == null ? 0 : -1) : 1;
      }
      return a.binaryCompare(b);
    }

    void sortInto(List<InternalRow> rows, Collection<InternalRow> out) {
      int n = rows.size();
      int[] picked = new int[n]; // the client_metrics rows' positions
      int[] group = new int[n];
      long[] start = new long[n];
      List<InternalRow> others = new ArrayList<>();
      HashMap<Group, Integer> groups = new HashMap<>();
      List<Group> found = new ArrayList<>();
      UTF8String lastDate = null;
      UTF8String lastMetric = null;
      int lastGroup = -1;
      int m = 0;
      for (int i = 0; i < n; i++) {
        InternalRow r = rows.get(i);
        if (kindAt >= 0 && r.getInt(kindAt) != 0) {
          others.add(r);
          continue;
        }
        UTF8String date = r.isNullAt(dateAt) ? null : r.getUTF8String(dateAt);
        UTF8String metric = r.isNullAt(metricAt) ? null : r.getUTF8String(metricAt);
        if (lastGroup < 0 || date != lastDate || metric != lastMetric) {
          Group g = new Group(date, metric);
          Integer known = groups.get(g);
          if (known == null) {
            known = found.size();
            groups.put(g, known);
            found.add(g);
          }
          lastGroup = known;
          lastDate = date;
          lastMetric = metric;
        }
        picked[m] = i;
        group[m] = lastGroup;
        start[m] = r.isNullAt(startAt) ? Long.MIN_VALUE : r.getLong(startAt); // nulls first (ties: any order)
        m++;
      }
      Integer[] byName = new Integer[found.size()];
      for (int g = 0; g < byName.length; g++) {
        byName[g] = g;
      }
      Arrays.sort(byName, (a, b) -> {
        int c = compareNullsFirst(found.get(a).date(), found.get(b).date());
        return c != 0 ? c : compareNullsFirst(found.get(a).metric(), found.get(b).metric());
      });
      int[] rank = new int[byName.length];
      for (int k = 0; k < byName.length; k++) {
        rank[byName[k]] = k;
      }
      Integer[] order = new Integer[m];
      for (int k = 0; k < m; k++) {
        order[k] = k;
      }
      Arrays.sort(order, (a, b) -> {
        int c = Integer.compare(rank[group[a]], rank[group[b]]);
        return c != 0 ? c : Long.compare(start[a], start[b]);
      });
      for (Integer k : order) {
        out.add(rows.get(picked[k]));
      }
      out.addAll(others);
    }
  }

  /** What a point shares with its push: the record's labels and its resource's attributes. */
  static final class Push {
    final UTF8String[] labels;
    final Map<String, String> resource;
    private MapData resourceData; // converted once, for the first row that needs it, then copied as bytes

    Push(UTF8String[] labels, Map<String, String> resource) {
      this.labels = labels;
      this.resource = resource;
    }

    MapData resourceData(StringMaps maps) {
      if (resourceData == null) {
        resourceData = maps.of(resource);
      }
      return resourceData;
    }
  }

  static MapData mapData(Map<String, String> map) {
    Object[] keys = new Object[map.size()];
    Object[] values = new Object[map.size()];
    int i = 0;
    for (Map.Entry<String, String> e : map.entrySet()) {
      keys[i] = UTF8String.fromString(e.getKey());
      values[i] = UTF8String.fromString(e.getValue());
      i++;
    }
    return new ArrayBasedMapData(new GenericArrayData(keys), new GenericArrayData(values));
  }

  /**
   * Maps of strings as Spark's UnsafeMapData, which the projection into UnsafeRows (RDDScanExec's, for the
   * cache) copies as one block of bytes; a generic map it writes entry by entry, string by string, in every
   * row: a push's resource attributes are in ~20 rows, a series' attributes in each of its windows.
   * Not thread-safe (its projection reuses its buffer): one per task.
   */
  static final class StringMaps {
    private final UnsafeProjection project =
        UnsafeProjection.create(new DataType[] {DataTypes.createMapType(DataTypes.StringType, DataTypes.StringType)});

    MapData of(Map<String, String> map) {
      return project.apply(new GenericInternalRow(new Object[] {mapData(map)})).getMap(0).copy();
    }
  }

  private static UTF8String utf8(String s) {
    return s == null ? null : UTF8String.fromString(s);
  }

  /** A series' identity within a client, minus the attributes (and bucket bounds): one lookup per metric. */
  record MetricKey(String metric, String type, String temporality, Boolean monotonic) {}

  /** Histograms are also told apart by their bucket bounds (List equality: Double.equals, as Spark's string of them). */
  record HistogramKey(String attributesKey, List<Double> bounds) {}

  /** One client's series, filled push by push. */
  static final class Client {
    private final HashMap<MetricKey, HashMap<Object, Series>> byMetric = new HashMap<>();
    private final List<Series> all = new ArrayList<>();
    private final Spec spec;

    Client(Spec spec) {
      this.spec = spec;
    }

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
            if (!spec.takes(p.getTimeUnixNano())) {
              continue;
            }
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
            if (!spec.takes(p.getTimeUnixNano())) {
              continue;
            }
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
            if (!spec.takes(p.getTimeUnixNano())) {
              continue;
            }
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

    /** A series' last point from an earlier micro-batch: what its first point here pairs with. */
    void seed(InternalRow r) {
      String type = r.getUTF8String(1).toString();
      MetricKey key = new MetricKey(r.getUTF8String(0).toString(), type,
          r.isNullAt(2) ? null : r.getUTF8String(2).toString(), r.isNullAt(3) ? null : r.getBoolean(3));
      String ak = r.isNullAt(4) ? null : r.getUTF8String(4).toString();
      List<Double> bounds = null;
      if (!r.isNullAt(5)) {
        ArrayData b = r.getArray(5);
        bounds = new ArrayList<>(b.numElements());
        for (int i = 0; i < b.numElements(); i++) {
          bounds.add(b.isNullAt(i) ? null : b.getDouble(i));
        }
      }
      HashMap<Object, Series> m = metric(key.metric(), key.type(), key.temporality(), key.monotonic());
      Series s = series(m, key, type.equals("histogram") ? new HistogramKey(ak, bounds) : ak, ak);
      int i = s.add(null, null, null, r.getLong(7), r.getLong(6));
      s.seed[i] = r;
      s.value[i] = r.isNullAt(8) ? 0.0 : r.getDouble(8);
      s.count[i] = r.isNullAt(9) ? 0L : r.getLong(9);
      s.hasSum[i] = !r.isNullAt(10);
      s.sum[i] = r.isNullAt(10) ? 0.0 : r.getDouble(10);
      if (s.histogram) {
        List<Long> buckets = new ArrayList<>();
        if (!r.isNullAt(11)) {
          ArrayData a = r.getArray(11);
          for (int k = 0; k < a.numElements(); k++) {
            buckets.add(a.isNullAt(k) ? null : a.getLong(k));
          }
        }
        s.buckets[i] = buckets;
        s.bounds[i] = bounds;
      }
    }

    private void numbers(Push push, String unit, MetricKey key, List<NumberDataPoint> points) {
      if (points.isEmpty()) {
        return;
      }
      HashMap<Object, Series> m = metric(key.metric(), key.type(), key.temporality(), key.monotonic());
      for (NumberDataPoint p : points) {
        if (!spec.takes(p.getTimeUnixNano())) {
          continue;
        }
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
    Object[] seed = new Object[8]; // the previous row, for points that are a stream's state (not counted)
    Object[] buckets;
    Object[] bounds;
    private Map<String, String> attributesSource; // the attributes last converted, and their conversion
    private MapData attributesData;
    // The series' strings as its rows hold them, converted once (every window's row shares them: the row
    // order's grouping finds its group by them without hashing again, and each window allocates less).
    final UTF8String metricData;
    final UTF8String typeData;
    final UTF8String temporalityData;
    final UTF8String attributesKeyData;
    private String unitSource; // the unit last converted, and its conversion
    private UTF8String unitData;

    Series(MetricKey key, String attributesKey) {
      this.key = key;
      this.attributesKey = attributesKey;
      this.metricData = utf8(key.metric());
      this.typeData = utf8(key.type());
      this.temporalityData = utf8(key.temporality());
      this.attributesKeyData = utf8(attributesKey);
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
        seed = Arrays.copyOf(seed, m);
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

    /**
     * A window's attributes (its last point's) as an UnsafeMapData: the previous window's when equal entry
     * for entry, in order (a series' points share its attributes key, but a client may reorder them, and a
     * key does not tell every map apart: a value may hold "," or "=").
     */
    MapData attributesData(Map<String, String> attributes, StringMaps maps) {
      if (attributesSource == null || !sameEntriesInOrder(attributes, attributesSource)) {
        attributesData = maps.of(attributes);
        attributesSource = attributes;
      }
      return attributesData;
    }

    /** A window's unit (its last point's) as a UTF8String: the previous window's when the same text. */
    UTF8String unitData(String unit) {
      if (unit == null) {
        return null;
      }
      if (!unit.equals(unitSource)) {
        unitData = utf8(unit);
        unitSource = unit;
      }
      return unitData;
    }

    private static boolean sameEntriesInOrder(Map<String, String> a, Map<String, String> b) {
      if (a == b) {
        return true;
      }
      if (a.size() != b.size()) {
        return false;
      }
      Iterator<Map.Entry<String, String>> x = a.entrySet().iterator();
      Iterator<Map.Entry<String, String>> y = b.entrySet().iterator();
      while (x.hasNext()) {
        Map.Entry<String, String> e = x.next();
        Map.Entry<String, String> f = y.next();
        if (!e.getKey().equals(f.getKey()) || !Objects.equals(e.getValue(), f.getValue())) {
          return false;
        }
      }
      return true;
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

    void emit(UTF8String instance, Spec spec, StringMaps maps, List<InternalRow> out) {
      long size = spec.size;
      int lookback = spec.lookback;
      long sizeNanos = size * 1_000_000_000L;
      Window w = null;
      int prev = -1;
      int[] order = order();
      for (int j : order) {
        long ws = (time[j] / sizeNanos) * size;
        if (seed[j] != null) { // pairs with the next point; not a point of any window
          if (w != null && w.ws == ws) {
            w.lastIsSeed = true; // the SQL path's `_is_last` then marks no point of this window
          }
          prev = j;
          continue;
        }
        if (w == null || w.ws != ws) {
          if (w != null) {
            out.add(w.row(instance, spec, maps));
          }
          w = new Window(this, ws);
        }
        w.lastIsSeed = false;
        w.add(j, prev, (ws - lookback * size) * 1_000_000_000L);
        prev = j;
      }
      if (w != null) {
        out.add(w.row(instance, spec, maps));
      }
      boolean cumulative = "cumulative".equals(key.temporality()) && (histogram || key.type().equals("sum"));
      if (spec.withLast && cumulative && n > 0) {
        out.add(newest(instance, spec, order[n - 1]));
      }
    }

    /** The series' newest point as the stream keeps it (LAST_POINT_COLUMNS), in a `_kind` 1 row. */
    private InternalRow newest(UTF8String instance, Spec spec, int j) {
      int labels = spec.labelCount;
      Object[] v = new Object[3 + 1 + labels + 25 + spec.quantiles.length + 4];
      long sizeNanos = spec.size * 1_000_000_000L;
      v[2] = spec.date((time[j] / sizeNanos) * spec.size); // its window's (as emit finds it): date is not nullable
      int base = 3;
      v[base] = instance;
      int k = base + 1 + labels + 1; // after the labels and resource_attributes
      v[k++] = metricData;
      k++; // unit
      v[k++] = typeData;
      v[k++] = temporalityData;
      v[k++] = key.monotonic();
      k++; // attributes
      v[k++] = attributesKeyData;
      v[k++] = 0L; // points (not null in the schema)
      k += 1 + 6 + 1; // last_time, value_* / delta / rate, resets
      int countAt = k;
      InternalRow r = (InternalRow) seed[j];
      if (r != null) {
        v[countAt] = r.isNullAt(9) ? null : r.getLong(9);
        v[countAt + 1] = r.isNullAt(10) ? null : r.getDouble(10);
        v[countAt + 2] = r.isNullAt(5) ? null : r.getArray(5).copy();
        v[countAt + 3] = r.isNullAt(11) ? null : r.getArray(11).copy();
      } else if (histogram) {
        v[countAt] = count[j];
        v[countAt + 1] = hasSum[j] ? (Object) sum[j] : null;
        @SuppressWarnings("unchecked")
        List<Double> b = (List<Double>) bounds[j];
        @SuppressWarnings("unchecked")
        List<Long> c = (List<Long>) buckets[j];
        v[countAt + 2] = new GenericArrayData(b.toArray());
        v[countAt + 3] = new GenericArrayData(c.toArray());
      }
      k = countAt + 4 + spec.quantiles.length;
      v[k++] = 1;
      v[k++] = time[j];
      v[k++] = start[j];
      v[k++] = r != null ? (r.isNullAt(8) ? null : (Object) r.getDouble(8)) : numeric ? (Object) value[j] : null;
      return new GenericInternalRow(Arrays.copyOf(v, k));
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
    boolean lastIsSeed; // the window's last row (in the series order) is a previous row, not a point
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

    InternalRow row(UTF8String instance, Spec spec, StringMaps maps) {
      String type = s.key.type();
      boolean isSum = type.equals("sum");
      boolean snapshot = type.equals("exponential_histogram") || type.equals("summary");
      boolean lastSnapshot = "cumulative".equals(s.key.temporality()) || type.equals("summary");
      // What the SQL path takes from the window's last row (`at_last`): nothing when that row is a seed.
      Push push = lastIsSeed ? null : (Push) s.push[last];
      Object[] v = new Object[3 + 1 + spec.labelCount + 25 + spec.quantiles.length + (spec.withLast ? 4 : 0)];
      int k = 0;
      v[k++] = ws * 1_000_000L; // timestamp_seconds(_ws)
      v[k++] = (ws + spec.size) * 1_000_000L;
      v[k++] = spec.date(ws);
      v[k++] = instance;
      for (int i = 1; i <= spec.labelCount; i++) {
        v[k++] = push == null ? null : push.labels[i];
      }
      v[k++] = push == null ? null : push.resourceData(maps);
      v[k++] = s.metricData;
      v[k++] = push == null ? null : s.unitData((String) s.unit[last]);
      v[k++] = s.typeData;
      v[k++] = s.temporalityData;
      v[k++] = s.key.monotonic();
      @SuppressWarnings("unchecked")
      Map<String, String> attributes = (Map<String, String>) s.attrs[last];
      v[k++] = push == null ? null : s.attributesData(attributes, maps);
      v[k++] = s.attributesKeyData;
      v[k++] = points;
      v[k++] = lastTimeMicros;
      boolean values = s.numeric;
      v[k++] = values && push != null ? (Object) s.value[last] : null;
      v[k++] = values ? (Object) min : null;
      v[k++] = values ? (Object) max : null;
      v[k++] = values ? (Object) (valueSum / points) : null;
      Double delta = isSum ? (Double) (cumulative ? incV : valueSum) : null;
      v[k++] = delta;
      v[k++] = delta == null ? null : (Object) (delta / (double) spec.size);
      v[k++] = cumulative ? (Object) (int) incR : (isSum || s.histogram) ? (Object) 0 : null;
      Object count = null;
      Object total = null;
      if (s.histogram) {
        count = cumulative ? incC : countSum;
        total = cumulative ? incH : anySum ? sumSum : 0.0;
      } else if (snapshot && push != null) {
        count = lastSnapshot ? s.count[last] : countSum;
        total = lastSnapshot ? (s.hasSum[last] ? (Object) s.sum[last] : null) : anySum ? (Object) sumSum : null;
      } else if (snapshot) {
        count = lastSnapshot ? null : countSum;
        total = lastSnapshot ? null : anySum ? (Object) sumSum : null;
      }
      v[k++] = count;
      v[k++] = total;
      List<Double> bounds = null;
      if (s.histogram) {
        @SuppressWarnings("unchecked")
        List<Double> b = push == null ? null : (List<Double>) s.bounds[last];
        bounds = b;
        v[k++] = bounds == null ? null : new GenericArrayData(bounds.toArray());
        v[k++] = new GenericArrayData(buckets);
      } else {
        v[k++] = null;
        v[k++] = null;
      }
      long[] cumulativeCounts = s.histogram ? Quantiles.cumulative(buckets, bounds) : null;
      for (BigDecimal q : spec.quantiles) {
        v[k++] = cumulativeCounts == null ? null : Quantiles.estimate(q, buckets, cumulativeCounts, bounds);
      }
      if (spec.withLast) {
        v[k++] = 0;
        k += 3;
      }
      return new GenericInternalRow(Arrays.copyOf(v, k));
    }
  }
}
