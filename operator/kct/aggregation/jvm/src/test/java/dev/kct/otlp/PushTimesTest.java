package dev.kct.otlp;

import static dev.kct.otlp.Pushes.SECOND;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import io.opentelemetry.proto.metrics.v1.NumberDataPoint;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;

/** A push's time range and its points before a time: what a stream knows of a record before aggregating it. */
class PushTimesTest {
  private static final byte[] PUSH = Pushes.push(
      Pushes.gauge("g", Pushes.point(30, 0, 1.0), Pushes.point(10, 0, 1.0)),
      Pushes.counter("c", Pushes.point(20, 0, 1.0)));

  @Test
  void theRangeIsTheEarliestAndTheNewestPointWhateverTheirOrder() {
    assertArrayEquals(new long[] {10 * SECOND, 30 * SECOND}, new PushTimes().call(PUSH));
  }

  @Test
  void timesAreComparedAsSignedLongs() {
    // A time_unix_nano above 2^63 - 1 (unsigned on the wire) is a negative long: the earliest, as both
    // decoders store it.
    byte[] push = Pushes.push(Pushes.gauge("g", Pushes.point(10, 0, 1.0),
        NumberDataPoint.newBuilder().setTimeUnixNano(-5L).setAsDouble(1.0).build()));
    assertArrayEquals(new long[] {-5L, 10 * SECOND}, new PushTimes().call(push));
  }

  @Test
  void noRangeForARecordThatIsNotAPushOrHasNoPoints() {
    assertNull(new PushTimes().call(null));
    assertNull(new PushTimes().call("not a push".getBytes(StandardCharsets.UTF_8)));
    assertNull(new PushTimes().call(Pushes.push(Pushes.gauge("empty"))));
  }

  @Test
  void beforeCountsThePointsStrictlyBeforeTheTime() {
    PushTimes.Before before = new PushTimes.Before();
    assertEquals(0L, before.call(PUSH, 10 * SECOND));
    assertEquals(1L, before.call(PUSH, 10 * SECOND + 1));
    assertEquals(2L, before.call(PUSH, 30 * SECOND));
    assertEquals(3L, before.call(PUSH, Long.MAX_VALUE));
    assertEquals(0L, before.call(PUSH, null), "no time: nothing is late");
    assertEquals(0L, before.call(null, Long.MAX_VALUE));
  }

  @Test
  void aPushTheWireReaderLeavesToProtobufGivesTheSameAnswers() {
    // Given the push with a field the schema does not know appended (PushWire: not sure; protobuf parses it)
    byte[] odd = java.util.Arrays.copyOf(PUSH, PUSH.length + 3);
    odd[PUSH.length] = (byte) 0xC0; // field 1000, varint: tag 8000 = 0xC0 0x3E
    odd[PUSH.length + 1] = 0x3E;
    odd[PUSH.length + 2] = 0x05;
    assertNull(PushWire.times(odd));
    assertArrayEquals(new long[] {10 * SECOND, 30 * SECOND}, new PushTimes().call(odd));
    assertEquals(2L, new PushTimes.Before().call(odd, 30 * SECOND));
  }
}
