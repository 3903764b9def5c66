package dev.kct.otlp;

import static dev.kct.otlp.Pushes.SECOND;
import static dev.kct.otlp.Pushes.counter;
import static dev.kct.otlp.Pushes.gauge;
import static dev.kct.otlp.Pushes.point;
import static dev.kct.otlp.Pushes.push;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import io.opentelemetry.proto.metrics.v1.AggregationTemporality;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.stream.Collectors;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * ClientWindows' per-series rules (what transforms' SQL computes, which tests/unit/aggregation holds the two
 * to bit for bit), on records as Spark hands a partition to it: the records of each client in a row, every
 * output row one (window, series). No SparkSession: {@link ClientWindows.PerClient} is the function Spark runs
 * over each partition.
 */
class ClientWindowsTest {
  private static final String LABELS = "client_instance_id:client_instance_id,kct-client-instance-id;"
      + "principal:principal,kct-principal";
  private static final long WINDOW = 60;

  /** A record of a partition: the client instance id, the push, the Kafka headers ({@code name, value, ...}). */
  private static InternalRow record(String client, byte[] push, String... headers) {
    Object[] structs = new Object[headers.length / 2];
    for (int i = 0; i < headers.length; i += 2) {
      structs[i / 2] = new GenericInternalRow(new Object[] {UTF8String.fromString(headers[i]),
          headers[i + 1].getBytes(StandardCharsets.UTF_8)});
    }
    return new GenericInternalRow(new Object[] {UTF8String.fromString(client), push,
        headers.length == 0 ? null : new GenericArrayData(structs)});
  }

  /** The output rows as maps of column name to a Java value, in the order PerClient gives them. */
  private static final class Out {
    final StructType schema;
    final List<InternalRow> rows = new ArrayList<>();

    Out(ClientWindows.Spec spec, List<InternalRow> records) {
      ClientWindows.Labels labels = ClientWindows.Labels.parse(LABELS);
      schema = ClientWindows.schema(labels, spec);
      new ClientWindows.PerClient(labels, spec, ClientWindows.CHUNK_ROWS).call(records.iterator())
          .forEachRemaining(rows::add);
    }

    Object get(InternalRow r, String column) {
      int at = schema.fieldIndex(column);
      return r.isNullAt(at) ? null : value(r, at, schema.fields()[at].dataType());
    }

    /** The one client_metrics row of (metric, window start in seconds). */
    InternalRow row(String metric, long windowStart) {
      List<InternalRow> found = rows.stream()
          .filter(r -> metric.equals(get(r, "metric")) && Long.valueOf(windowStart * 1_000_000L)
              .equals(get(r, "window_start")) && !Integer.valueOf(1).equals(kind(r)))
          .collect(Collectors.toList());
      assertEquals(1, found.size(), () -> metric + " @" + windowStart + ": " + describe());
      return found.get(0);
    }

    Object kind(InternalRow r) {
      return Arrays.asList(schema.fieldNames()).contains("_kind") ? get(r, "_kind") : 0;
    }

    /** (metric, window start) of every row, in order: what a failure shows. */
    String describe() {
      return rows.stream().map(r -> get(r, "metric") + "@" + get(r, "window_start")).collect(Collectors.joining(" "));
    }

    private static Object value(InternalRow r, int at, DataType type) {
      if (type == DataTypes.StringType) {
        return r.getUTF8String(at).toString();
      }
      if (type == DataTypes.DoubleType) {
        return r.getDouble(at);
      }
      if (type == DataTypes.LongType || type == DataTypes.TimestampType) {
        return r.getLong(at);
      }
      if (type == DataTypes.IntegerType) {
        return r.getInt(at);
      }
      if (type == DataTypes.BooleanType) {
        return r.getBoolean(at);
      }
      if (type instanceof ArrayType) {
        ArrayData a = r.getArray(at);
        return Arrays.asList(a.toObjectArray(((ArrayType) type).elementType()));
      }
      return r.get(at, type); // maps: compared through their own tests below
    }
  }

  private static ClientWindows.Spec spec(int lookback) {
    return new ClientWindows.Spec(WINDOW, lookback, "UTC", "p50=0.5", 1, false);
  }

  private static Out aggregate(int lookback, InternalRow... records) {
    return new Out(spec(lookback), List.of(records));
  }

