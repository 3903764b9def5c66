"""The oracle the aggregation job is checked against: a second engine, in Python and Spark SQL.

The job (kct.aggregation) has one engine per path, all on the JVM, in the decoder jar: the OTLP decoder
(`decode.jvm_points`), client_metrics per client instance (`client_windows`, ClientWindows), the roll-ups
(`rollups_jvm`), the stream over records (`stream.advance_records`) and the filter of records that may hold
a termination (`terminating.may_terminate`). This package computes the same rows another way, sharing only
the tables' columns and schemas with the job:

    python_decoder  records -> data points in Python over Arrow batches (mapInArrow, the protobuf runtime)
    sql_engine      points -> client_metrics and roll-ups in Spark SQL (window functions, grouping sets),
                    and the termination filter in Spark SQL
    sql_stream      the stream over decoded points (`advance`): pending points instead of pending records

The tests compare the job's rows with these, bit for bit where the arithmetic is the same
(tests/unit/aggregation: test_jvm_decoder, test_client_windows, test_client_windows_stream, test_rollups_jvm,
test_terminating_filter), and the oracle itself with hand-made expectations and a plain Python recomputation
(test_aggregation_transforms, test_aggregation_stream, test_aggregation_recompute). It was the job's own
fallback engine until the JVM one, which takes several times less CPU for the same rows (bench/
client_windows_ab.py measures both), became the only one.

Product code never imports it; bench/client_windows_ab.py does (it puts tests/ on sys.path), to measure the
two engines side by side.
"""
