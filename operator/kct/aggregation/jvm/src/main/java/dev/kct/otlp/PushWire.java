package dev.kct.otlp;

import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.FieldDescriptor;
import com.google.protobuf.Descriptors.OneofDescriptor;
import com.google.protobuf.UnsafeByteOperations;
import io.opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest;
import io.opentelemetry.proto.metrics.v1.Metric;
import java.util.Arrays;
import java.util.IdentityHashMap;
import java.util.Map;

/**
 * A push's data point times read off its protobuf wire bytes, without building its messages: what
 * {@link PushTimes} needs of every record of a stream, where a full parse builds every point, attribute and
 * string only to read one fixed64 per point (~30 us of a ~7 kB push).
 *
 * <p>It reads only pushes of the shape OTLP senders write: every field one the schema knows (from the
 * generated classes' descriptors), with its declared wire type (repeated numbers packed or not), at most one
 * of a metric's data fields, at most one time per point, strings valid UTF-8, messages nested at most
 * {@link #MAX_DEPTH} deep. Of any other push (unknown fields, groups, a metric whose data field repeats, whose
 * points protobuf merges; malformed bytes) it answers {@code null}: not sure, the caller then parses it with
 * protobuf, which decides. So every push it reads, protobuf parses too, into the same points: it checks what
 * protobuf checks of such a push (varints of at most 10 bytes, lengths within their message, packed lengths,
 * UTF-8 of proto3 strings), and a point's time is its {@code time_unix_nano}, 0 without one, as protobuf
 * gives it. tests/unit/aggregation/test_push_wire.py holds the two to the same times over valid, odd and
 * broken pushes.
 */
public final class PushWire {
  private PushWire() {}

  /** Deeper than this, not sure (protobuf's own limit is 100: AnyValue nests). */
  static final int MAX_DEPTH = 32;

  private static final byte UNKNOWN = 0;
  private static final byte VARINT = 1;
  private static final byte FIXED64 = 2;
  private static final byte FIXED32 = 3;
  private static final byte BYTES = 4;
  private static final byte STRING = 5;
  private static final byte MESSAGE = 6;

  /** One message type's fields by number, and its part in finding the points. */
  private static final class Table {
    byte[] kinds = new byte[0];
    boolean[] packable = new boolean[0];
    Table[] messages = new Table[0];
    boolean[] data = new boolean[0]; // a Metric's data oneof fields: at most one of them
    int pointsField = -1; // a metric's data message (Gauge, Sum, ...): its data_points field
    int timeField = -1; // a data point: its time_unix_nano field
  }

  private static final Table REQUEST = tables();

  /**
   * The times of the push's data points in their order, as protobuf's parse of it gives them; empty: a push
   * without points; null: not sure (see the class comment), or no value.
   */
  public static long[] times(byte[] value) {
    if (value == null) {
      return null;
    }
    Scan scan = new Scan(value);
    return scan.message(REQUEST, value.length, 0) ? Arrays.copyOf(scan.times, scan.n) : null;
  }

  /** The cursor over one push. */
  private static final class Scan {
    private final byte[] b;
    private int p;
    private long varint; // the last varint read
    private long pointTime; // the time of the last point read
    long[] times = new long[128];
    int n;

    Scan(byte[] b) {
      this.b = b;
    }

    /** Reads the fields of a message of `t` up to `end`; false: not sure. */
    boolean message(Table t, int end, int depth) {
      boolean timed = false;
      boolean dataSeen = false;
      long time = 0;
      while (p < end) {
        int start = p;
        // A tag is a 32-bit varint: longer ones protobuf reads differently, so leave them to it.
        if (!varint(end) || p - start > 5 || varint > 0xFFFFFFFFL) {
          return false;
        }
        int field = (int) (varint >>> 3);
        int wire = (int) (varint & 7);
        if (field <= 0 || field >= t.kinds.length) {
          return false;
        }
        byte kind = t.kinds[field];
        if (kind == VARINT || kind == FIXED64 || kind == FIXED32) {
          if (field == t.timeField && wire == 1 && end - p >= 8) {
            if (timed) {
              return false;
            }
            timed = true;
            time = fixed64(p);
          }
          if (!number(kind, t.packable[field], wire, end)) {
            return false;
          }
          continue;
        }
        if (kind == UNKNOWN || wire != 2 || !length(end)) {
          return false;
        }
        int stop = p + (int) varint;
        if (kind == MESSAGE) {
          if (depth >= MAX_DEPTH || (t.data[field] && dataSeen)) {
            return false;
          }
          dataSeen |= t.data[field];
          if (!message(t.messages[field], stop, depth + 1)) {
            return false;
          }
          if (field == t.pointsField) {
            add(pointTime);
          }
        } else if (kind == STRING && !utf8(p, stop)) {
          return false;
        }
        p = stop;
      }
      pointTime = timed ? time : 0;
      return p == end;
    }

