package dev.kct.otlp;

import java.io.Serializable;
import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeArrayData;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.execution.columnar.InMemoryRelation;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * the oracle's {@code sql_engine.rollups} (tests/aggregation_oracle) without Spark SQL's Expand and ObjectHashAggregate: client_metrics rows to
 * per-window aggregates per dimension (client id, software, principal: the dimension spec comes from
 * {@code transforms.ROLLUP_DIMENSIONS}). Two steps around Spark's own shuffle: each input partition merges its
 * rows into partial aggregates per (window, dimension value, metric, unit, type, temporality, attributes_key,
 * bucket bounds) in a Java hash map, once per dimension; the partial rows are repartitioned by a hash of that
 * key, and each partition merges them again and finishes them (averages, quantiles). Or, for rows one task
 * takes, one step: one task reads every partition and merges and finishes at once. Rows go in and out as
 * Spark's InternalRow. Both merges key their groups by numbers ({@link Interned}), the hash by content.
 *
 * <p>Semantics as the SQL: sums of all-null inputs are null, {@code instances} counts rows, {@code value_avg}
 * is the mean of the non-null {@code value_avg}s, min/max order doubles as Spark (NaN largest), bucket counts
 * are summed element-wise as {@code zip_with} does (as long as the longest, null where one is null or
 * missing), {@code explicit_bounds} and {@code attributes} are a row's of the group (the bounds are grouped on,
 * by their bits as the SQL groups on their string; the attributes belong to the attributes_key), the quantiles
 * those of {@link Quantiles}. A dimension's value is its columns joined by '/', null as ''; the group itself
 * tells null from '' as the SQL's grouping sets do. Doubles are added in the rows' order, which differs from
 * Spark's: sums may differ in the last bits.
 */
public final class Rollups {
  private Rollups() {}

  /** The client_metrics columns read, in this order (then the dimension columns); casts as the SQL sums them. */
  private static final String[] INPUT = {
    "window_start", "window_end", "date", "metric", "unit", "type", "temporality", "attributes_key",
    "explicit_bounds", "attributes", "points", "value_last", "value_min", "value_max", "value_avg", "delta",
    "rate", "resets", "count", "sum", "bucket_counts",
  };

  /** The type Merge reads each INPUT column as (what {@link #selected} gives it), nullability aside. */
  private static final String[] READ_AS = {
    "timestamp", "timestamp", "string", "string", "string", "string", "string", "string", "array<double>",
    "map<string,string>", "bigint", "double", "double", "double", "double", "double", "double", "bigint",
    "bigint", "double", "array<bigint>",
  };

  /** The INPUT columns read as longs: a row may hold them as ints (client_metrics' {@code resets} is one). */
  private static final List<String> COUNTS = List.of("points", "resets", "count");
  /** Positions in a selected input row of the key columns [ws, we, date, metric, unit, type, temporality, key,
   * bounds]: the INPUT positions of those columns. */
  private static final int[] INPUT_KEY = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  /** ... and in a partial row. */
  private static final int[] PARTIAL_KEY = {1, 2, 3, 6, 7, 8, 9, 10, 11};