  @Test
  void aCounterIncrementsWithinAndAcrossWindowsAndADropIsAResetThatCountsTheWholeValue() {
    // Given a counter started at 5 s: 100 at 10 s, 130 at 20 s, then 10 at 70 s (the client restarted it)
    Out out = aggregate(1,
        record("c1", push(counter("requests", point(10, 5, 100.0)))),
        record("c1", push(counter("requests", point(20, 5, 130.0)))),
        record("c1", push(counter("requests", point(70, 5, 10.0)))));
    // Then window [0, 60) counts the first point whole (it started within the look-back) and the rise after it
    InternalRow first = out.row("requests", 0);
    assertEquals(130.0, out.get(first, "delta"));
    assertEquals(130.0 / WINDOW, out.get(first, "rate"));
    assertEquals(0, out.get(first, "resets"));
    assertEquals(2L, out.get(first, "points"));
    assertEquals(130.0, out.get(first, "value_last"));
    assertEquals(100.0, out.get(first, "value_min"));
    assertEquals(115.0, out.get(first, "value_avg"));
    // and window [60, 120) counts the reset: its whole value, one reset
    InternalRow second = out.row("requests", 60);
    assertEquals(10.0, out.get(second, "delta"));
    assertEquals(1, out.get(second, "resets"));
    assertEquals("1970-01-01", out.get(second, "date"));
    assertEquals("c1", out.get(second, "client_instance_id"));
    assertEquals("cumulative", out.get(second, "temporality"));
    assertEquals(Boolean.TRUE, out.get(second, "monotonic"));
  }

  @Test
  void aNewStartTimeIsAResetEvenWhenTheValueRises() {
    Out out = aggregate(1,
        record("c1", push(counter("requests", point(10, 5, 100.0)))),
        record("c1", push(counter("requests", point(20, 15, 150.0)))));
    InternalRow row = out.row("requests", 0);
    assertEquals(250.0, out.get(row, "delta"));
    assertEquals(1, out.get(row, "resets"));
  }

  @ParameterizedTest(name = "look-back {0} windows: delta {1}")
  @CsvSource({"1, 0.0", "5, 200.0"})
  void aPreviousPointBeyondTheLookBackIsNotPairedWith(int lookback, double delta) {
    // Given a counter seen at 10 s, then again at 250 s (window 240), started long before that window
    Out out = aggregate(lookback,
        record("c1", push(counter("requests", point(10, 5, 100.0)))),
        record("c1", push(counter("requests", point(250, 5, 300.0)))));
    // Then within the look-back the rise is counted; beyond it the point is neither paired nor fresh: nothing
    assertEquals(delta, out.get(out.row("requests", 240), "delta"));
    assertEquals(0, out.get(out.row("requests", 240), "resets"));
  }

  @Test
  void deltaTemporalitySumsItsValuesAndAnUpDownCounterThatDropsIsNoReset() {
    Out out = aggregate(1,
        record("c1", push(Pushes.sum("sent", AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA, true,
            point(10, 0, 5.0), point(20, 0, 7.0)))),
        record("c1", push(Pushes.sum("queued", AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE, false,
            point(10, 5, 100.0)))),
        record("c1", push(Pushes.sum("queued", AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE, false,
            point(20, 5, 40.0)))));
    InternalRow sent = out.row("sent", 0);
    assertEquals(12.0, out.get(sent, "delta"));
    assertEquals(0, out.get(sent, "resets"));
    assertEquals("delta", out.get(sent, "temporality"));
    // Not monotonic: the first point is not counted whole, and the drop is a change, not a reset.
    InternalRow queued = out.row("queued", 0);
    assertEquals(-60.0, out.get(queued, "delta"));
    assertEquals(0, out.get(queued, "resets"));
  }

  @Test
  void aGaugeKeepsItsLastMinMaxAndMeanInTimeOrderAndHasNoDelta() {
    // Given a gauge's pushes out of time order
    Out out = aggregate(1,
        record("c1", push(gauge("lag", point(30, 0, 3.0)))),
        record("c1", push(gauge("lag", point(10, 0, 9.0)))),
        record("c1", push(gauge("lag", point(20, 0, 6.0)))));
    InternalRow row = out.row("lag", 0);
    assertEquals(3.0, out.get(row, "value_last"));
    assertEquals(3.0, out.get(row, "value_min"));
    assertEquals(9.0, out.get(row, "value_max"));
    assertEquals(6.0, out.get(row, "value_avg"));
    assertEquals(30 * 1_000_000L, out.get(row, "last_time"));
    assertNull(out.get(row, "delta"));
    assertNull(out.get(row, "resets"));
  }

  @Test
  void seriesAreToldApartByTheirAttributes() {
    Out out = aggregate(1, record("c1", push(counter("bytes",
        point(10, 5, 1.0, "topic", "a"), point(10, 5, 2.0, "topic", "b")))));
    assertEquals(List.of("topic=a", "topic=b"),
        out.rows.stream().map(r -> out.get(r, "attributes_key")).sorted().collect(Collectors.toList()));
  }

