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

__all__ = ["TERMINATING_HEADERS", "TERMINATING_METRIC", "may_terminate"]

# The terminating label's header names, lower-case (the broker's and the receiver's HTTP header's).
TERMINATING_HEADERS: Final = tuple(sorted({L.TERMINATING.name, L.TERMINATING.http_header}))
# A push holding the termination metric holds its name as these bytes (a protobuf string is its UTF-8).
TERMINATING_METRIC: Final = b"client.terminating"


def may_terminate(spark: Any) -> Any:
    """Records that may hold a termination (`transforms.terminations`): a terminating header, or a metric
    named `...client.terminating`, whose name the push holds as plain UTF-8 bytes (a protobuf string). A
    superset: the points of the records it keeps are filtered exactly by `terminations`.

    One Java call per record (`dev.kct.otlp.Terminating`, in the decoder jar): the same filter in Spark SQL
    evaluates `exists` with an interpreted lambda and searches each ~7 kB push from every byte on: ~110 ms of
    task CPU per 10,000 records, ~75 ms here (bench/spark_throughput.py). That SQL filter is the tests' oracle
    (tests/aggregation_oracle/sql_engine.py; tests/unit/aggregation/test_terminating_filter.py): the same
    records. A terminating header is one whose lower-cased name is in TERMINATING_HEADERS and whose value says
    true (any such header: a superset of what the decoder reads, the last one)."""
    column = spark.sparkContext._jvm.dev.kct.otlp.Terminating.column(
        F.col("headers")._jc, F.col("value")._jc, ",".join(TERMINATING_HEADERS))
    return ClassicColumn(column)
