"""The demo's view of the node stack's Prometheus: where the aggregation exports to, one PromQL result for the
summary, and a few of the shipped dashboards' panels drawn from `query_range` for the HTML report.

The panels are read from helm/kct/dashboards/*.json (what users import into Grafana), their variables set to
All (`.*`) and `$__rate_interval` to a minute, so the report shows what the dashboards would. Standard library
only, over Prometheus's HTTP API; nothing here knows Kubernetes or Kafka.
"""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from report import Series

__all__ = ["PANELS", "SUMMARY_PANEL", "export_spec", "panel_series", "panels", "query", "summary_lines"]

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS = REPO / "helm" / "kct" / "dashboards"
SERVICE_NAME: Final = "kct-aggregation"  # the export's service.name: Prometheus's `job` of the clients' series
# (dashboard uid, panel title): what the report draws, one chart per target.
PANELS: Final = (
    ("kct-clients", "Record queue time"),
    ("kct-clients", "Request latency (max)"),
    ("kct-pipeline", "Pushes stored"),
)
SUMMARY_PANEL: Final = ("kct-fleet", "Clients by software and version")
RATE_INTERVAL: Final = "1m"


def export_spec(pod_url: str) -> dict[str, Any]:
    """`spec.aggregation.export` to the node stack's Prometheus (its OTLP receiver), as pods reach it."""
    return {"endpoint": f"{pod_url.rstrip('/')}/api/v1/otlp/v1/metrics",
            "resourceAttributes": {"service.name": SERVICE_NAME}}


def panels() -> dict[tuple[str, str], list[str]]:
    """Every panel's queries by (dashboard uid, title), variables at All and `$__rate_interval` a minute."""
    found: dict[tuple[str, str], list[str]] = {}

    def walk(uid: str, items: Sequence[dict[str, Any]]) -> None:
        for panel in items:
            walk(uid, panel.get("panels") or [])
            for target in panel.get("targets") or []:
                found.setdefault((uid, panel["title"]), []).append(_all(target["expr"]))

    for path in sorted(DASHBOARDS.glob("*.json")):
        dashboard = json.loads(path.read_text())
        walk(dashboard["uid"], dashboard["panels"])
    return found


def _all(expr: str) -> str:
    expr = expr.replace("$__rate_interval", RATE_INTERVAL)
    return re.sub(r"\$\{?(\w+)\}?", ".*", expr)


def _api(url: str, path: str, **params: str) -> Any:
    query_string = urllib.parse.urlencode(params)
    with urllib.request.urlopen(f"{url.rstrip('/')}/api/v1/{path}?{query_string}", timeout=20) as response:
        body = json.load(response)
    if body.get("status") != "success":
        raise RuntimeError(f"Prometheus {path}: {body}")
    return body["data"]


def query(url: str, promql: str) -> list[dict[str, Any]]:
    """An instant query's result vector."""
    result: list[dict[str, Any]] = _api(url, "query", query=promql)["result"]
    return result


def summary_lines(url: str) -> list[str]:
    """The fleet dashboard's "clients by software and version" as the summary prints it: the query, then one
    line per software and version."""
    (promql,) = panels()[SUMMARY_PANEL]
    lines = [f"PromQL ({SUMMARY_PANEL[1]}, dashboard {SUMMARY_PANEL[0]}): {promql}"]
    result = sorted(query(url, promql), key=lambda s: (s["metric"].get("client_software_name", ""),
                                                       s["metric"].get("client_software_version", "")))
    for sample in result:
        labels = sample["metric"]
        lines.append(f"    {labels.get('client_software_name', '?')} {labels.get('client_software_version', '?')}: "
                     f"{float(sample['value'][1]):g} client(s)")
    if not result:
        lines.append("    no series: the aggregation's export has not reached Prometheus")
    return lines


def panel_series(url: str, promql: str, start: float, end: float, step: float = 10.0) -> list[Series]:
    """A `query_range` result as chart series, labelled by the labels the query kept (its `by` clause)."""
    data = _api(url, "query_range", query=promql, start=f"{start:.3f}", end=f"{end:.3f}", step=f"{step:g}")
    series = []
    for item in data["result"]:
        label = ",".join(f"{v}" for _, v in sorted(item["metric"].items())) or promql[:40]
        points = [(float(t), float(v)) for t, v in item["values"] if v not in ("NaN", "+Inf", "-Inf")]
        series.append(Series(label, points))
    return series
