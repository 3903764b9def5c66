package dev.kct.otlp;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Locale;
import java.util.Set;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.api.java.UDF2;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;
import scala.collection.Iterator;
import scala.collection.Seq;

/**
 * Whether a Kafka record may hold a client's termination: a header whose lower-cased name is one of the
 * terminating label's names and whose value, lower-cased, is {@code true}; or a push whose bytes hold the
 * metric name {@code client.terminating} (a protobuf string is its UTF-8 bytes). The same records as the SQL
 * filter {@code kct.aggregation.terminating.may_terminate} falls back to, a superset of the records holding one: the
 * job decodes only these and finds the terminations exactly. The SQL filter evaluates {@code exists} with an
 * interpreted lambda and lower-cases every header name, and {@code contains} compares the ~7 kB push from
 * every byte on: ~110 ms of task CPU per 10,000 records, ~75 ms here (spark/README.md). Here only header names
 * of a name's length are lower-cased, and the push is searched with Horspool's skips (the byte under the
 * name's last one decides how far to move).
 */
public final class Terminating implements UDF2<Seq<Row>, byte[], Boolean> {
  private static final long serialVersionUID = 1L;
  static final byte[] METRIC = "client.terminating".getBytes(StandardCharsets.UTF_8);
  private static final int[] SKIP = skips(METRIC);

  private final Set<String> headerNames; // lower-case

  Terminating(Set<String> headerNames) {
    this.headerNames = headerNames;
  }

  /**
   * The filter as a BOOLEAN column (never null) over a records frame's {@code headers} (array of struct key
   * string, value binary) and {@code value} (binary), called from Python.
   *
   * @param headerNames the terminating label's header names, comma-separated, lower-case
   */
  public static Column column(Column headers, Column value, String headerNames) {
    Set<String> names = Set.of(headerNames.toLowerCase(Locale.ROOT).split(","));
    return functions.udf(new Terminating(names), DataTypes.BooleanType).asNonNullable().apply(headers, value);
  }

  @Override
  public Boolean call(Seq<Row> headers, byte[] value) {
    return flagged(headers) || contains(value, METRIC, SKIP);
  }

  /** A header that says the client is terminating (SQL: {@code lower(key) IN names AND lower(value) = 'true'}). */
  boolean flagged(Seq<Row> headers) {
    if (headers == null) {
      return false;
    }
    Iterator<Row> it = headers.iterator();
    while (it.hasNext()) {
      Row h = it.next();
      if (h == null || h.isNullAt(0) || h.isNullAt(1) || !isName(h.getString(0))) {
        continue;
      }
      String flag = new String((byte[]) h.get(1), StandardCharsets.UTF_8);
      if (flag.toLowerCase(Locale.ROOT).equals("true")) {
        return true;
      }
    }
    return false;
  }

  /** Whether {@code key} lower-cased is one of the names (ASCII). Lower-casing keeps a string's length but for
   * U+0130, which becomes two chars, one of them not ASCII: a key of another length than a name never becomes
   * that name, so only keys of a name's length are lower-cased. */
  private boolean isName(String key) {
    for (String name : headerNames) {
      if (key.length() == name.length() && key.toLowerCase(Locale.ROOT).equals(name)) {
        return true;
      }
    }
    return false;
  }

  /** Horspool's skip per byte: how far the pattern may move when that byte is under its last one. */
  static int[] skips(byte[] pattern) {
    int[] skip = new int[256];
    Arrays.fill(skip, pattern.length);
    for (int j = 0; j < pattern.length - 1; j++) {
      skip[pattern[j] & 0xff] = pattern.length - 1 - j;
    }
    return skip;
  }

  /** Whether {@code text} holds {@code pattern} (non-empty), with {@code skip} = {@link #skips}(pattern). */
  static boolean contains(byte[] text, byte[] pattern, int[] skip) {
    if (text == null) {
      return false;
    }
    int last = pattern.length - 1;
    byte end = pattern[last];
    for (int i = 0; i + last < text.length; i += skip[text[i + last] & 0xff]) {
      if (text[i + last] == end && matchesAt(text, i, pattern, last)) {
        return true;
      }
    }
    return false;
  }

  private static boolean matchesAt(byte[] text, int at, byte[] pattern, int length) {
    for (int j = 0; j < length; j++) {
      if (text[at + j] != pattern[j]) {
        return false;
      }
    }
    return true;
  }
}
