package dev.kct.otlp;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.columnar.CachedBatch;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.unsafe.types.UTF8String;
import org.junit.jupiter.api.Test;

/** The cache's rows go in as rows and come out the same, in order, whole or a selection of their columns. */
class RowCacheTest {
  private static final DataType[] TYPES = {DataTypes.StringType, DataTypes.LongType, DataTypes.BinaryType};

  private static List<InternalRow> rows(int n) {
    List<InternalRow> out = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      out.add(new GenericInternalRow(new Object[] {i % 7 == 0 ? null : UTF8String.fromString("client-" + i),
          (long) i, new byte[i % 300]}));
    }
    return out;
  }

  private static List<CachedBatch> cache(List<InternalRow> rows) {
    List<CachedBatch> batches = new ArrayList<>();
    RowCache.batches(rows.iterator(), TYPES).forEachRemaining(batches::add);
    return batches;
  }

  @Test
  void rowsComeBackWholeAndInOrderAcrossBatches() {
    // Given more rows than one batch holds
    List<InternalRow> given = rows(RowCache.ROWS_PER_BATCH + 10);
    List<CachedBatch> batches = cache(given);
    assertEquals(2, batches.size());
    assertEquals(RowCache.ROWS_PER_BATCH, batches.get(0).numRows());
    assertTrue(batches.get(0).sizeInBytes() > 0);
    // When they are read back, every column
    Iterator<InternalRow> read = RowCache.rows(batches.iterator(), TYPES, new int[] {0, 1, 2}, true);
    for (InternalRow row : given) {
      InternalRow back = read.next();
      assertEquals(row.isNullAt(0), back.isNullAt(0));
      if (!row.isNullAt(0)) {
        assertEquals(row.getUTF8String(0), back.getUTF8String(0));
      }
      assertEquals(row.getLong(1), back.getLong(1));
      assertArrayEquals(row.getBinary(2), back.getBinary(2));
    }
    assertTrue(!read.hasNext());
  }

  @Test
  void aBatchIsCutAtItsByteBudget() {
    // Rows of ~1 MB: a batch stops once it holds 4 MB, well before its row count.
    List<InternalRow> big = new ArrayList<>();
    for (int i = 0; i < 10; i++) {
      big.add(new GenericInternalRow(new Object[] {null, (long) i, new byte[1 << 20]}));
    }
    List<CachedBatch> batches = cache(big);
    assertTrue(batches.size() >= 3, "batches: " + batches.size());
    assertEquals(10, batches.stream().mapToInt(CachedBatch::numRows).sum());
  }

  @Test
  void aSelectionReadsItsColumnsInItsOrder() {
    List<CachedBatch> batches = cache(rows(3));
    Iterator<InternalRow> read = RowCache.rows(batches.iterator(), TYPES, new int[] {1, 0}, false);
    InternalRow first = read.next();
    assertEquals(0L, first.getLong(0));
    assertTrue(first.isNullAt(1));
    InternalRow second = read.next();
    assertEquals(1L, second.getLong(0));
    assertEquals("client-1", second.getUTF8String(1).toString());
  }
}