    /** A number field of `kind` with wire type `wire`: its own (a varint, 8 or 4 bytes), or packed. */
    private boolean number(byte kind, boolean packable, int wire, int end) {
      int size = kind == FIXED64 ? 8 : kind == FIXED32 ? 4 : 0;
      if (wire == 2) {
        return packable && packed(end, size);
      }
      if (wire != (kind == FIXED64 ? 1 : kind == FIXED32 ? 5 : 0)) {
        return false;
      }
      if (size == 0) {
        return varint(end);
      }
      if (end - p < size) {
        return false;
      }
      p += size;
      return true;
    }

    /** A varint of at most 10 bytes before `end` into {@link #varint}. */
    private boolean varint(int end) {
      long v = 0;
      for (int shift = 0; shift < 70; shift += 7) {
        if (p >= end) {
          return false;
        }
        byte x = b[p++];
        v |= (long) (x & 0x7F) << shift;
        if (x >= 0) {
          varint = v;
          return true;
        }
      }
      return false;
    }

    /** A length (a 32-bit varint, as protobuf reads one) of bytes that all come before `end`. */
    private boolean length(int end) {
      int start = p;
      return varint(end) && p - start <= 5 && varint <= end - p;
    }

    /** A packed run of numbers of `size` bytes each (0: varints). */
    private boolean packed(int end, int size) {
      if (!length(end)) {
        return false;
      }
      int stop = p + (int) varint;
      if (size > 0) {
        p = stop;
        return varint % size == 0;
      }
      while (p < stop) {
        if (!varint(stop)) {
          return false;
        }
      }
      return true;
    }

    private long fixed64(int at) {
      long v = 0;
      for (int i = 7; i >= 0; i--) {
        v = (v << 8) | (b[at + i] & 0xFF);
      }
      return v;
    }

    /** UTF-8 as protobuf checks proto3 strings (ASCII, the usual case, without its call). */
    private boolean utf8(int from, int to) {
      for (int i = from; i < to; i++) {
        if (b[i] < 0) {
          return UnsafeByteOperations.unsafeWrap(b, from, to - from).isValidUtf8();
        }
      }
      return true;
    }

    private void add(long time) {
      if (n == times.length) {
        times = Arrays.copyOf(times, n * 2);
      }
      times[n++] = time;
    }
  }

  /** The request's table and, through its message fields, every other (the schema's cycles included). */
  private static Table tables() {
    Map<Descriptor, Table> made = new IdentityHashMap<>();
    Table request = table(ExportMetricsServiceRequest.getDescriptor(), made);
    Descriptor metric = Metric.getDescriptor();
    Table metrics = made.get(metric);
    OneofDescriptor data = null;
    for (OneofDescriptor oneof : metric.getOneofs()) {
      if (oneof.getName().equals("data")) {
        data = oneof;
      }
    }
    if (metrics == null || data == null) {
      throw new IllegalStateException("the OTLP schema has no Metric with a data oneof");
    }
    for (FieldDescriptor kind : data.getFields()) {
      metrics.data[kind.getNumber()] = true;
      Table container = made.get(kind.getMessageType());
      FieldDescriptor points = kind.getMessageType().findFieldByName("data_points");
      FieldDescriptor time = points.getMessageType().findFieldByName("time_unix_nano");
      if (time.getType() != FieldDescriptor.Type.FIXED64 || time.isRepeated()) {
        throw new IllegalStateException(points.getMessageType().getName() + ".time_unix_nano is not a fixed64");
      }
      container.pointsField = points.getNumber();
      made.get(points.getMessageType()).timeField = time.getNumber();
    }
    return request;
  }

  private static Table table(Descriptor type, Map<Descriptor, Table> made) {
    Table t = made.get(type);
    if (t != null) {
      return t;
    }
    t = new Table();
    made.put(type, t);
    int max = 0;
    for (FieldDescriptor f : type.getFields()) {
      max = Math.max(max, f.getNumber());
    }
    t.kinds = new byte[max + 1];
    t.packable = new boolean[max + 1];
    t.messages = new Table[max + 1];
    t.data = new boolean[max + 1];
    for (FieldDescriptor f : type.getFields()) {
      int at = f.getNumber();
      t.kinds[at] = kind(f.getType());
      t.packable[at] = f.isRepeated() && f.isPackable();
      if (t.kinds[at] == MESSAGE) {
        t.messages[at] = table(f.getMessageType(), made);
      }
    }
    return t;
  }

  private static byte kind(FieldDescriptor.Type type) {
    switch (type) {
      case INT32:
      case INT64:
      case UINT32:
      case UINT64:
      case SINT32:
      case SINT64:
      case BOOL:
      case ENUM:
        return VARINT;
      case FIXED64:
      case SFIXED64:
      case DOUBLE:
        return FIXED64;
      case FIXED32:
      case SFIXED32:
      case FLOAT:
        return FIXED32;
      case BYTES:
        return BYTES;
      case STRING:
        return STRING;
      case MESSAGE:
        return MESSAGE;
      default: // groups: left to protobuf
        return UNKNOWN;
    }
  }
}
