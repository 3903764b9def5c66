"""A micro-batch's time bounds as columns whose value the generated code does not hold.

The stream (kct.aggregation.stream's `advance_records`, kct.aggregation.client_windows' `points_before`) and
the stream's alerts (kct.aggregation.stream_alerts) compare times with bounds that
change every micro-batch; they take them from here, which depends on none of them.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column
from pyspark.sql.classic.column import Column as ClassicColumn

__all__ = ["time_bound"]


def time_bound(spark: Any, value: int) -> Column:
    """A micro-batch's time bound (ns, or µs) to compare BIGINT times with, as a BIGINT column whose value the
    generated code does not hold (the decoder jar's `dev.kct.otlp.Bound`, a UDF without arguments).

    Spark writes a BIGINT or TIMESTAMP literal's value into the generated Java code (Literal.doGenCode), so
    each micro-batch's new bounds made new classes to compile (~15 per micro-batch, tenths of a second); a
    DECIMAL literal (handed to the code as a reference object) does not help, the optimizer narrows it back
    into a BIGINT one (UnwrapCastInBinaryComparison). A UDF is not folded and the code only references it:
    the code is the same every micro-batch and compiled once."""
    return ClassicColumn(spark.sparkContext._jvm.dev.kct.otlp.Bound.column(int(value)))
