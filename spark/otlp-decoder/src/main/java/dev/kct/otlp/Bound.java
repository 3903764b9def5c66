package dev.kct.otlp;

import org.apache.spark.sql.api.java.UDF0;

/**
 * A BIGINT that changes every micro-batch (a stream's time bounds), as a column the generated code does not
 * change with. Spark writes a BIGINT or TIMESTAMP literal's value into the generated Java code, so every
 * micro-batch's new bounds made new classes to compile; a literal of a wider type compared with a BIGINT column
 * is narrowed back into one (UnwrapCastInBinaryComparison). A UDF is neither folded (it is not foldable) nor
 * written into the code: the code holds a reference to this object, whose value it calls for
 * ({@code functions.udf(new Bound(v), LongType)}, built from Python: kct.aggregation.stream.time_bound).
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
}
