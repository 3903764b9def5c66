"""The demo's report: plain-text tables for the terminal and one self-contained HTML page.

Pure functions over plain data (rows read from the topic and from the aggregation job's Parquet
output): no Kafka, no Kubernetes, no Spark here. The plots are inline SVG drawn by hand, so the page
needs no network, no CDN script and no plotting library.
"""

from __future__ import annotations

import datetime as dt
import html
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CLIENT_HEADER",
    "KEY_METRICS",
    "WORKLOAD_HEADER",
    "Push",
    "Series",
    "client_aggregates",
    "client_rows",
    "format_table",
    "html_report",
    "metric_series",
    "svg_line_chart",
    "svg_push_timeline",
    "workload_of",
    "workload_rows",
]

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")


@dataclass(frozen=True)
class Push:
    """One record of the receiver's topic, i.e. one accepted PushTelemetry, from its headers."""

    received_ms: int
    client_instance_id: str
    client_id: str
    software_name: str
    software_version: str
    principal: str
    source: str
    data_points: int
    terminating: bool
    workload: str = ""   # `workload_of` the record's resource attributes: "" when the receiver attributed none
    pod: str = ""        # k8s.namespace.name/k8s.pod.name, "" likewise


# The owner attributes the receiver's attribution adds (OpenTelemetry semantic conventions), outermost first:
# a Deployment's pod also has k8s.replicaset.name, a CronJob's also k8s.job.name.
_OWNERS = (("k8s.deployment.name", "Deployment"), ("k8s.statefulset.name", "StatefulSet"),
           ("k8s.daemonset.name", "DaemonSet"), ("k8s.cronjob.name", "CronJob"), ("k8s.job.name", "Job"),
           ("k8s.replicaset.name", "ReplicaSet"))


def workload_of(resource: Mapping[str, str]) -> str:
    """`Deployment shop/orders` from a push's resource attributes; `Pod ns/name` for a pod without an owner; ""
    when the push was not attributed (a client outside the cluster, behind SNAT, or on a hostNetwork pod)."""
    namespace = resource.get("k8s.namespace.name", "")
    for key, kind in _OWNERS:
        if resource.get(key):
            return f"{kind} {namespace}/{resource[key]}"
    pod = resource.get("k8s.pod.name")
    return f"Pod {namespace}/{pod}" if pod else ""


WORKLOAD_HEADER = ("workload", "pods", "software", "client ids", "pushes")


def workload_rows(pushes: Iterable[Push]) -> list[tuple[str, int, str, str, int]]:
    """One row per workload: (workload, pods, software names, client ids, pushes); unattributed pushes last,
    as `- (not attributed: outside the cluster)`."""
    groups: dict[str, list[Push]] = defaultdict(list)
    for push in pushes:
        groups[push.workload].append(push)
    rows = []
    for workload, group in sorted(groups.items(), key=lambda kv: (kv[0] == "", kv[0])):
        ids = sorted({p.client_id for p in group})
        rows.append((workload or "- (not attributed: outside the cluster)", len({p.pod for p in group if p.pod}),
                     ", ".join(sorted({p.software_name for p in group})),
                     ", ".join(ids) if len(ids) <= 3 else f"{len(ids)} client ids", len(group)))
    return rows


CLIENT_HEADER = ("workload", "pod", "client id", "software", "source", "pushes", "points", "terminated", "instance")


def client_rows(pushes: Iterable[Push]) -> list[tuple[str, str, str, str, str, int, int, str, str]]:
    """One row per client instance (CLIENT_HEADER), attributed workloads first, then by client id; the instance
    id shortened to 8 characters (the workload and pod say who it is)."""
    by_instance: dict[str, list[Push]] = defaultdict(list)
    for push in pushes:
        by_instance[push.client_instance_id].append(push)
    rows = []
    for iid, group in sorted(by_instance.items(),
                             key=lambda kv: (kv[1][-1].workload == "", kv[1][-1].workload, kv[1][0].client_id)):
        last = group[-1]
        rows.append((last.workload, last.pod.rpartition("/")[2], last.client_id,
                     f"{last.software_name} {last.software_version}", last.source, len(group),
                     sum(p.data_points for p in group), "yes" if any(p.terminating for p in group) else "no", iid[:8]))
    return rows


@dataclass
class Series:
    """One line of a chart: (epoch seconds, value) points."""

    label: str
    points: list[tuple[float, float]] = field(default_factory=list)