  /**
   * client_metrics to roll-ups. With {@code inOneTask}, one task reads every partition of the rows and merges
   * them into finished roll-ups at once: no partial rows, no shuffle, no second merge. A dimension's values (a
   * client id) are spread over every partition by instance id, so the first merge leaves many partial rows
   * (1M points: 107,100 from 180,000 rows, for 46,800 roll-ups), each built, shuffled and merged again. For
   * rows that one task merges in reasonable time and memory (the job's {@code ROLLUP_ROWS_PER_TASK}); else
   * two merges, spread over the session's shuffle partitions.
   *
   * @param clientMetrics rows with (at least) the columns the oracle's {@code sql_engine.rollups} (tests/aggregation_oracle) reads
   * @param dimensionSpec the dimensions, {@code name:column,column;...}, in output order
   * @param quantileSpec the quantile columns, {@code p50=0.5;...}
   * @param inOneTask merged once by one task, else in two merges
   */
  public static Dataset<Row> rollups(Dataset<Row> clientMetrics, String dimensionSpec, String quantileSpec,
      boolean inOneTask) {
    Spec spec = new Spec(dimensionSpec, quantileSpec);
    org.apache.spark.sql.classic.Dataset<Row> given = (org.apache.spark.sql.classic.Dataset<Row>) clientMetrics;
    Layout whole = wholeRows(given, spec);
    org.apache.spark.sql.classic.Dataset<Row> input = whole != null ? given : selected(given, spec);
    Layout layout = whole != null ? whole : Layout.selected(spec);
    JavaRDD<InternalRow> read = input.queryExecution().toRdd().toJavaRDD();
    if (inOneTask) {
      RDD<InternalRow> rows = read.coalesce(1).mapPartitions(new Merge(spec, layout, true)).rdd();
      return input.sparkSession().internalCreateDataFrame(rows, schema(spec), false);
    }
    RDD<InternalRow> partial = read.mapPartitions(new Merge(spec, layout, false)).rdd();
    org.apache.spark.sql.classic.Dataset<Row> shuffled = (org.apache.spark.sql.classic.Dataset<Row>) input
        .sparkSession().internalCreateDataFrame(partial, partialSchema(), false).repartition(functions.col("_h"));
    RDD<InternalRow> rows = shuffled.queryExecution().toRdd().toJavaRDD()
        .mapPartitions(new Merge(spec, null, true)).rdd();
    return input.sparkSession().internalCreateDataFrame(rows, schema(spec), false);
  }

  /**
   * The columns Merge reads, in INPUT order then the dimension columns, each cast to the type Merge reads it as:
   * the counts to bigint as the SQL sums them, and a column of another type to its string (a {@code date} read
   * back from the table's folders is a date, unless partition types are not inferred), never read as another.
   */
  private static org.apache.spark.sql.classic.Dataset<Row> selected(
      org.apache.spark.sql.classic.Dataset<Row> clientMetrics, Spec spec) {
    List<Column> columns = new ArrayList<>();
    for (int i = 0; i < INPUT.length; i++) {
      columns.add(functions.col(INPUT[i]).cast(READ_AS[i]));
    }
    for (String name : spec.columns) {
      columns.add(functions.col(name).cast("string"));
    }
    return (org.apache.spark.sql.classic.Dataset<Row>) clientMetrics.select(columns.toArray(new Column[0]));
  }

  /**
   * Whether {@link #rollups} reads the rows of a whole cached frame as they are cached, every column (the frame
   * holds the columns Merge reads, of the types it reads): true for the job's client_metrics. Selecting the
   * columns would copy each row into a new one (a projection, ~10 % of a warm batch's task time) where
   * {@link RowCache} hands out the cached rows themselves. Any other frame is read through {@link #selected},
   * so a file source reads only those columns. (Spark's columnar cache, in a session without RowCache, then
   * decodes every column: only sessions that added the jar late have it.)
   */
  public static boolean readsCachedRows(Dataset<Row> clientMetrics, String dimensionSpec, String quantileSpec) {
    Spec spec = new Spec(dimensionSpec, quantileSpec);
    return wholeRows((org.apache.spark.sql.classic.Dataset<Row>) clientMetrics, spec) != null;
  }

  /** The layout of the frame's rows read as cached (see {@link #readsCachedRows}); null: read them selected. */
  private static Layout wholeRows(org.apache.spark.sql.classic.Dataset<Row> clientMetrics, Spec spec) {
    return clientMetrics.queryExecution().optimizedPlan() instanceof InMemoryRelation
        ? Layout.of(clientMetrics.schema(), spec) : null;
  }

  /** Where Merge finds its columns in an input row: the key columns, the measures, the dimension columns. */
  static final class Layout implements Serializable {
    private static final long serialVersionUID = 1L;
    final int[] key; // [ws, we, date, metric, unit, type, temporality, attributes_key, bounds]
    final int[] measures; // Acc.INPUT's columns
    final boolean[] ints; // per measure: read with getInt (an int column read as a long)
    final int[][] dimensions; // per dimension, its columns

