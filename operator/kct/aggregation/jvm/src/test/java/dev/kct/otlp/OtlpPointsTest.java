package dev.kct.otlp;

import static dev.kct.otlp.Pushes.SECOND;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import com.google.protobuf.ByteString;
import io.opentelemetry.proto.common.v1.AnyValue;
import io.opentelemetry.proto.common.v1.ArrayValue;
import io.opentelemetry.proto.common.v1.KeyValue;
import io.opentelemetry.proto.common.v1.KeyValueList;
import io.opentelemetry.proto.metrics.v1.AggregationTemporality;
import io.opentelemetry.proto.metrics.v1.Metric;
import io.opentelemetry.proto.metrics.v1.NumberDataPoint;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * The JVM decoder's columns of a push, and its strings of attribute values: the Python decoder's
 * ({@code decode._any_value}: Python's {@code str()}), so a series has one attributes key whichever decodes it.
 * The expected strings below are what Python prints for the same values.
 */
class OtlpPointsTest {
  private static final int METRICS = 1;
  private static final int METRIC_IX = 3;
  private static final int ATTRIBUTES = 4;
  private static final int ATTRIBUTES_KEY = 5;
  private static final int TIME = 7;
  private static final int VALUE = 8;
  private static final int COUNT = 9;
  private static final int BUCKETS = 11;

  @Test
  void aPushBecomesOneArrayPerColumnWithItsMetricsOnce() {
    Row row = new OtlpPoints().call(Pushes.push(
        Pushes.counter("requests", Pushes.point(10, 5, 1.5), Pushes.point(20, 5, 2.5)),
        Metric.newBuilder().setName("no points").build(),
        Pushes.gauge("lag", NumberDataPoint.newBuilder().setTimeUnixNano(30 * SECOND).setAsInt(7).build()),
        Pushes.histogram("latency", AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA,
            Pushes.histogramPoint(40, 0, List.of(1L, 2L), List.of(10.0)))));
    Object[] metrics = (Object[]) row.get(METRICS);
    assertEquals(3, metrics.length, "a metric without points is left out");
    Row requests = (Row) metrics[0];
    assertEquals(List.of("requests", "1", "sum", "cumulative", true),
        List.of(requests.get(0), requests.get(1), requests.get(2), requests.get(3), requests.get(4)));
    assertEquals("histogram", ((Row) metrics[2]).get(2));
    assertEquals("delta", ((Row) metrics[2]).get(3));
    assertArrayEquals(new int[] {0, 0, 1, 2}, (int[]) row.get(METRIC_IX));
    assertArrayEquals(new long[] {10 * SECOND, 20 * SECOND, 30 * SECOND, 40 * SECOND}, (long[]) row.get(TIME));
    assertArrayEquals(new Double[] {1.5, 2.5, 7.0, null}, (Double[]) row.get(VALUE), "ints become doubles");
    assertArrayEquals(new Long[] {null, null, null, 3L}, (Long[]) row.get(COUNT));
    assertArrayEquals(new Long[] {1L, 2L}, (Long[]) ((Object[]) row.get(BUCKETS))[3]);
  }

  @Test
  void aRecordThatIsNotAPushHasNoPoints() {
    assertEquals(0, ((long[]) new OtlpPoints().call(null).get(TIME)).length);
    assertEquals(0, ((long[]) new OtlpPoints().call("no".getBytes(StandardCharsets.UTF_8)).get(TIME)).length);
  }

  @Test
  void attributesAreADictAndTheirKeyIsSortedByCodePoint() {
    // Given a key seen twice (a Python dict: first position, last value) and keys out of order
    NumberDataPoint point = Pushes.point(1, 0, 1.0, "b", "2", "a", "1", "b", "3", "\uD83D\uDE00", "x", "\uFFFD", "y");
    Row row = new OtlpPoints().call(Pushes.push(Pushes.gauge("g", point)));
    @SuppressWarnings("unchecked")
    Map<String, String> attributes = (Map<String, String>) ((Object[]) row.get(ATTRIBUTES))[0];
    assertEquals(List.of("b", "a", "\uD83D\uDE00", "\uFFFD"), List.copyOf(attributes.keySet()));
    assertEquals("3", attributes.get("b"));
    // U+FFFD sorts before U+1F600 by code point (in UTF-16 units it would sort after)
    assertEquals("a=1,b=3,\uFFFD=y,\uD83D\uDE00=x", ((String[]) row.get(ATTRIBUTES_KEY))[0]);
  }

  @Test
  void scalarValuesAreWrittenAsPythonsStrWritesThem() {
    assertEquals("true", OtlpPoints.anyValue(AnyValue.newBuilder().setBoolValue(true).build()));
    assertEquals("-42", OtlpPoints.anyValue(AnyValue.newBuilder().setIntValue(-42).build()));
    assertEquals("00ff41",
        OtlpPoints.anyValue(AnyValue.newBuilder().setBytesValue(ByteString.copyFrom(new byte[] {0, -1, 'A'})).build()));
    assertEquals("", OtlpPoints.anyValue(AnyValue.getDefaultInstance()));
  }

  @ParameterizedTest(name = "{0} -> {1}")
  @CsvSource({"1e16, 1e+16", "0.1, 0.1", "100.0, 100.0", "1e-05, 1e-05", "0.0001, 0.0001", "-0.0, -0.0",
      "123456789012345678.0, 1.2345678901234568e+17", "1.5e300, 1.5e+300", "NaN, nan", "-Infinity, -inf"})
  void doublesAreWrittenAsPythonsRepr(double value, String python) {
    assertEquals(python, OtlpPoints.pythonRepr(value));
    assertEquals(python, OtlpPoints.anyValue(AnyValue.newBuilder().setDoubleValue(value).build()));
  }

  @Test
  void arraysAndKeyValueListsAreTheirTextFormatOnOneLine() {
    AnyValue array = AnyValue.newBuilder().setArrayValue(ArrayValue.newBuilder()
        .addValues(AnyValue.newBuilder().setStringValue("a\"b"))
        .addValues(AnyValue.newBuilder().setIntValue(1))
        .addValues(AnyValue.newBuilder().setDoubleValue(0.1 + 0.2))
        .addValues(AnyValue.newBuilder().setDoubleValue(1e20))
        .addValues(AnyValue.newBuilder().setBytesValue(ByteString.copyFrom(new byte[] {0, 'A'})))
        .addValues(AnyValue.newBuilder().setBoolValue(true))).build();
    assertEquals("values {   string_value: \"a\\\"b\" } values {   int_value: 1 } values {   double_value: "
        + "0.30000000000000004 } values {   double_value: 1e+20 } values {   bytes_value: \"\\000A\" } "
        + "values {   bool_value: true }", OtlpPoints.anyValue(array));
    AnyValue list = AnyValue.newBuilder().setKvlistValue(KeyValueList.newBuilder().addValues(KeyValue.newBuilder()
        .setKey("k").setValue(AnyValue.newBuilder().setArrayValue(ArrayValue.newBuilder()
            .addValues(AnyValue.newBuilder().setDoubleValue(1.0 / 3)))))).build();
    assertEquals("values {   key: \"k\"   value {     array_value {       values {         double_value: "
        + "0.33333333333333331       }     }   } }", OtlpPoints.anyValue(list));
  }

  @Test
  void temporalityNamesItsEnumValue() {
    assertEquals("delta", OtlpPoints.temporality(1));
    assertEquals("cumulative", OtlpPoints.temporality(2));
    assertEquals("unspecified", OtlpPoints.temporality(0));
    assertNull(((Row) ((Object[]) new OtlpPoints().call(Pushes.push(Pushes.gauge("g", Pushes.point(1, 0, 1))))
        .get(METRICS))[0]).get(3), "a gauge has no temporality");
  }
}