def format_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A kubectl-like table: upper-case header, columns padded to their widest cell, three spaces apart."""
    cells = [[str(h).upper() for h in header]] + [["-" if c is None or c == "" else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


# The columns of the per-client aggregates table: (title, metric suffix, how to combine windows).
# librdkafka pushes gauges (avg/max over its own interval) and sums, no histograms, so latency
# "max" is the worst value seen in any window and "avg" the mean of the windows' averages.
KEY_METRICS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("req lat avg", ("producer.request.latency.avg", "consumer.node.request.latency.avg"), "avg"),
    ("req lat max", ("producer.request.latency.max", "consumer.node.request.latency.max"), "max"),
    ("queue avg", ("producer.record.queue.time.avg",), "avg"),
    ("queue max", ("producer.record.queue.time.max",), "max"),
    ("fetch lat avg", ("consumer.fetch.manager.fetch.latency.avg",), "avg"),
)


def _matches(metric: str, suffixes: tuple[str, ...]) -> bool:
    return any(metric == "org.apache.kafka." + s for s in suffixes)


def _fmt(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    if value == int(value) and abs(value) < 1e6:
        return str(int(value))
    return f"{value:.2f}" if abs(value) < 100 else f"{value:.0f}"


def client_aggregates(rows: Sequence[Mapping[str, Any]], client_ids: Sequence[str]) -> dict[str, dict[str, str]]:
    """Per client id: windows, data points, metrics and the KEY_METRICS columns, from client_metrics rows."""
    by_client: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        by_client[str(row["client_id"])].append(row)
    result: dict[str, dict[str, str]] = {}
    for client_id in client_ids:
        mine = by_client.get(client_id, [])
        out = {
            "windows": str(len({r["window_start"] for r in mine})),
            "points": str(sum(int(r["points"] or 0) for r in mine)),
            "metrics": str(len({r["metric"] for r in mine})),
        }
        for title, suffixes, how in KEY_METRICS:
            picked = [r for r in mine if _matches(str(r["metric"]), suffixes)]
            value: float | None = None
            if how == "avg":
                values = [float(r["value_avg"]) for r in picked if r["value_avg"] is not None]
                value = sum(values) / len(values) if values else None
            elif how == "max":
                values = [float(r["value_max"]) for r in picked if r["value_max"] is not None]
                value = max(values) if values else None
            else:
                values = [float(r["delta"]) for r in picked if r["delta"] is not None and not math.isnan(r["delta"])]
                value = sum(values) if values else None
            out[title] = _fmt(value)
        result[client_id] = out
    return result


def metric_series(rows: Sequence[Mapping[str, Any]], suffixes: tuple[str, ...], field_name: str = "value_avg",
                  client_ids: Sequence[str] | None = None) -> list[Series]:
    """One series per client id: the metric's `field_name` per window (mean over its attribute sets)."""
    acc: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        if not _matches(str(row["metric"]), suffixes) or row[field_name] is None:
            continue
        if client_ids is not None and row["client_id"] not in client_ids:
            continue
        start = row["window_start"]
        t = start.replace(tzinfo=dt.UTC).timestamp() if isinstance(start, dt.datetime) else float(start)
        acc[str(row["client_id"])][t].append(float(row[field_name]))
    return [Series(cid, [(t, sum(v) / len(v)) for t, v in sorted(acc[cid].items())]) for cid in sorted(acc)]


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        candidate = step * 10**exponent
        if candidate >= value:
            return float(candidate)
    return float(10 ** (exponent + 1))


