#!/usr/bin/env python3
"""`make bench`: run every benchmark script (quick settings by default) and print one table of figures.

    .venv/bin/python bench/run_all.py [--full] [--only receiver,operator,spark,plugin]

The scripts stay the source of the figures and keep their own defaults; this runner gives each shorter
settings (unless --full), runs them one after the other (the machine is small: running them together
would measure the contention), keeps each one's whole output in build/bench/<name>.log, reads the
figures from that output, and prints them as one table (also written to build/bench/results.json).
A run of every benchmark also writes docs/benchmarks/results.md, the project's one current results file,
with the date, the machine (cores, CPU model, load) and the commit measured: a figure in the docs says
when and where it was measured. A run with --only writes build/bench/results.md instead, so a partial
run never replaces the other benchmarks' figures.
The local stack is started first (`dev/stack/stack.py up`); the plugin benchmark runs its own broker.
A benchmark that fails shows its exit code in the table (and its log's path when it printed no figures);
then the exit code is 1.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "build" / "bench"
RESULTS_MD = REPO / "docs" / "benchmarks" / "results.md"
PY = str(REPO / ".venv" / "bin" / "python")

Figure = tuple[str, str]  # (what, value)


@dataclass(frozen=True)
class Bench:
    name: str
    script: str
    quick: tuple[str, ...]
    full: tuple[str, ...]
    settings: str
    parse: Callable[[str], list[Figure]]
    timeout: float


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _fmt(value: float, unit: str = "") -> str:
    shown = f"{value:,.0f}" if value >= 100 else f"{value:.3g}" if value < 10 else f"{value:.1f}"
    return f"{shown} {unit}".rstrip()


def parse_receiver(output: str) -> list[Figure]:
    lines = [line for line in output.splitlines() if line.startswith("{")]
    if not lines:
        return []
    fig = json.loads(lines[-1])
    points = 100.0
    match = re.search(r"(\d+) data points", output)
    if match:
        points = float(match.group(1))
    per_core = float(fig["pushes_per_core_s"])
    return [
        ("pushes/s (HTTP in -> Kafka acked)", _fmt(float(fig["pushes_per_s"]))),
        ("pushes/s per receiver core", _fmt(per_core)),
        ("data points/s per receiver core", _fmt(per_core * points)),
        ("push latency p50 / p99", f"{fig['p50_ms']:.1f} / {fig['p99_ms']:.1f} ms"),
        ("receiver RSS (peak)", f"{fig['rss_peak_mb']:.0f} MB"),
    ]


def parse_versus(output: str) -> list[Figure]:
    lines = [line for line in output.splitlines() if line.startswith("{")]
    if not lines:
        return []
    summary = json.loads(lines[-1])
    figures: list[Figure] = []
    for scenario, fig in summary.items():
        if scenario == "records":
            continue
        figures.append((f"{scenario}: pushes/CPU-s kct / Collector (ratio)",
                        f"{_fmt(fig['kct_per_cpu_s'])} / {_fmt(fig['otelcol_per_cpu_s'])} ({fig['ratio']:.2f}x)"))
        if "fixed rate" in scenario:
            figures.append((f"{scenario}: p50 kct / Collector",
                            f"{fig['kct_p50_ms']:.1f} / {fig['otelcol_p50_ms']:.1f} ms"))
        figures.append((f"{scenario}: p99 kct / Collector (ratio)",
                        f"{fig['kct_p99_ms']:.1f} / {fig['otelcol_p99_ms']:.1f} ms ({fig.get('p99_ratio', 0.0):.2f}x)"))
        figures.append((f"{scenario}: peak RSS kct / Collector",
                        f"{fig['kct_rss_peak_mb']:.0f} / {fig['otelcol_rss_peak_mb']:.0f} MB"))
    records = summary.get("records", {})
    if records:
        figures.append(("records in the topics == 200s answered (kct, Collector)",
                        ", ".join(str(records["answered"][n] == records["stored"][n]) for n in ("kct", "otelcol"))))
    return figures


def parse_operator(output: str) -> list[Figure]:
    figures: list[Figure] = []
    match = re.search(r"over (\d+) sequential applies: p50 ([\d.]+) s, p99 ([\d.]+) s", output)
    if match:
        figures.append((f"kubectl apply -> config on broker p50 / p99 ({match.group(1)} applies)",
                        f"{_num(match.group(2)):.2f} / {_num(match.group(3)):.2f} s"))
    match = re.search(r"(\d+) resources in one kubectl apply .*?all on the broker after ([\d.]+) s, "
                      r"all Ready after ([\d.]+) s", output)
    if match:
        figures.append((f"{match.group(1)} resources: all on broker / all Ready",
                        f"{_num(match.group(2)):.1f} / {_num(match.group(3)):.1f} s"))
    match = re.search(r"operator RSS after convergence: (\d+) MiB", output)
    if match:
        figures.append(("operator RSS after convergence", f"{match.group(1)} MiB"))
    return figures


def parse_spark(output: str) -> list[Figure]:
    pattern = (r"^\s+(demo|read|decode|aggregate|batch|stream|bare)\s+[\d.]+ s\s+([\d,]+) records/s\s+"
               r"([\d,]+) points/s")
    rows = {m.group(1): (_num(m.group(2)), _num(m.group(3))) for m in re.finditer(pattern, output, re.MULTILINE)}
    labels = {
        "stream": "end to end, Structured Streaming (topic -> Parquet)",
        "batch": "end to end, batch job (topic -> Parquet, roll-ups, alerts)",
        "bare": "bare Spark groupBy(window, series) over Parquet points",
        "decode": "decode step (OTLP -> data points, in Spark)",
        "aggregate": "aggregate step (Spark SQL windows)",
    }
    figures = [(f"points/s, {labels[k]}", _fmt(rows[k][1])) for k in ("stream", "batch", "bare", "decode", "aggregate")
               if k in rows]
    for which in ("batch", "stream"):
        match = re.search(rf"ratio\s+{which} / bare = ([\d.]+)", output)
        if match:
            figures.append((f"ratio {which} / bare (same run)", match.group(1)))
    match = re.search(r"ratio\s+batch / bare, each the first run[^=]*= ([\d.]+)", output)
    if match:
        figures.append(("ratio batch / bare, each the first run in a fresh JVM", match.group(1)))
    match = re.search(r"^\s+demo\s+([\d.]+) s", output, re.MULTILINE)
    if match:
        figures.append(("demo-sized run_batch after JVM start", f"{_num(match.group(1)):.1f} s"))
    source = re.search(r"kafka source: ([^,]+), decoder: (\S+)", output)
    if source and figures:
        figures.append(("Kafka source / OTLP decoder used", f"{source.group(1)} / {source.group(2)}"))
    return figures


def parse_plugin(output: str) -> list[Figure]:
    figures: list[Figure] = []
    for m in re.finditer(r"^(plugin, endpoint live|plugin, endpoint down|no plugin)\s+([\d.]+)\s+([\d.]+)\s+"
                         r"[\d.]+\s+[\d.]+\s+(\S+)", output, re.MULTILINE):
        forwarded = f", {m.group(4)} pushes/s forwarded" if m.group(4) != "-" else ""
        figures.append((f"produce latency p50 / p99, {m.group(1)}", f"{m.group(2)} / {m.group(3)} ms{forwarded}"))
    return figures


BENCHES: tuple[Bench, ...] = (
    Bench("receiver", "bench/receiver_throughput.py", ("--seconds", "10", "--json"), ("--json",),
          "~10 KB pushes of 100 points, 32 keep-alive connections, real Kafka sink", parse_receiver, 300),
    Bench("versus", "bench/receiver_vs_collector.py", ("--json",), ("--full", "--json"),
          "receiver vs OpenTelemetry Collector, same pushes, own broker, servers on one core, interleaved",
          parse_versus, 1200),
    Bench("operator", "bench/operator_apply_latency.py", ("--applies", "20", "--resources", "500"), (),
          "sequential applies, then 500 resources in one apply", parse_operator, 1500),
    Bench("spark", "bench/spark_throughput.py", ("--pushes", "2000", "--clients", "100"), (),
          "pushes of ~100 points, local[2]", parse_spark, 1500),
    Bench("plugin", "bench/plugin_produce_latency.py",
          ("--messages", "600", "--rounds", "2", "--warmup", "300", "--soak-seconds", "5"), (),
          "own broker; acks=all, one in flight; 20 clients pushing every 100 ms", parse_plugin, 900),
)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    stack_env = REPO / "build" / "stack.env"
    if stack_env.exists():
        for line in stack_env.read_text().splitlines():
            key, _, value = line.partition("=")
            if key:
                env.setdefault(key, value)
    return env


def run(bench: Bench, full: bool, env: dict[str, str]) -> tuple[list[Figure], float, str]:
    log = OUT / f"{bench.name}.log"
    argv = [PY, str(REPO / bench.script), *(bench.full if full else bench.quick)]
    started = time.monotonic()
    print(f"==> {bench.name}: {' '.join(argv[1:]).replace(str(REPO) + '/', '')}  (log {log.relative_to(REPO)})",
          flush=True)
    try:
        proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=bench.timeout,
                              check=False)
        output = proc.stdout + ("\n--- stderr ---\n" + proc.stderr if proc.stderr else "")
        code = proc.returncode
    except subprocess.TimeoutExpired as error:
        out = error.stdout.decode() if isinstance(error.stdout, bytes) else error.stdout or ""
        output, code = out + f"\n(timed out after {bench.timeout:.0f} s)", -1
    log.write_text(output)
    took = time.monotonic() - started
    # figures printed before a late failure (e.g. in the script's cleanup) still count, flagged in the status
    figures = bench.parse(output)
    status = "ok" if code == 0 and figures else f"exit {code}" + (", figures printed before it" if figures else "")
    print(f"    {status} in {took:.0f}s", flush=True)
    return figures, took, status


def table(rows: list[tuple[str, str, str]]) -> str:
    header = ("BENCHMARK", "FIGURE", "VALUE")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows])


def cpu_model(cpuinfo: str) -> str:
    """The CPU's model name from /proc/cpuinfo text (x86 `model name`, else ARM's `Hardware`/`CPU part`)."""
    for key in ("model name", "Hardware", "Processor", "CPU part"):
        match = re.search(rf"^{key}\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
        if match:
            return match.group(1).strip()
    return "unknown"


def machine() -> str:
    """Where the figures were measured: cores, CPU model, and the load average when the run started."""
    try:
        model = cpu_model(Path("/proc/cpuinfo").read_text())
    except OSError:
        model = "unknown"
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    return f"{os.cpu_count()} cores, {model}; load average {load} (1, 5, 15 min) when the run started"


def commit() -> str:
    """The commit measured, marked when the work tree had changes on top of it."""
    def git(*args: str) -> str:
        proc = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)
        return proc.stdout.strip() if proc.returncode == 0 else ""

    head = git("rev-parse", "--short=12", "HEAD") or "unknown"
    return head + (" with uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def results_markdown(rows: Sequence[tuple[str, str, str]], results: Mapping[str, Mapping[str, object]], *,
                     when: dt.datetime, where: str, code: str, full: bool, guide: str = "../benchmarks.md") -> str:
    """docs/benchmarks/results.md: the run's table with when, where and what was measured (`guide`: the
    link to docs/benchmarks.md from where the file is written)."""
    lines = [
        "<!-- Written by `make bench` (bench/run_all.py); do not edit: run it again. -->",
        "# Benchmark results",
        "",
        f"- measured: {when.strftime('%Y-%m-%d %H:%M')} UTC, `make bench`"
        + (" with `BENCH_ARGS=--full` (each script's own defaults)" if full else " (quick settings)"),
        f"- machine: {where}",
        f"- commit: `{code}`",
        "",
        f"What each benchmark measures and how to run it alone: [benchmarks.md]({guide}).",
        "",
        "| benchmark | figure | value |",
        "|---|---|---|",
        *(f"| {_cell(name)} | {_cell(what)} | {_cell(value)} |" for name, what, value in rows),
        "",
        "| benchmark | status | seconds | settings | arguments |",
        "|---|---|---|---|---|",
    ]
    for name, result in results.items():
        args = " ".join(str(a) for a in result["args"]) if isinstance(result["args"], list) else ""
        lines.append(f"| {_cell(name)} | {_cell(str(result['status']))} | {result['seconds']} | "
                     f"{_cell(str(result['settings']))} | {f'`{_cell(args)}`' if args else '-'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="each script's own default settings (slow)")
    parser.add_argument("--only", default="", help="comma-separated: " + ",".join(b.name for b in BENCHES))
    args = parser.parse_args(argv)
    wanted = {n.strip() for n in args.only.split(",") if n.strip()} or {b.name for b in BENCHES}
    unknown = wanted - {b.name for b in BENCHES}
    if unknown:
        parser.error(f"--only: unknown benchmark(s) {', '.join(sorted(unknown))}")
    OUT.mkdir(parents=True, exist_ok=True)
    started, where, code = dt.datetime.now(dt.UTC), machine(), commit()
    print("==> local stack (dev/stack/stack.py up)", flush=True)
    stack = subprocess.run([sys.executable, str(REPO / "dev" / "stack" / "stack.py"), "up"], capture_output=True,
                           text=True, check=False)
    if stack.returncode != 0:
        print(stack.stdout[-3000:] + stack.stderr[-3000:])
        return 1
    env = _env()
    rows: list[tuple[str, str, str]] = []
    results: dict[str, dict[str, object]] = {}
    failed = False
    for bench in BENCHES:
        if bench.name not in wanted:
            continue
        figures, took, status = run(bench, args.full, env)
        results[bench.name] = {"status": status, "seconds": round(took, 1), "settings": bench.settings,
                               "args": list(bench.full if args.full else bench.quick), "figures": dict(figures)}
        failed = failed or status != "ok"
        if not figures:
            rows.append((bench.name, f"{status}: see build/bench/{bench.name}.log", "-"))
        rows.extend((bench.name, what, value) for what, value in figures)
    (OUT / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    every = wanted == {b.name for b in BENCHES}
    results_md = RESULTS_MD if every else OUT / "results.md"
    results_md.parent.mkdir(parents=True, exist_ok=True)
    guide = os.path.relpath(REPO / "docs" / "benchmarks.md", results_md.parent)
    results_md.write_text(results_markdown(rows, results, when=started, where=where, code=code, full=args.full,
                                           guide=guide))
    print()
    print(f"Figures ({'full' if args.full else 'quick'} settings, {os.cpu_count()} cores shared with other work; "
          "details in build/bench/*.log, build/bench/results.json)")
    print(table(rows))
    print("Settings: " + "; ".join(f"{b.name}: {b.settings}" for b in BENCHES if b.name in wanted))
    print(f"Written to {results_md.relative_to(REPO)} ({code}; {where})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
