package dev.kct.otlp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.stream.Collectors;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import org.junit.jupiter.api.Test;

/**
 * Roll-ups of client_metrics rows per dimension (transforms.rollups' semantics), through {@link Rollups.Merge},
 * the function Spark runs per partition: in one step, or as partial rows merged again after a shuffle.
 */
class RollupsTest {
  private static final Rollups.Spec SPEC =
      new Rollups.Spec("software:client_software_name,client_software_version;client:client_id", "p50=0.5");
  private static final StructType OUT = Rollups.schema(SPEC);

  /** A client_metrics row as Rollups reads it (its INPUT columns, then the dimension columns). */
  private static final class Row {
    final Object[] v = new Object[24];

    Row(String metric, String type, String client, String software, String version) {
      v[0] = 0L;
      v[1] = 60_000_000L;
      v[2] = utf8("1970-01-01");
      v[3] = utf8(metric);
      v[4] = utf8("1");
      v[5] = utf8(type);
      v[6] = utf8(type.equals("gauge") ? null : "cumulative");
      v[7] = utf8("");
      v[21] = utf8(software);
      v[22] = utf8(version);
      v[23] = utf8(client);
    }

    /** points, value_last, value_min, value_max, value_avg, delta, rate, resets. */
    Row values(long points, double last, double min, double max, double avg, Double delta, Long resets) {
      v[10] = points;
      v[11] = last;
      v[12] = min;
      v[13] = max;
      v[14] = avg;
      v[15] = delta;
      v[16] = delta == null ? null : delta / 60.0;
      v[17] = resets;
      return this;
    }

    Row histogram(long count, double sum, List<Double> bounds, Long... buckets) {
      v[8] = new GenericArrayData(bounds.toArray());
      v[10] = 1L;
      v[17] = 0L;
      v[18] = count;
      v[19] = sum;
      v[20] = new GenericArrayData(buckets);
      return this;
    }

    InternalRow row() {
      return new GenericInternalRow(v.clone());
    }
  }

  private static UTF8String utf8(String s) {
    return s == null ? null : UTF8String.fromString(s);
  }

  private static List<InternalRow> merge(Rollups.Layout layout, boolean finish, List<InternalRow> rows) {
    List<InternalRow> out = new ArrayList<>();
    new Rollups.Merge(SPEC, layout, finish).call(rows.iterator()).forEachRemaining(out::add);
    return out;
  }

  private static List<InternalRow> oneStep(Row... rows) {
    return merge(Rollups.Layout.selected(SPEC),
        true, Arrays.stream(rows).map(Row::row).collect(Collectors.toList()));
  }

  /** A roll-up row as column name -> Java value. */
  private static Map<String, Object> values(InternalRow r) {
    Map<String, Object> out = new TreeMap<>();
    for (int i = 0; i < OUT.fields().length; i++) {
      DataType type = OUT.fields()[i].dataType();
      Object value = r.isNullAt(i) ? null : r.get(i, type);
      if (value instanceof UTF8String) {
        value = value.toString();
      } else if (value instanceof ArrayData) {
        value = Arrays.asList(((ArrayData) value).toObjectArray(((ArrayType) type).elementType()));
      } else if (type instanceof org.apache.spark.sql.types.MapType) {
        value = null; // the attributes: a row's of the group, not what these tests are about
      }
      out.put(OUT.fields()[i].name(), value);
    }
    return out;
  }

  private static List<Map<String, Object>> sorted(List<InternalRow> rows) {
    return rows.stream().map(RollupsTest::values)
        .sorted(Comparator.comparing((Map<String, Object> m) -> m.get("dimension") + "|" + m.get("dimension_value")
            + "|" + m.get("metric")))
        .collect(Collectors.toList());
  }

  private static Map<String, Object> only(List<InternalRow> rows, String dimension, String value) {
    List<Map<String, Object>> found = sorted(rows).stream()
        .filter(m -> dimension.equals(m.get("dimension")) && value.equals(m.get("dimension_value")))
        .collect(Collectors.toList());
    assertEquals(1, found.size(), () -> dimension + "=" + value + " in " + sorted(rows));
    return found.get(0);
  }

  private static final Row A = new Row("requests", "sum", "a", "java", "3.9").values(2, 130, 100, 130, 115, 130.0, 0L);
  private static final Row B = new Row("requests", "sum", "b", "java", "3.9").values(1, 10, 10, 10, 10, 10.0, 1L);