    private Layout(int[] input, boolean[] inputInts, int[][] dimensions) {
      key = new int[INPUT_KEY.length];
      for (int i = 0; i < key.length; i++) {
        key[i] = input[INPUT_KEY[i]];
      }
      measures = new int[Acc.INPUT.length];
      ints = new boolean[Acc.INPUT.length];
      for (int i = 0; i < measures.length; i++) {
        measures[i] = Acc.INPUT[i] < 0 ? -1 : input[Acc.INPUT[i]];
        ints[i] = Acc.INPUT[i] >= 0 && inputInts[Acc.INPUT[i]];
      }
      this.dimensions = dimensions;
    }

    /** The rows {@link #selected} makes: INPUT's columns in order, the counts as longs, then the dimensions. */
    static Layout selected(Spec spec) {
      int[] input = new int[INPUT.length];
      for (int i = 0; i < input.length; i++) {
        input[i] = i;
      }
      return new Layout(input, new boolean[INPUT.length], spec.at);
    }

    /**
     * The layout of rows of {@code schema} read as they are: null when a column is missing or of another type
     * than the one Merge reads (the timestamps as longs, strings, doubles, the bounds and bucket arrays, the
     * attributes map; the counts as longs or ints; the dimensions as strings).
     */
    static Layout of(StructType schema, Spec spec) {
      List<String> names = Arrays.asList(schema.fieldNames());
      int[] input = new int[INPUT.length];
      boolean[] ints = new boolean[INPUT.length];
      for (int i = 0; i < INPUT.length; i++) {
        input[i] = names.indexOf(INPUT[i]);
        if (input[i] < 0 || names.lastIndexOf(INPUT[i]) != input[i]) {
          return null;
        }
        String type = schema.fields()[input[i]].dataType().catalogString();
        ints[i] = type.equals("int") && COUNTS.contains(INPUT[i]);
        if (!ints[i] && !type.equals(READ_AS[i])) {
          return null;
        }
      }
      int[][] dimensions = new int[spec.at.length][];
      for (int d = 0; d < dimensions.length; d++) {
        dimensions[d] = new int[spec.at[d].length];
        for (int i = 0; i < dimensions[d].length; i++) {
          String column = spec.columns[spec.at[d][i] - INPUT.length];
          int at = names.indexOf(column);
          if (at < 0 || names.lastIndexOf(column) != at
              || !schema.fields()[at].dataType().catalogString().equals("string")) {
            return null;
          }
          dimensions[d][i] = at;
        }
      }
      return new Layout(input, ints, dimensions);
    }
  }

  /** The dimensions and the quantiles. */
  static final class Spec implements Serializable {
    private static final long serialVersionUID = 1L;
    final UTF8String[] names; // dimension names
    final int[][] at; // per dimension, the positions of its columns in an input row
    final String[] columns; // the distinct dimension columns, read after INPUT
    final String[] quantileNames;
    final BigDecimal[] quantiles;

    Spec(String dimensionSpec, String quantileSpec) {
      String[] entries = dimensionSpec.split(";");
      names = new UTF8String[entries.length];
      at = new int[entries.length][];
      List<String> distinct = new ArrayList<>();
      for (int d = 0; d < entries.length; d++) {
        String[] parts = entries[d].split(":", 2);
        names[d] = UTF8String.fromString(parts[0]);
        String[] cols = parts[1].split(",");
        at[d] = new int[cols.length];
        for (int i = 0; i < cols.length; i++) {
          if (!distinct.contains(cols[i])) {
            distinct.add(cols[i]);
          }
          at[d][i] = INPUT.length + distinct.indexOf(cols[i]);
        }
      }
      columns = distinct.toArray(new String[0]);
      quantileNames = Quantiles.names(quantileSpec);
      quantiles = Quantiles.levels(quantileSpec);
    }
  }

  private static DataType stringMap() {
    return DataTypes.createMapType(DataTypes.StringType, DataTypes.StringType, true);
  }