  @Test
  void aCumulativeHistogramAddsItsBucketIncrementsAndEstimatesQuantilesFromThem() {
    List<Double> bounds = List.of(10.0, 20.0);
    Out out = aggregate(1,
        record("c1", push(Pushes.histogram("latency", AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE,
            Pushes.histogramPoint(10, 5, List.of(1L, 2L, 0L), bounds)))),
        record("c1", push(Pushes.histogram("latency", AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE,
            Pushes.histogramPoint(20, 5, List.of(2L, 4L, 2L), bounds)))));
    InternalRow row = out.row("latency", 0);
    // The first point whole (started within the look-back), then the second's increments over it.
    assertEquals(List.of(2L, 4L, 2L), out.get(row, "bucket_counts"));
    assertEquals(bounds, out.get(row, "explicit_bounds"));
    assertEquals(8L, out.get(row, "count"));
    assertEquals(16.0, out.get(row, "sum"));
    assertEquals(15.0, out.get(row, "p50"));
    assertEquals(0, out.get(row, "resets"));
  }

  @Test
  void labelsComeFromTheRecordsHeadersTheLastOneOfAnyOfItsNamesInAnyCase() {
    Out out = aggregate(1, record("c1", push(gauge("lag", point(10, 0, 1.0))),
        "KCT-Principal", "User:alice", "principal", "User:bob", "other", "x"));
    assertEquals("User:bob", out.get(out.row("lag", 0), "principal"));
    Out none = aggregate(1, record("c1", push(gauge("lag", point(10, 0, 1.0)))));
    assertNull(none.get(none.row("lag", 0), "principal"));
  }

  @Test
  void aStreamsMicroBatchTakesOnlyThePointsInItsTimeRange() {
    ClientWindows.Spec spec = spec(1);
    spec.fromNanos = 60 * SECOND;
    spec.untilNanos = 120 * SECOND;
    Out out = new Out(spec, List.of(record("c1", push(gauge("lag",
        point(10, 0, 1.0), point(70, 0, 2.0), point(130, 0, 3.0))))));
    assertEquals(1, out.rows.size(), out.describe());
    assertEquals(2.0, out.get(out.row("lag", 60), "value_last"));
  }

  @Test
  void aStreamsPreviousPointSeedsItsSeriesAndTheNewestPointIsKeptForTheNext() {
    // Given the counter's last point from an earlier micro-batch (100 at 50 s) and a point here (130 at 70 s)
    ClientWindows.Spec spec = new ClientWindows.Spec(WINDOW, 1, "UTC", "p50=0.5", 1, true);
    InternalRow seed = new GenericInternalRow(new Object[] {UTF8String.fromString("requests"),
        UTF8String.fromString("sum"), UTF8String.fromString("cumulative"), true, UTF8String.fromString(""), null,
        50 * SECOND, 5 * SECOND, 100.0, null, null, null});
    InternalRow previous = new GenericInternalRow(new Object[] {UTF8String.fromString("c1"), null, null, seed});
    InternalRow here = new GenericInternalRow(new Object[] {UTF8String.fromString("c1"),
        push(counter("requests", point(70, 5, 130.0))), null, null});
    Out out = new Out(spec, List.of(previous, here));
    // Then the point pairs with the seed (a rise of 30, not its whole value), and the seed is no point
    InternalRow row = out.row("requests", 60);
    assertEquals(30.0, out.get(row, "delta"));
    assertEquals(1L, out.get(row, "points"));
    assertEquals(0, out.get(row, "_kind"));
    // and a last-point row (`_kind` 1) carries the newest point on
    List<InternalRow> last = out.rows.stream().filter(r -> Integer.valueOf(1).equals(out.get(r, "_kind")))
        .collect(Collectors.toList());
    assertEquals(1, last.size(), out.describe());
    assertArrayEquals(new Object[] {"requests", 70 * SECOND, 5 * SECOND, 130.0},
        new Object[] {out.get(last.get(0), "metric"), out.get(last.get(0), "time_unix_nano"),
            out.get(last.get(0), "start_time_unix_nano"), out.get(last.get(0), "value")});
  }

  @Test
  void aPartitionsRowsComeInTheTablesOrderDateMetricWindowWhateverTheClientOrder() {
    Out out = aggregate(1,
        record("c1", push(gauge("b", point(70, 0, 1.0), point(10, 0, 1.0)))),
        record("c2", push(gauge("a", point(10, 0, 1.0)))));
    assertEquals("a@0 b@0 b@60000000", out.describe());
    assertEquals("c2", out.get(out.row("a", 0), "client_instance_id"));
    assertEquals("c1", out.get(out.row("b", 60), "client_instance_id"));
  }

  @Test
  void aRecordThatIsNotAPushHasNoPoints() {
    Out out = aggregate(1, record("c1", "not a push".getBytes(StandardCharsets.UTF_8)),
        new GenericInternalRow(new Object[] {UTF8String.fromString("c1"), null, null}),
        record("c1", push(gauge("lag", point(10, 0, 1.0)))));
    assertEquals("lag@0", out.describe());
  }

  @Test
  void theDateIsTheWindowStartsDateInTheSessionTimeZone() {
    assertEquals("1969-12-31",
        new ClientWindows.Spec(WINDOW, 1, "America/New_York", "p50=0.5", 1, false).date(0).toString());
    assertEquals("1970-01-02", spec(1).date(86_400).toString());
  }
}
