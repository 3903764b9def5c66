package dev.kct.otlp;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Iterator;
import java.util.List;
import java.util.NoSuchElementException;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.BoundReference;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.columnar.CachedBatch;
import org.apache.spark.sql.columnar.CachedBatchSerializer;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.storage.StorageLevel;
import scala.Function2;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractFunction2;

/**
 * A cache of rows as Spark's UnsafeRows, their bytes copied one after the other ({@code
 * spark.sql.cache.serializer}). Spark's default cache encodes every column of every row into compressed
 * column buffers and decodes them again when read; the job's caches (a run's Kafka records, its client_metrics
 * rows) are read whole, once or twice, seconds later, so that work buys nothing: it was ~20 % of a warm run's
 * task CPU (spark/README.md). Memory is about the rows' own size (the records' payloads dominate either way).
 * No batch is skipped by a filter (no column statistics are kept).
 */
public final class RowCache implements CachedBatchSerializer {
  private static final long serialVersionUID = 1L;

  /** Rows per batch: batches are what the block manager keeps, and what a partition's reader walks. */
  static final int ROWS_PER_BATCH = 4096;
  /** ... or fewer, once a batch holds this many bytes (a run's Kafka records are ~7 kB each). */
  static final int BYTES_PER_BATCH = 4 << 20;

  /** Rows as UnsafeRow bytes laid end to end; {@code sizes} holds each row's length, in order. */
  static final class Rows implements CachedBatch, Serializable {
    private static final long serialVersionUID = 1L;
    final int[] sizes;
    final byte[] bytes;

    Rows(int[] sizes, byte[] bytes) {
      this.sizes = sizes;
      this.bytes = bytes;
    }

    @Override
    public int numRows() {
      return sizes.length;
    }

    @Override
    public long sizeInBytes() {
      return bytes.length + 4L * sizes.length;
    }
  }

  @Override
  public boolean supportsColumnarInput(Seq<Attribute> schema) {
    return false;
  }

  @Override
  public boolean supportsColumnarOutput(StructType schema) {
    return false;
  }

  @Override
  public RDD<CachedBatch> convertInternalRowToCachedBatch(RDD<InternalRow> input, Seq<Attribute> schema,
      StorageLevel storageLevel, SQLConf conf) {
    DataType[] types = typesOf(schema);
    return input.toJavaRDD().mapPartitions((Iterator<InternalRow> rows) -> batches(rows, types)).rdd();
  }

  /** The partition's rows in batches of ROWS_PER_BATCH (rows of other kinds made UnsafeRows first). */
  static Iterator<CachedBatch> batches(Iterator<InternalRow> rows, DataType[] types) {
    UnsafeProjection toUnsafe = UnsafeProjection.create(types);
    return new Iterator<CachedBatch>() {
      @Override
      public boolean hasNext() {
        return rows.hasNext();
      }

      @Override
      public CachedBatch next() {
        if (!rows.hasNext()) {
          throw new NoSuchElementException();
        }
        int[] sizes = new int[ROWS_PER_BATCH];
        byte[] bytes = new byte[1 << 16];
        int count = 0;
        int used = 0;
        while (count < ROWS_PER_BATCH && used < BYTES_PER_BATCH && rows.hasNext()) {
          InternalRow row = rows.next();
          UnsafeRow unsafe = row instanceof UnsafeRow ? (UnsafeRow) row : toUnsafe.apply(row);
          int size = unsafe.getSizeInBytes();
          if (used + size > bytes.length) {
            bytes = Arrays.copyOf(bytes, Math.max(bytes.length * 2, used + size));
          }
          unsafe.writeToMemory(bytes, org.apache.spark.unsafe.Platform.BYTE_ARRAY_OFFSET + used);
          sizes[count++] = size;
          used += size;
        }
        return new Rows(Arrays.copyOf(sizes, count), Arrays.copyOf(bytes, used));
      }
    };
  }

  @Override
  public RDD<InternalRow> convertCachedBatchToInternalRow(RDD<CachedBatch> input, Seq<Attribute> cacheAttributes,
      Seq<Attribute> selectedAttributes, SQLConf conf) {
    int[] ordinals = ordinals(cacheAttributes, selectedAttributes);
    DataType[] types = typesOf(cacheAttributes);
    boolean all = ordinals.length == types.length && isIdentity(ordinals);
    return input.toJavaRDD().mapPartitions((Iterator<CachedBatch> cached) -> rows(cached, types, ordinals, all))
        .rdd();
  }