  private static DataType doubles() {
    return DataTypes.createArrayType(DataTypes.DoubleType, true);
  }

  private static DataType longs() {
    return DataTypes.createArrayType(DataTypes.LongType, true);
  }

  /** The partial aggregates shuffled between the two merges (column positions: PARTIAL_KEY, Acc.PARTIAL). */
  static StructType partialSchema() {
    Object[][] fields = {
      {"_h", DataTypes.IntegerType}, {"window_start", DataTypes.TimestampType},
      {"window_end", DataTypes.TimestampType}, {"date", DataTypes.StringType}, {"_dim", DataTypes.IntegerType},
      {"_dv", DataTypes.createArrayType(DataTypes.StringType, true)}, {"metric", DataTypes.StringType},
      {"unit", DataTypes.StringType}, {"type", DataTypes.StringType}, {"temporality", DataTypes.StringType},
      {"attributes_key", DataTypes.StringType}, {"explicit_bounds", doubles()}, {"attributes", stringMap()},
      {"instances", DataTypes.LongType}, {"points", DataTypes.LongType}, {"value_last_sum", DataTypes.DoubleType},
      {"value_min", DataTypes.DoubleType}, {"value_max", DataTypes.DoubleType}, {"_avg_sum", DataTypes.DoubleType},
      {"_avg_n", DataTypes.LongType}, {"delta", DataTypes.DoubleType}, {"rate", DataTypes.DoubleType},
      {"resets", DataTypes.LongType}, {"count", DataTypes.LongType}, {"sum", DataTypes.DoubleType},
      {"bucket_counts", longs()},
    };
    List<StructField> out = new ArrayList<>();
    for (Object[] f : fields) {
      out.add(DataTypes.createStructField((String) f[0], (DataType) f[1], true));
    }
    return DataTypes.createStructType(out);
  }

  /** The output: the oracle's {@code sql_engine.rollups} (tests/aggregation_oracle)'s columns and types. */
  static StructType schema(Spec spec) {
    List<StructField> out = new ArrayList<>();
    String[] strings = {"date", "dimension", "dimension_value", "metric", "unit", "type", "temporality"};
    out.add(DataTypes.createStructField("window_start", DataTypes.TimestampType, true));
    out.add(DataTypes.createStructField("window_end", DataTypes.TimestampType, true));
    for (String name : strings) {
      out.add(DataTypes.createStructField(name, DataTypes.StringType, true));
    }
    out.add(DataTypes.createStructField("attributes", stringMap(), true));
    out.add(DataTypes.createStructField("attributes_key", DataTypes.StringType, true));
    out.add(DataTypes.createStructField("instances", DataTypes.LongType, false));
    out.add(DataTypes.createStructField("points", DataTypes.LongType, true));
    for (String name : new String[] {"value_last_sum", "value_min", "value_max", "value_avg", "delta", "rate"}) {
      out.add(DataTypes.createStructField(name, DataTypes.DoubleType, true));
    }
    out.add(DataTypes.createStructField("resets", DataTypes.LongType, true));
    out.add(DataTypes.createStructField("count", DataTypes.LongType, true));
    out.add(DataTypes.createStructField("sum", DataTypes.DoubleType, true));
    out.add(DataTypes.createStructField("explicit_bounds", doubles(), true));
    out.add(DataTypes.createStructField("bucket_counts", longs(), true));
    for (String name : spec.quantileNames) {
      out.add(DataTypes.createStructField(name, DataTypes.DoubleType, true));
    }
    return DataTypes.createStructType(out);
  }

  /** One partition: client_metrics rows (or partial rows, {@code fin}) merged per key; partial rows out (or
   * the finished roll-ups). */
  static final class Merge implements FlatMapFunction<Iterator<InternalRow>, InternalRow> {
    private static final long serialVersionUID = 1L;
    private final Spec spec;
    private final Layout layout; // of the input rows; null: partial rows (the second merge)
    private final boolean finish; // finished roll-ups out, else partial rows

    Merge(Spec spec, Layout layout, boolean finish) {
      this.spec = spec;
      this.layout = layout;
      this.finish = finish;
    }

