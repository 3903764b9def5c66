package dev.kct.otlp;

import java.math.BigDecimal;
import java.math.RoundingMode;
import java.util.List;

/**
 * {@code transforms._with_quantiles} in Java, to the bit, for {@link ClientWindows} and {@link Rollups}: the
 * rank {@code q * total} and the fraction of the bucket below it are Spark decimals there ({@code q} is a
 * decimal literal), the fraction a {@code DECIMAL(38, 16)} (Spark's type for that division: computed to 39
 * places, then rounded, both half up), turned into a double before the interpolation in doubles.
 */
final class Quantiles {
  private Quantiles() {}

  /** The column names of a quantile spec, {@code p50=0.5;...}. */
  static String[] names(String spec) {
    String[] parts = spec.split(";");
    String[] out = new String[parts.length];
    for (int i = 0; i < parts.length; i++) {
      out[i] = parts[i].split("=", 2)[0];
    }
    return out;
  }

  /** The levels of a quantile spec, {@code p50=0.5;...}, as the decimals the SQL path's literals are. */
  static BigDecimal[] levels(String spec) {
    String[] parts = spec.split(";");
    BigDecimal[] out = new BigDecimal[parts.length];
    for (int i = 0; i < parts.length; i++) {
      out[i] = new BigDecimal(parts[i].split("=", 2)[1]);
    }
    return out;
  }

  /** The running totals of the bucket counts, or null when the SQL gives no quantiles (no bounds, a null
   * count, a total not above 0). */
  static long[] cumulative(Long[] counts, List<Double> bounds) {
    if (counts == null || bounds == null || bounds.isEmpty()) {
      return null;
    }
    long[] cum = new long[counts.length];
    long total = 0;
    for (int i = 0; i < counts.length; i++) {
      if (counts[i] == null) {
        return null;
      }
      total += counts[i];
      cum[i] = total;
    }
    return total > 0 ? cum : null;
  }

  static Double estimate(BigDecimal q, Long[] counts, long[] cum, List<Double> bounds) {
    BigDecimal target = q.multiply(BigDecimal.valueOf(cum[cum.length - 1]));
    int i = 0;
    while (i < cum.length && BigDecimal.valueOf(cum[i]).compareTo(target) < 0) {
      i++;
    }
    if (i == cum.length || i - 1 >= bounds.size()) {
      return null; // no bucket reaches the rank, or counts beyond the bounds: null in SQL too
    }
    int n = bounds.size();
    double lower = i == 0
        ? (ClientWindows.compareDoubles(bounds.get(0), 0.0) < 0 ? bounds.get(0) : 0.0) : bounds.get(i - 1);
    double upper = i >= n ? bounds.get(n - 1) : bounds.get(i);
    long below = i == 0 ? 0L : cum[i - 1];
    BigDecimal fraction = target.subtract(BigDecimal.valueOf(below))
        .divide(BigDecimal.valueOf(counts[i]), 39, RoundingMode.HALF_UP)
        .setScale(16, RoundingMode.HALF_UP);
    return lower + (upper - lower) * fraction.doubleValue();
  }

  /** Every quantile of {@code levels} (null where the SQL gives null) from summed bucket counts and bounds. */
  static Object[] all(BigDecimal[] levels, Long[] counts, List<Double> bounds) {
    Object[] out = new Object[levels.length];
    long[] cum = cumulative(counts, bounds);
    for (int i = 0; cum != null && i < levels.length; i++) {
      out[i] = estimate(levels[i], counts, cum, bounds);
    }
    return out;
  }
}