def svg_line_chart(title: str, series: Sequence[Series], *, y_label: str = "", marker_at: float | None = None,
                   marker_label: str = "", x_range: tuple[float, float] | None = None, width: int = 760,
                   height: int = 260) -> str:
    """A line chart as an inline <svg>: time on x (UTC clock), values on y, one coloured line per series."""
    left, right, top, bottom = 60, 200, 30, 36
    plot_w, plot_h = width - left - right, height - top - bottom
    points = [pt for s in series for pt in s.points]
    esc = html.escape
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title)}">',
             f'<text x="{left}" y="18" font-size="14" font-weight="bold">{esc(title)}</text>']
    if not points:
        parts.append(f'<text x="{left}" y="{top + plot_h / 2}" font-size="12">no data</text></svg>')
        return "".join(parts)
    t0, t1 = x_range or (min(t for t, _ in points), max(t for t, _ in points))
    t1 = max(t1, t0 + 1)
    y_max = _nice_max(max(v for _, v in points))

    def x(t: float) -> float:
        return left + (t - t0) / (t1 - t0) * plot_w

    def y(v: float) -> float:
        return top + plot_h - v / y_max * plot_h

    parts.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fafafa" stroke="#ccc"/>')
    for i in range(5):
        v = y_max * i / 4
        parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#e5e5e5"/>'
                     f'<text x="{left - 6}" y="{y(v) + 4:.1f}" font-size="10" text-anchor="end">{_fmt(v)}</text>')
    for i in range(6):
        t = t0 + (t1 - t0) * i / 5
        label = dt.datetime.fromtimestamp(t, dt.UTC).strftime("%H:%M:%S")
        parts.append(f'<text x="{x(t):.1f}" y="{top + plot_h + 14}" font-size="10" text-anchor="middle">'
                     f"{label}</text>")
    if y_label:
        parts.append(f'<text x="14" y="{top + plot_h / 2}" font-size="10" text-anchor="middle" '
                     f'transform="rotate(-90 14 {top + plot_h / 2})">{esc(y_label)}</text>')
    if marker_at is not None:
        parts.append(_marker(x(marker_at), top, plot_h, left + plot_w, marker_label))
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in s.points)
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{path}"/>')
        parts.extend(f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="2.5" fill="{color}"/>' for t, v in s.points)
        ly = top + 14 + i * 16
        parts.append(f'<rect x="{left + plot_w + 12}" y="{ly - 9}" width="10" height="10" fill="{color}"/>'
                     f'<text x="{left + plot_w + 26}" y="{ly}" font-size="11">{esc(s.label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _marker(mx: float, top: float, plot_h: float, right_edge: float, label: str) -> str:
    """A dashed vertical line at x = mx, labelled on whichever side has room."""
    anchor, tx = ("end", mx - 4) if mx > right_edge - 150 else ("start", mx + 4)
    return (f'<line x1="{mx:.1f}" x2="{mx:.1f}" y1="{top}" y2="{top + plot_h}" stroke="#555" stroke-dasharray="4 3"/>'
            f'<text x="{tx:.1f}" y="{top + 12}" font-size="10" text-anchor="{anchor}">{html.escape(label)}</text>')


def svg_push_timeline(title: str, pushes: Sequence[Push], *, marker_at: float | None = None, marker_label: str = "",
                      x_range: tuple[float, float] | None = None, width: int = 760) -> str:
    """One row per client id, one tick per stored push (a ring for the terminating push)."""
    client_ids = sorted({p.client_id for p in pushes})
    left, right, top, row_h = 215, 30, 30, 26
    plot_w, plot_h = width - left - right, max(1, len(client_ids)) * row_h
    height = top + plot_h + 30
    esc = html.escape
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title)}">',
             f'<text x="10" y="18" font-size="14" font-weight="bold">{esc(title)}</text>']
    if not pushes:
        parts.append(f'<text x="{left}" y="{top + 14}" font-size="12">no pushes</text></svg>')
        return "".join(parts)
    t0, t1 = x_range or (min(p.received_ms for p in pushes) / 1000, max(p.received_ms for p in pushes) / 1000)
    t1 = max(t1, t0 + 1)

    def x(t: float) -> float:
        return left + (t - t0) / (t1 - t0) * plot_w

    parts.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fafafa" stroke="#ccc"/>')
    for i in range(6):
        t = t0 + (t1 - t0) * i / 5
        label = dt.datetime.fromtimestamp(t, dt.UTC).strftime("%H:%M:%S")
        parts.append(f'<text x="{x(t):.1f}" y="{top + plot_h + 14}" font-size="10" text-anchor="middle">'
                     f"{label}</text>")
    for row, cid in enumerate(client_ids):
        color = PALETTE[row % len(PALETTE)]
        cy = top + row * row_h + row_h / 2
        mine = [p for p in pushes if p.client_id == cid]
        parts.append(f'<text x="{left - 8}" y="{cy + 4:.1f}" font-size="11" text-anchor="end">{esc(cid)} '
                     f"({len(mine)})</text>")
        for p in mine:
            px = x(p.received_ms / 1000)
            if p.terminating:
                parts.append(f'<circle cx="{px:.1f}" cy="{cy:.1f}" r="5" fill="none" stroke="{color}" '
                             'stroke-width="2"><title>terminating push</title></circle>')
            else:
                parts.append(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{cy - 8:.1f}" y2="{cy + 8:.1f}" '
                             f'stroke="{color}" stroke-width="3"/>')
    if marker_at is not None:
        parts.append(_marker(x(marker_at), top, plot_h, left + plot_w, marker_label))
    parts.append("</svg>")
    return "".join(parts)


def _html_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape('-' if c is None or c == '' else str(c))}</td>" for c in r) + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_report(title: str, sections: Sequence[tuple[str, str, Sequence[str], Sequence[Sequence[object]]]],
                charts: Sequence[str], footer: str) -> str:
    """The whole page: `sections` are (heading, intro, header, rows) tables, `charts` inline SVGs."""
    style = (
        "body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}"
        "table{border-collapse:collapse;margin:8px 0 20px;font-size:13px}"
        "th,td{border:1px solid #ddd;padding:4px 8px;text-align:left}th{background:#f0f0f0}"
        "h2{margin-top:28px;font-size:18px}.chart{margin:10px 0}p.note{color:#555;font-size:13px}"
    )
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>"]
    for heading, intro, header, rows in sections:
        parts.append(f"<h2>{html.escape(heading)}</h2>")
        if intro:
            parts.append(f"<p class='note'>{html.escape(intro)}</p>")
        parts.append(_html_table(header, rows))
    parts.append("<h2>Metrics over time</h2>")
    parts.extend(f"<div class='chart'>{svg}</div>" for svg in charts)
    parts.append(f"<p class='note'>{html.escape(footer)}</p></body></html>")
    return "".join(parts)
