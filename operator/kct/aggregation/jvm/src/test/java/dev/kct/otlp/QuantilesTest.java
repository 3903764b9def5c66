package dev.kct.otlp;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.math.BigDecimal;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The quantile estimate of a histogram's summed buckets, as transforms._with_quantiles computes it in SQL. */
class QuantilesTest {
  private static final Long[] NONE = new Long[0];

  @Test
  void aSpecNamesItsColumnsAndItsDecimalLevelsInOrder() {
    assertArrayEquals(new String[] {"p50", "p95", "p99"}, Quantiles.names("p50=0.5;p95=0.95;p99=0.99"));
    assertArrayEquals(new BigDecimal[] {new BigDecimal("0.5"), new BigDecimal("0.95"), new BigDecimal("0.99")},
        Quantiles.levels("p50=0.5;p95=0.95;p99=0.99"));
  }

  @Test
  void theRankFallsInABucketAndIsInterpolatedBetweenItsBounds() {
    // Given buckets (-inf,10] 1, (10,20] 2, (20,+inf) 1: the median's rank 2 is the first of bucket (10,20]'s 2.
    Object[] q = Quantiles.all(Quantiles.levels("p50=0.5"), new Long[] {1L, 2L, 1L}, List.of(10.0, 20.0));
    assertEquals(15.0, q[0]);
  }

  @Test
  void theFirstBucketStartsAtZeroUnlessItsBoundIsNegative() {
    assertEquals(1.25, Quantiles.all(Quantiles.levels("q=0.25"), new Long[] {2L, 0L}, List.of(5.0))[0]);
    // Its bound below zero: the bucket is taken to start there (no lower bound to interpolate from).
    assertEquals(-4.0, Quantiles.all(Quantiles.levels("q=0.25"), new Long[] {2L, 0L}, List.of(-4.0))[0]);
  }

  @Test
  void theOverflowBucketIsItsLowerBound() {
    assertEquals(2.0, Quantiles.all(Quantiles.levels("q=0.5"), new Long[] {0L, 0L, 4L}, List.of(1.0, 2.0))[0]);
  }

  @Test
  void theFractionIsASparkDecimalRoundedHalfUpTo16PlacesNotADoubleDivision() {
    // Rank 0.75 * 4 = 3 in bucket (0,1] holding 3 of which 1 lies below: 2/3, which DECIMAL(38,16) makes
    // 0.6666666666666667 (half up), a different double than 2.0 / 3.0.
    Object q = Quantiles.all(Quantiles.levels("p75=0.75"), new Long[] {1L, 3L}, List.of(0.0, 1.0))[0];
    assertEquals(Double.parseDouble("0.6666666666666667"), q);
    assertNotEquals(2.0 / 3.0, q);
  }

  @Test
  void noQuantileWhereTheSqlGivesNull() {
    BigDecimal[] median = Quantiles.levels("p50=0.5");
    assertNull(Quantiles.all(median, new Long[] {1L, 1L}, List.of())[0], "no bounds");
    assertNull(Quantiles.all(median, new Long[] {1L, null}, List.of(1.0))[0], "a null count");
    assertNull(Quantiles.all(median, new Long[] {0L, 0L}, List.of(1.0))[0], "nothing counted");
    assertNull(Quantiles.all(median, null, List.of(1.0))[0], "no buckets");
    assertNull(Quantiles.all(median, NONE, List.of(1.0))[0], "no buckets");
    // Counts beyond the bounds' buckets: the rank lands in a bucket without bounds.
    assertNull(Quantiles.all(median, new Long[] {0L, 0L, 0L, 1L}, List.of(1.0))[0], "counts beyond the bounds");
  }
}