  @Test
  void aDimensionsValueSumsItsClientsMeasuresAndKeepsTheirExtremes() {
    List<InternalRow> out = oneStep(A, B);
    Map<String, Object> java = only(out, "software", "java/3.9");
    assertEquals(2L, java.get("instances"));
    assertEquals(3L, java.get("points"));
    assertEquals(140.0, java.get("value_last_sum"));
    assertEquals(10.0, java.get("value_min"));
    assertEquals(130.0, java.get("value_max"));
    assertEquals(62.5, java.get("value_avg"), "the mean of the clients' means");
    assertEquals(140.0, java.get("delta"));
    assertEquals(1L, java.get("resets"));
    assertEquals("requests", java.get("metric"));
    assertEquals(0L, java.get("window_start"));
    // and each client is a value of the client dimension
    assertEquals(1L, only(out, "client", "a").get("instances"));
    assertEquals(10.0, only(out, "client", "b").get("delta"));
    assertEquals(3, out.size());
  }

  @Test
  void twoMergesAroundAShuffleGiveTheOneStepsRows() {
    // Given the rows in two partitions, each merged into partial rows, then the partials merged and finished
    Row c = new Row("requests", "sum", "c", "java", "3.9").values(1, 40, 40, 40, 40, 40.0, 0L);
    List<InternalRow> partials =
        new ArrayList<>(merge(Rollups.Layout.selected(SPEC), false, List.of(A.row(), c.row())));
    partials.addAll(merge(Rollups.Layout.selected(SPEC), false, List.of(B.row())));
    List<InternalRow> twoSteps = merge(null, true, partials);
    // Then the same rows: a partial carries how many means it summed, so the mean stays the clients' mean
    assertEquals(sorted(oneStep(A, B, c)), sorted(twoSteps));
    assertEquals(55.0, only(twoSteps, "software", "java/3.9").get("value_avg"));
  }

  @Test
  void aNullDimensionColumnIsWrittenEmptyButGroupedApartFromAnEmptyOne() {
    Row nullClient = new Row("requests", "sum", null, "java", null).values(1, 1, 1, 1, 1, 1.0, 0L);
    Row emptyClient = new Row("requests", "sum", "", "java", "").values(1, 2, 2, 2, 2, 2.0, 0L);
    List<Map<String, Object>> clients = sorted(oneStep(nullClient, emptyClient)).stream()
        .filter(m -> m.get("dimension").equals("client")).collect(Collectors.toList());
    assertEquals(2, clients.size());
    assertEquals(List.of("", ""), clients.stream().map(m -> m.get("dimension_value")).collect(Collectors.toList()));
    assertEquals("java/", only(oneStep(nullClient), "software", "java/").get("dimension_value"));
  }

  @Test
  void aGaugeHasNoDeltaWhenNoClientHasOne() {
    Row gauge = new Row("lag", "gauge", "a", "java", "3.9").values(1, 5, 5, 5, 5, null, null);
    Map<String, Object> row = only(oneStep(gauge), "client", "a");
    assertNull(row.get("delta"));
    assertNull(row.get("rate"));
    assertNull(row.get("resets"));
    assertEquals(5.0, row.get("value_avg"));
  }

  @Test
  void histogramBucketsAreSummedElementWiseAndTheQuantilesComeFromTheSums() {
    List<Double> bounds = List.of(10.0, 20.0);
    Row a = new Row("latency", "histogram", "a", "java", "3.9").histogram(3, 6.0, bounds, 1L, 2L, 0L);
    Row b = new Row("latency", "histogram", "b", "java", "3.9").histogram(5, 10.0, bounds, 1L, 2L, 2L);
    Map<String, Object> java = only(oneStep(a, b), "software", "java/3.9");
    assertEquals(List.of(2L, 4L, 2L), java.get("bucket_counts"));
    assertEquals(bounds, java.get("explicit_bounds"));
    assertEquals(8L, java.get("count"));
    assertEquals(16.0, java.get("sum"));
    assertEquals(15.0, java.get("p50"));
    // Buckets of different lengths: as zip_with, as long as the longer, null where one is missing.
    Row c = new Row("latency", "histogram", "c", "java", "3.9").histogram(1, 1.0, bounds, 1L);
    assertEquals(Arrays.asList(2L, null, null), only(oneStep(a, c), "software", "java/3.9").get("bucket_counts"));
  }

  @Test
  void histogramsWithOtherBoundsAreOtherGroups() {
    Row a = new Row("latency", "histogram", "a", "java", "3.9").histogram(1, 1.0, List.of(10.0), 1L, 0L);
    Row b = new Row("latency", "histogram", "b", "java", "3.9").histogram(1, 1.0, List.of(20.0), 1L, 0L);
    assertEquals(2, sorted(oneStep(a, b)).stream().filter(m -> m.get("dimension").equals("software")).count());
  }
}