    @Override
    public Iterator<InternalRow> call(Iterator<InternalRow> rows) {
      HashMap<Key, Acc> groups = new HashMap<>();
      Interned interned = new Interned();
      Measures measures = new Measures(); // one row's at a time
      int[] at = layout == null ? PARTIAL_KEY : layout.key;
      while (rows.hasNext()) {
        InternalRow r = rows.next();
        long ws = r.isNullAt(at[0]) ? Long.MIN_VALUE : r.getLong(at[0]);
        long we = r.isNullAt(at[1]) ? Long.MIN_VALUE : r.getLong(at[1]);
        UTF8String[] strings = new UTF8String[6];
        for (int i = 0; i < 6; i++) {
          strings[i] = r.isNullAt(at[2 + i]) ? null : r.getUTF8String(at[2 + i]);
        }
        // The series and the measures are read once for every dimension's group the row adds to.
        Strings series = interned.of(strings, r.isNullAt(at[8]) ? null : r.getArray(at[8]));
        if (layout == null) {
          accumulate(groups, new Key(ws, we, r.getInt(4), series, interned.of(strings(r.getArray(5)), null)),
              measures.read(r, Acc.PARTIAL, Acc.NO_INTS));
          continue;
        }
        measures.read(r, layout.measures, layout.ints);
        for (int d = 0; d < layout.dimensions.length; d++) {
          int[] columns = layout.dimensions[d];
          UTF8String[] values = new UTF8String[columns.length];
          for (int i = 0; i < values.length; i++) {
            values[i] = r.isNullAt(columns[i]) ? null : r.getUTF8String(columns[i]);
          }
          accumulate(groups, new Key(ws, we, d, series, interned.of(values, null)), measures);
        }
      }
      List<InternalRow> out = new ArrayList<>(groups.size());
      for (Map.Entry<Key, Acc> e : groups.entrySet()) {
        out.add(finish ? e.getValue().row(e.getKey(), spec) : e.getValue().partial(e.getKey()));
      }
      return out.iterator();
    }

    private static void accumulate(HashMap<Key, Acc> groups, Key key, Measures measures) {
      Acc acc = groups.get(key);
      if (acc == null) {
        acc = new Acc();
        groups.put(key, acc);
      }
      acc.add(measures);
    }
  }

  private static UTF8String[] strings(ArrayData a) {
    UTF8String[] out = new UTF8String[a.numElements()];
    for (int i = 0; i < out.length; i++) {
      out[i] = a.isNullAt(i) ? null : a.getUTF8String(i);
    }
    return out;
  }

  /**
   * A partition's distinct series (a key's strings [date, metric, unit, type, temporality, attributes_key] and
   * bucket bounds) and dimension values, each copied once and numbered. A group's key then holds numbers and
   * compares them: a lookup among ~10^5 groups no longer follows a key's eight strings through memory (~1 us a
   * lookup, most of the merge), and a group costs no copy of its strings. A partition holds a few hundred
   * series and values (the client instances are not in them), so these lookups stay in the CPU's caches.
   */
  static final class Interned {
    private final HashMap<Strings, Strings> seen = new HashMap<>();

    /** The kept copy of these strings (and bounds); they may point into a reused row. */
    Strings of(UTF8String[] strings, ArrayData bounds) {
      Strings probe = new Strings(strings, bounds, -1);
      Strings kept = seen.get(probe);
      if (kept == null) {
        kept = probe.copy(seen.size());
        seen.put(kept, kept);
      }
      return kept;
    }
  }

  /** Strings, nulls among them, and bounds (null for a dimension's values), by content; {@code id}: its number. */
  static final class Strings {
    final UTF8String[] strings;
    final ArrayData bounds;
    final int hash;
    final int id;

    Strings(UTF8String[] strings, ArrayData bounds, int id) {
      this.strings = strings;
      this.bounds = bounds;
      this.hash = 31 * Arrays.hashCode(strings) + Key.boundsHash(bounds);
      this.id = id;
    }

