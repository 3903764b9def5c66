"""Which records may hold a client's termination: a cheap filter over records, before any decoding.

Terminations (transforms.terminations) are a few points among millions; both modes decode only the records
this filter keeps (a superset: the points of what it keeps are filtered exactly by `terminations`), and
the stream counts them first to skip the work when there are none.
"""

from __future__ import annotations

from typing import Any, Final

from pyspark.sql import functions as F
from pyspark.sql.classic.column import Column as ClassicColumn

from kct.otlp import labels as L

__all__ = ["TERMINATING_HEADERS", "TERMINATING_METRIC", "may_terminate", "may_terminate_sql"]

# The terminating label's header names, lower-case (the broker's and the receiver's HTTP header's).
TERMINATING_HEADERS: Final = tuple(sorted({L.TERMINATING.name, L.TERMINATING.http_header}))
# A push holding the termination metric holds its name as these bytes (a protobuf string is its UTF-8).
TERMINATING_METRIC: Final = b"client.terminating"


def _terminating_header() -> Any:
    """Records whose broker labels say the client is terminating (any `terminating` header saying true: a
    superset of what the decoder reads, the last such header)."""
    flag = "', '".join(TERMINATING_HEADERS)
    return F.expr(f"exists(headers, h -> lower(h.key) IN ('{flag}') AND lower(CAST(h.value AS STRING)) = 'true')")


def may_terminate(spark: Any) -> Any:
    """Records that may hold a termination (`transforms.terminations`): a terminating header, or a metric
    named `...client.terminating`, whose name the push holds as plain UTF-8 bytes (a protobuf string). A
    superset: the points of the records it keeps are filtered exactly by `terminations`.

    With the decoder jar, the same filter in one Java call per record (`dev.kct.otlp.Terminating`): the SQL
    one evaluates `exists` with an interpreted lambda and searches each ~7 kB push from every byte on: ~110 ms
    of task CPU per 10,000 records, ~75 ms here (bench/spark_throughput.py); without the jar, the SQL. Both give
    the same records (tests/unit/aggregation/test_terminating_filter.py)."""
    try:
        column = spark.sparkContext._jvm.dev.kct.otlp.Terminating.column(
            F.col("headers")._jc, F.col("value")._jc, ",".join(TERMINATING_HEADERS))
    except TypeError:  # py4j's JavaPackage (no such class: no decoder jar) is not callable
        return may_terminate_sql()
    return ClassicColumn(column)


def may_terminate_sql() -> Any:
    """`may_terminate` in Spark SQL (without the decoder jar): null where a header's value is null and no
    other part says true, which a filter and `count_if` take as false."""
    return _terminating_header() | F.col("value").contains(F.lit(TERMINATING_METRIC))
