"""What the OTLP export costs per window, and how many series it makes per 1,000 clients with the default labels.

    .venv/bin/python bench/otlp_export_cost.py [--clients 4,1000] [--partitions 4] [--rounds 3] [--no-prometheus]

For each fleet size, one window of pushes (6 per client, 10 s apart; kct.aggregation.synthetic's producers,
`--partitions` per-partition series each) is aggregated by the job's engine (ClientWindows, local Spark) into
client_metrics rows, and the export of that window is timed, `--rounds` times, best kept:

  collect   the window's rows (otlp_metrics.EXPORT_COLUMNS) to the driver through Arrow, as outputs.send_to_otlp
  build     rows -> points (labels, merging, cap) -> serialized requests
  send      the requests to a throwaway Prometheus's OTLP receiver (dev/stack/prometheus.py; skipped with
            --no-prometheus), the whole WindowExporter.export_rows

and the series (points) of the window, per client and per 1,000 clients, and the request bytes. The demo runs
4 clients (dev/demo/clients.py).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "dev" / "stack"))

S = 1_000_000_000


def records(spark: Any, clients: int, partitions: int) -> Any:
    from kct.aggregation.decode import RAW_SCHEMA_DDL
    from kct.aggregation.synthetic import SyntheticClient

    begin = (time.time_ns() // (60 * S) - 2) * 60 * S
    fleet = [SyntheticClient(f"p-{i}", started_ns=begin - 3 * S, seed=i + 1, partitions=partitions)
             for i in range(clients)]
    rows: list[tuple[Any, ...]] = []
    for k in range(6):
        for c in fleet:
            record = c.push(begin + k * 10 * S + S)
            rows.append((record.key, record.value, "t", 0, len(rows), None, record.headers))
    return spark.createDataFrame(rows, RAW_SCHEMA_DDL)


@contextlib.contextmanager
def endpoint(use_prometheus: bool) -> Iterator[str | None]:
    if not use_prometheus:
        yield None
        return
    import prometheus

    with prometheus.started() as server:
        yield server.otlp_metrics_url


def best(rounds: int, run: Any) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(rounds):
        started = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - started)
    return min(times), result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="4,1000")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-prometheus", action="store_true")
    args = parser.parse_args()

    from kct.aggregation.client_windows import client_metrics_from_records
    from kct.aggregation.config import OtlpExportConfig, parse_job_config
    from kct.aggregation.otlp_export import WindowExporter
    from kct.aggregation.otlp_metrics import EXPORT_COLUMNS, requests_for, window_points
    from kct.aggregation.session import build_session, register_jvm_decoder

    cfg = parse_job_config({"source": {"bootstrapServers": "unused:9092"}, "parquet": {"path": "unused"},
                            "spark": {"master": "local[2]", "shufflePartitions": 2,
                                      "conf": {"spark.ui.enabled": "false"}}})
    spark = build_session(cfg)
    spark.sparkContext.setLogLevel("ERROR")
    if not register_jvm_decoder(spark):
        print("the OTLP decoder jar is not built: python dev/spark-deps/install.py --decoder-only", file=sys.stderr)
        return 2
    with endpoint(not args.no_prometheus) as url:
        export = OtlpExportConfig(endpoint=url or "http://127.0.0.1:9/v1/metrics")
        print(f"default labels: {', '.join(export.labels)}; {args.partitions} partitions per producer")
        for clients in (int(c) for c in args.clients.split(",")):
            metrics = client_metrics_from_records(records(spark, clients, args.partitions)).persist()
            windows = metrics.select("window_start").distinct().count()
            collect_s, rows = best(args.rounds, lambda m=metrics: m.select(*EXPORT_COLUMNS).toArrow().to_pylist())

            def build(rows: list[dict[str, Any]] = rows) -> tuple[int, int]:
                points = bytes_ = 0
                for window in window_points(rows, export):
                    points += len(window.points)
                    bytes_ += sum(len(r.SerializeToString()) for r in requests_for(window, export.resource_attributes))
                return points, bytes_

            build_s, (series, size) = best(args.rounds, build)
            line = (f"{clients:>6} clients, {windows} window(s): {len(rows):>7} rows, {series:>7} series "
                    f"({series / clients:.1f}/client, {series * 1000 / clients:,.0f} per 1,000 clients), "
                    f"{size / 1e6:.2f} MB; collect {collect_s * 1e3:.0f} ms, build {build_s * 1e3:.0f} ms")
            if url is not None:
                send_s, status = best(args.rounds, lambda rows=rows: WindowExporter(export).export_rows(rows))
                assert status.windows_failed == 0, status
                line += f", build+send {send_s * 1e3:.0f} ms"
            print(line, flush=True)
            metrics.unpersist()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