    Strings copy(int number) {
      UTF8String[] s = new UTF8String[strings.length];
      for (int i = 0; i < s.length; i++) {
        s[i] = strings[i] == null ? null : strings[i].copy();
      }
      return new Strings(s, bounds == null ? null : bounds.copy(), number);
    }

    @Override
    public int hashCode() {
      return hash;
    }

    @Override
    public boolean equals(Object o) {
      return o instanceof Strings t && hash == t.hash && Arrays.equals(strings, t.strings)
          && Key.boundsEqual(bounds, t.bounds);
    }
  }

  /** The group key: the window, the dimension, the series and the dimension's values (kept copies, by number). */
  static final class Key {
    final long ws;
    final long we;
    final int dim;
    final UTF8String[] strings; // date, metric, unit, type, temporality, attributes_key
    final UTF8String[] values; // the dimension's column values
    final ArrayData bounds;
    final int hash;
    private final int seriesId;
    private final int valuesId;

    Key(long ws, long we, int dim, Strings series, Strings values) {
      this.ws = ws;
      this.we = we;
      this.dim = dim;
      this.strings = series.strings;
      this.values = values.strings;
      this.bounds = series.bounds;
      this.seriesId = series.id;
      this.valuesId = values.id;
      // By content, not by the numbers (which differ from partition to partition): the shuffle sends a key's
      // partials from every partition to one by this hash.
      this.hash = mix(31 * (31 * (31 * (31 * Long.hashCode(ws) + Long.hashCode(we)) + series.hash) + dim)
          + values.hash);
    }

    /** Murmur3's finalizer: every bit of the sum of hashes spread over the low bits HashMap's bins use. */
    private static int mix(int h) {
      h ^= h >>> 16;
      h *= 0x85ebca6b;
      h ^= h >>> 13;
      h *= 0xc2b2ae35;
      return h ^ (h >>> 16);
    }

    /** The bounds' hash by their bits (NaN as one value, -0.0 not 0.0: as their strings, which the SQL groups). */
    static int boundsHash(ArrayData b) {
      if (b == null) {
        return 0;
      }
      int h = b.numElements();
      for (int i = 0; i < b.numElements(); i++) {
        h = 31 * h + (b.isNullAt(i) ? 7 : Double.hashCode(b.getDouble(i)));
      }
      return h;
    }

    static boolean boundsEqual(ArrayData a, ArrayData b) {
      if (a == null || b == null) {
        return a == b;
      }
      if (a instanceof UnsafeArrayData && a.equals(b)) { // the same bytes: the same bits (a quick memcmp)
        return true;
      }
      if (a.numElements() != b.numElements()) {
        return false;
      }
      for (int i = 0; i < a.numElements(); i++) {
        if (a.isNullAt(i) != b.isNullAt(i) || !a.isNullAt(i)
            && Double.doubleToLongBits(a.getDouble(i)) != Double.doubleToLongBits(b.getDouble(i))) {
          return false;
        }
      }
      return true;
    }

    @Override
    public int hashCode() {
      return hash;
    }

    @Override
    public boolean equals(Object o) {
      if (!(o instanceof Key)) {
        return false;
      }
      Key k = (Key) o;
      return hash == k.hash && ws == k.ws && we == k.we && dim == k.dim && seriesId == k.seriesId
          && valuesId == k.valuesId;
    }
  }

  /** One input row's measures, as {@link Acc#add} adds them: read once, whatever the number of groups the row
   * adds to (one per dimension). Reused from row to row; valid while its row is. */
  static final class Measures {
    private InternalRow row;
    private int attributesAt;
    long instances;
    long avgCount;
    final double[] sums = new double[5]; // value_last, avg, delta, rate, sum
    final boolean[] summed = new boolean[5];
    final long[] totals = new long[3]; // points, resets, count
    final boolean[] counted = new boolean[3];
    double min;
    double max;
    boolean hasMin;
    boolean hasMax;
    Long[] buckets; // shared by the groups it is added to: never changed in place (Acc.zip makes a new one)

