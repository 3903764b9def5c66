package dev.kct.otlp;

import org.apache.spark.sql.Column;
import org.apache.spark.sql.api.java.UDF0;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;

/**
 * A BIGINT that changes every micro-batch (a stream's time bounds), as a column the generated code does not
 * change with. Spark writes a BIGINT or TIMESTAMP literal's value into the generated Java code, so every
 * micro-batch's new bounds made new classes to compile; a literal of a wider type compared with a BIGINT column
 * is narrowed back into one (UnwrapCastInBinaryComparison). A UDF is neither folded (it is not foldable) nor
 * written into the code: the code holds a reference to this object, whose value it calls for
 * ({@link #column}, called from Python: kct.aggregation.stream.time_bound).
 */
public final class Bound implements UDF0<Long> {
  private static final long serialVersionUID = 1L;
  private final long value;

  public Bound(long value) {
    this.value = value;
  }

  @Override
  public Long call() {
    return value;
  }

  /** The column of {@code value}: BIGINT, not null (the Java UDF0 overload, with its input types: none). */
  public static Column column(long value) {
    return functions.udf(new Bound(value), DataTypes.LongType).asNonNullable().apply();
  }
}
