package dev.kct.otlp;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.junit.jupiter.api.Test;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/** Which records may hold a client's termination: a flag header, or the metric's name in the push's bytes. */
class TerminatingTest {
  private static final Terminating FILTER = new Terminating(Set.of("client_terminating", "kct-client-terminating"));

  /** Kafka headers as Spark's Kafka source gives them: {@code name, value, ...} (a null value stays null). */
  private static Seq<Row> headers(String... nameValues) {
    List<Row> rows = new ArrayList<>();
    for (int i = 0; i < nameValues.length; i += 2) {
      String value = nameValues[i + 1];
      rows.add(RowFactory.create(nameValues[i], value == null ? null : value.getBytes(StandardCharsets.UTF_8)));
    }
    return CollectionConverters.asScala(rows).toList();
  }

  @Test
  void aFlagHeaderOfAnyOfItsNamesInAnyCaseSaysTrue() {
    assertTrue(FILTER.call(headers("KCT-Client-Terminating", "TRUE"), null));
    assertTrue(FILTER.call(headers("other", "true", "client_terminating", "True"), null));
    assertFalse(FILTER.call(headers("client_terminating", "false"), null));
    assertFalse(FILTER.call(headers("client_terminating", null, "other", "true"), null));
    assertFalse(FILTER.call(null, null));
  }

  @Test
  void aHeaderThatOnlyLowerCasesIntoANamesLettersIsNotIt() {
    // "İ" (U+0130) lower-cases to two chars, "i" and a combining dot: never the one-letter name "i".
    Terminating filter = new Terminating(Set.of("i"));
    assertFalse(filter.call(headers("\u0130", "true"), null));
    assertTrue(filter.call(headers("I", "true"), null));
  }

  @Test
  void aPushHoldingTheMetricsNameMayTerminate() {
    byte[] terminating = Pushes.push(Pushes.gauge("client.terminating", Pushes.point(1, 0, 1.0)));
    byte[] other = Pushes.push(Pushes.gauge("client.terminated", Pushes.point(1, 0, 1.0)));
    assertTrue(FILTER.call(headers(), terminating));
    assertFalse(FILTER.call(headers(), other));
  }

  @Test
  void theSearchFindsThePatternWhereverItIs() {
    byte[] pattern = "abcab".getBytes(StandardCharsets.US_ASCII);
    int[] skip = Terminating.skips(pattern);
    for (String text : new String[] {"abcab", "xabcab", "abcabx", "ababcabab", "aabcaabcab"}) {
      assertTrue(Terminating.contains(text.getBytes(StandardCharsets.US_ASCII), pattern, skip), text);
    }
    for (String text : new String[] {"", "abca", "abcaa", "bcabx", "abcxabcb"}) {
      assertFalse(Terminating.contains(text.getBytes(StandardCharsets.US_ASCII), pattern, skip), text);
    }
    assertFalse(Terminating.contains(null, pattern, skip));
  }
}