  /** The rows of `cached`, with the columns at `ordinals` (all of them, as they are, when `all`). */
  static Iterator<InternalRow> rows(Iterator<CachedBatch> cached, DataType[] types, int[] ordinals, boolean all) {
    UnsafeProjection select = all ? null : UnsafeProjection.create(selection(types, ordinals));
    UnsafeRow row = new UnsafeRow(types.length);
    return new Iterator<InternalRow>() {
      private Rows batch;
      private int index;
      private int offset;

      @Override
      public boolean hasNext() {
        while (batch == null || index == batch.sizes.length) {
          if (!cached.hasNext()) {
            return false;
          }
          batch = (Rows) cached.next();
          index = 0;
          offset = 0;
        }
        return true;
      }

      @Override
      public InternalRow next() {
        if (!hasNext()) {
          throw new NoSuchElementException();
        }
        int size = batch.sizes[index++];
        row.pointTo(batch.bytes, org.apache.spark.unsafe.Platform.BYTE_ARRAY_OFFSET + offset, size);
        offset += size;
        return select == null ? row : select.apply(row);
      }
    };
  }

  private static DataType[] typesOf(Seq<Attribute> attributes) {
    List<Attribute> list = CollectionConverters.asJava(attributes);
    DataType[] types = new DataType[list.size()];
    for (int i = 0; i < types.length; i++) {
      types[i] = list.get(i).dataType();
    }
    return types;
  }

  /** Where each selected attribute is in the cached rows (by expression id, as Spark's own cache does). */
  static int[] ordinals(Seq<Attribute> cacheAttributes, Seq<Attribute> selectedAttributes) {
    List<Attribute> cached = CollectionConverters.asJava(cacheAttributes);
    List<Attribute> selected = CollectionConverters.asJava(selectedAttributes);
    int[] ordinals = new int[selected.size()];
    for (int i = 0; i < ordinals.length; i++) {
      ordinals[i] = -1;
      for (int j = 0; j < cached.size(); j++) {
        if (cached.get(j).exprId().equals(selected.get(i).exprId())) {
          ordinals[i] = j;
          break;
        }
      }
      if (ordinals[i] < 0) {
        throw new IllegalArgumentException("not a cached column: " + selected.get(i));
      }
    }
    return ordinals;
  }

  private static boolean isIdentity(int[] ordinals) {
    for (int i = 0; i < ordinals.length; i++) {
      if (ordinals[i] != i) {
        return false;
      }
    }
    return true;
  }

  private static Seq<Expression> selection(DataType[] types, int[] ordinals) {
    List<Expression> columns = new ArrayList<>();
    for (int ordinal : ordinals) {
      columns.add(new BoundReference(ordinal, types[ordinal], true));
    }
    return CollectionConverters.asScala(columns).toList();
  }

  /** Every batch is read: no statistics to skip one by. */
  @Override
  public Function2<Object, scala.collection.Iterator<CachedBatch>, scala.collection.Iterator<CachedBatch>>
      buildFilter(Seq<Expression> predicates, Seq<Attribute> cachedAttributes) {
    return new KeepAll();
  }

  private static final class KeepAll
      extends AbstractFunction2<Object, scala.collection.Iterator<CachedBatch>, scala.collection.Iterator<CachedBatch>>
      implements Serializable {
    private static final long serialVersionUID = 1L;

    @Override
    public scala.collection.Iterator<CachedBatch> apply(Object partition,
        scala.collection.Iterator<CachedBatch> batches) {
      return batches;
    }
  }

  @Override
  public RDD<CachedBatch> convertColumnarBatchToCachedBatch(RDD<ColumnarBatch> input, Seq<Attribute> schema,
      StorageLevel storageLevel, SQLConf conf) {
    throw new UnsupportedOperationException("RowCache takes rows only (supportsColumnarInput is false)");
  }

  @Override
  public RDD<ColumnarBatch> convertCachedBatchToColumnarBatch(RDD<CachedBatch> input,
      Seq<Attribute> cacheAttributes, Seq<Attribute> selectedAttributes, SQLConf conf) {
    throw new UnsupportedOperationException("RowCache gives rows only (supportsColumnarOutput is false)");
  }
}