    /** The measures of {@code r} at {@code at} (Acc.INPUT's or Acc.PARTIAL's order); {@code ints}: read as int. */
    Measures read(InternalRow r, int[] at, boolean[] ints) {
      row = r;
      attributesAt = at[0];
      instances = at[1] < 0 ? 1 : r.getLong(at[1]);
      avgCount = at[7] < 0 ? (r.isNullAt(at[6]) ? 0 : 1) : r.getLong(at[7]);
      readDouble(0, r, at[3]);
      readDouble(1, r, at[6]);
      readDouble(2, r, at[8]);
      readDouble(3, r, at[9]);
      readDouble(4, r, at[12]);
      readLong(0, r, at[2], ints[2]);
      readLong(1, r, at[10], ints[10]);
      readLong(2, r, at[11], ints[11]);
      hasMin = !r.isNullAt(at[4]);
      min = hasMin ? r.getDouble(at[4]) : 0.0;
      hasMax = !r.isNullAt(at[5]);
      max = hasMax ? r.getDouble(at[5]) : 0.0;
      buckets = r.isNullAt(at[13]) ? null : Acc.longs(r.getArray(at[13]));
      return this;
    }

    /** The row's attributes, copied: a new group keeps them. */
    MapData attributes() {
      return row.isNullAt(attributesAt) ? null : row.getMap(attributesAt).copy();
    }

    private void readDouble(int i, InternalRow r, int at) {
      summed[i] = !r.isNullAt(at);
      sums[i] = summed[i] ? r.getDouble(at) : 0.0;
    }

    private void readLong(int i, InternalRow r, int at, boolean isInt) {
      counted[i] = !r.isNullAt(at);
      totals[i] = !counted[i] ? 0 : isInt ? r.getInt(at) : r.getLong(at);
    }
  }

  /** The running aggregates of one group, as the SQL's partial aggregation buffers. */
  static final class Acc {
    /** Positions of [attributes, instances, points, value_last, value_min, value_max, value_avg sum, its count,
     * delta, rate, resets, count, sum, bucket_counts] in an input row (-1: one row, not a count) ... */
    static final int[] INPUT = {9, -1, 10, 11, 12, 13, 14, -1, 15, 16, 17, 18, 19, 20};
    /** ... and in a partial row. */
    static final int[] PARTIAL = {12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25};
    /** A partial row's counts are all longs. */
    static final boolean[] NO_INTS = new boolean[PARTIAL.length];

    private boolean seen;
    private MapData attributes;
    private long instances;
    private final double[] sums = new double[5]; // value_last, avg, delta, rate, sum
    private final boolean[] summed = new boolean[5];
    private long avgCount;
    private final long[] totals = new long[3]; // points, resets, count
    private final boolean[] counted = new boolean[3];
    private double min;
    private double max;
    private boolean hasMin;
    private boolean hasMax;
    private Long[] buckets;

    void add(Measures m) {
      if (!seen) { // first(attributes): a row's of the group
        seen = true;
        attributes = m.attributes();
      }
      instances += m.instances;
      avgCount += m.avgCount;
      for (int i = 0; i < sums.length; i++) { // Spark's sum of doubles: from 0.0, nulls skipped, null when all are
        if (m.summed[i]) {
          sums[i] = summed[i] ? sums[i] + m.sums[i] : 0.0 + m.sums[i];
          summed[i] = true;
        }
      }
      for (int i = 0; i < totals.length; i++) {
        if (m.counted[i]) {
          totals[i] += m.totals[i];
          counted[i] = true;
        }
      }
      if (m.hasMin) {
        min = !hasMin || ClientWindows.compareDoubles(m.min, min) < 0 ? m.min : min;
        hasMin = true;
      }
      if (m.hasMax) {
        max = !hasMax || ClientWindows.compareDoubles(m.max, max) > 0 ? m.max : max;
        hasMax = true;
      }
      if (m.buckets != null) { // collect_list skips null arrays
        buckets = buckets == null ? m.buckets : zip(buckets, m.buckets);
      }
    }

