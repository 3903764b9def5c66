"""The filter of records that may hold a termination (`terminating.may_terminate`): the decoder jar's Java
filter (`dev.kct.otlp.Terminating`) keeps the same records as the oracle's Spark SQL filter
(tests/aggregation_oracle/sql_engine.py). Header names and flags in every case, the metric name anywhere in
the push (at its start, at its end, cut short, after a near miss), nulls, and random pushes with names
planted in them."""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

import pytest
from aggregation_oracle.sql_engine import may_terminate_sql

from kct.aggregation.decode import RAW_SCHEMA_DDL
from kct.aggregation.synthetic import build_request
from kct.aggregation.terminating import may_terminate
from kct.otlp import labels as L

pytestmark = pytest.mark.spark

NAME = b"client.terminating"
T0 = 1_700_000_040 * 1_000_000_000


@pytest.fixture(scope="module")
def jvm(jvm_decoder: Any) -> Any:
    """The session with the decoder jar, which holds Terminating (conftest.py)."""
    return jvm_decoder


def _push(name: str) -> bytes:
    return build_request({"service.name": "orders"}, [
        {"name": name, "type": "gauge", "points": [{"time": T0, "value": 1.0, "attributes": {"topic": "a"}}]}])


def _cases() -> list[tuple[bytes | None, list[tuple[str, bytes | None]] | None]]:
    """(value, headers) of records, some that may hold a termination, most that may not."""
    plain = _push("org.apache.kafka.producer.record.queue.time.avg")
    flags = [b"true", b"TRUE", b"True", b"false", b"", b"true ", b"yes", None, "tru\u00e9".encode()]
    names = [L.TERMINATING.name, L.TERMINATING.http_header, L.TERMINATING.name.upper(),
             L.TERMINATING.http_header.title(), "terminating2", "x-terminating", "\u0130terminating",
             L.CLIENT_ID.name]
    out: list[tuple[bytes | None, list[tuple[str, bytes | None]] | None]] = []
    for name in names:
        for flag in flags:
            out.append((plain, [(L.CLIENT_ID.name, b"c"), (name, flag)]))
    out.append((plain, [(L.TERMINATING.name, b"false"), (L.TERMINATING.http_header, b"true")]))
    out.append((plain, None))
    out.append((plain, []))
    out.append((None, [(L.TERMINATING.name, b"true")]))
    out.append((None, None))
    for value in (
        _push("org.apache.kafka.client.terminating"),   # the name in a protobuf string
        _push("org.apache.kafka.client.terminatin"),    # cut short
        _push("client.terminatingclient.terminating"),
        _push("client.terminatinclient.terminating"),   # a near miss right before it
        _push("client.terminatin"),
        _push("client-terminating"),
        NAME,                                           # the whole value
        NAME[:-1],
        b"x" + NAME,                                    # at the very end
        NAME + b"x",                                    # at the very start
        b"g" * 17 + NAME[1:],                           # its last byte lands where a skip could jump over it
        b"",
        bytes(range(256)) * 30,
    ):
        out.append((value, None))
    rng = random.Random(5)
    for _ in range(300):  # random bytes, with the name or a piece of it at a random place
        body = bytearray(rng.randbytes(rng.randint(0, 400)))
        piece = NAME[rng.randint(0, 9):rng.randint(10, len(NAME))] if rng.random() < 0.7 else NAME
        at = rng.randint(0, len(body))
        body[at:at] = piece
        out.append((bytes(body), None))
    return out


def _records(spark: Any) -> Any:
    ts = dt.datetime(2023, 11, 14, tzinfo=dt.UTC)
    rows = [(b"k", value, "client-telemetry", 0, i, ts, headers) for i, (value, headers) in enumerate(_cases())]
    return spark.createDataFrame(rows, RAW_SCHEMA_DDL)


def test_the_jvm_filter_keeps_the_records_the_sql_filter_keeps(jvm: Any) -> None:
    from pyspark.sql import functions as F

    records = _records(jvm)
    sql = F.coalesce(may_terminate_sql(), F.lit(False))
    both = records.select("offset", may_terminate(jvm).alias("jvm"), sql.alias("sql"))
    rows = sorted(both.collect())
    disagree = [(r["offset"], r["jvm"], r["sql"]) for r in rows if r["jvm"] != r["sql"]]
    assert not disagree
    kept = sum(1 for r in rows if r["jvm"])
    # Not vacuous: both kinds are there, by headers and by the name in the push.
    assert 0 < kept < len(rows)
    cases = _cases()
    assert any(r["jvm"] and cases[r["offset"]][0] is None for r in rows)  # a header alone
    assert any(r["jvm"] and not cases[r["offset"]][1] for r in rows)  # the name alone


def test_the_job_filters_on_the_jvm(jvm: Any) -> None:
    """`may_terminate` is the Java filter (its plan calls Terminating), not the SQL one (whose plan has the
    `exists` lambda)."""
    plan = _records(jvm).where(may_terminate(jvm))._jdf.queryExecution().analyzed().toString()
    assert "Terminating" in plan or "UDF" in plan
    assert "exists(" not in plan.lower() and "lambda" not in plan.lower()
    counted = _records(jvm).where(may_terminate(jvm)).count()
    assert counted > 0