    static Long[] longs(ArrayData a) {
      Long[] out = new Long[a.numElements()];
      for (int i = 0; i < out.length; i++) {
        out[i] = a.isNullAt(i) ? null : a.getLong(i);
      }
      return out;
    }

    /** Spark's zip_with(a, b, x + y): as long as the longer array, null where either is null or missing. */
    private static Long[] zip(Long[] a, Long[] b) {
      Long[] out = new Long[Math.max(a.length, b.length)];
      for (int i = 0; i < out.length; i++) {
        Long x = i < a.length ? a[i] : null;
        Long y = i < b.length ? b[i] : null;
        out[i] = x == null || y == null ? null : x + y;
      }
      return out;
    }

    private Object sum(int i) {
      return summed[i] ? (Object) sums[i] : null;
    }

    private Object total(int i) {
      return counted[i] ? (Object) totals[i] : null;
    }

    private Object[] head(Key k, int extra) {
      Object[] v = new Object[extra];
      v[0] = k.ws == Long.MIN_VALUE ? null : (Object) k.ws;
      v[1] = k.we == Long.MIN_VALUE ? null : (Object) k.we;
      v[2] = k.strings[0];
      return v;
    }

    InternalRow partial(Key k) {
      Object[] v = new Object[26];
      v[0] = k.hash;
      Object[] h = head(k, 3);
      System.arraycopy(h, 0, v, 1, 3);
      v[4] = k.dim;
      v[5] = new GenericArrayData(k.values);
      System.arraycopy(k.strings, 1, v, 6, 5);
      v[11] = k.bounds;
      v[12] = attributes;
      v[13] = instances;
      v[14] = total(0);
      v[15] = sum(0);
      v[16] = hasMin ? (Object) min : null;
      v[17] = hasMax ? (Object) max : null;
      v[18] = sum(1);
      v[19] = avgCount;
      v[20] = sum(2);
      v[21] = sum(3);
      v[22] = total(1);
      v[23] = total(2);
      v[24] = sum(4);
      v[25] = buckets == null ? null : new GenericArrayData(buckets);
      return new GenericInternalRow(v);
    }

    InternalRow row(Key k, Spec spec) {
      Object[] v = head(k, 24 + spec.quantiles.length);
      v[3] = spec.names[k.dim];
      v[4] = dimensionValue(k.values);
      System.arraycopy(k.strings, 1, v, 5, 4); // metric, unit, type, temporality
      v[9] = attributes;
      v[10] = k.strings[5];
      v[11] = instances;
      v[12] = total(0);
      v[13] = sum(0);
      v[14] = hasMin ? (Object) min : null;
      v[15] = hasMax ? (Object) max : null;
      v[16] = avgCount == 0 ? null : (Object) (sums[1] / (double) avgCount);
      v[17] = sum(2);
      v[18] = sum(3);
      v[19] = total(1);
      v[20] = total(2);
      v[21] = sum(4);
      v[22] = k.bounds;
      v[23] = buckets == null ? null : new GenericArrayData(buckets);
      List<Double> bounds = boundsList(k.bounds);
      Object[] q = Quantiles.all(spec.quantiles, buckets, bounds);
      System.arraycopy(q, 0, v, 24, q.length);
      return new GenericInternalRow(v);
    }

    /** concat_ws('/', coalesce(column, ''), ...). */
    private static UTF8String dimensionValue(UTF8String[] values) {
      UTF8String[] parts = new UTF8String[values.length];
      for (int i = 0; i < parts.length; i++) {
        parts[i] = values[i] == null ? UTF8String.EMPTY_UTF8 : values[i];
      }
      return UTF8String.concatWs(UTF8String.fromString("/"), parts);
    }

    /** The bounds for the quantiles; null (no quantiles) when one is null, which client_metrics never holds. */
    private static List<Double> boundsList(ArrayData b) {
      if (b == null) {
        return null;
      }
      List<Double> out = new ArrayList<>(b.numElements());
      for (int i = 0; i < b.numElements(); i++) {
        if (b.isNullAt(i)) {
          return null;
        }
        out.add(b.getDouble(i));
      }
      return out;
    }
  }
}
