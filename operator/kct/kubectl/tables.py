"""How `kubectl kct` prints: kubectl-like tables (upper-case headers, columns padded by three spaces, ages
like `12s` / `5m` / `3h`), or the rows as JSON / YAML for scripts."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from kct.api.matching import SubscriptionMatch
from kct.kubectl.gather import Subscription, matched_refs, workload
from kct.otlp.clients_doc import METRIC_COLUMNS, ClientEntry

__all__ = ["age", "clients_rows", "clients_table", "dump", "table", "top_rows", "top_table", "why_text"]


def age(now_ms: int, then_ms: int) -> str:
    seconds = max(0, (now_ms - then_ms) // 1000)
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=False)]
    lines = ["   ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
             for row in (headers, *rows)]
    return "\n".join(lines) + "\n"


def _pod(entry: Mapping[str, Any]) -> str:
    attributes = entry["attributes"]
    pod = attributes.get("k8s.pod.name", "")
    namespace = attributes.get("k8s.namespace.name")
    return f"{namespace}/{pod}" if pod and namespace else pod


def _software(labels: dict[str, str]) -> str:
    name, version = labels.get("client_software_name", ""), labels.get("client_software_version", "")
    return f"{name}/{version}" if name and version else name or version


def clients_rows(clients: Sequence[ClientEntry], subscriptions: Sequence[Subscription]) -> list[dict[str, Any]]:
    """The entries as printed by `-o json|yaml`: each with the subscriptions it matches and its workload."""
    return [{**entry, "workload": workload(entry), "subscriptions": matched_refs(entry, subscriptions)}
            for entry in clients]


def clients_table(rows: Sequence[dict[str, Any]], now_ms: int, *, wide: bool) -> str:
    headers = ["INSTANCE", "CLIENT ID", "SOFTWARE", "WORKLOAD", "POD", "LAST PUSH", "SUBSCRIPTIONS"]
    if wide:
        headers += ["PRINCIPAL", "SOURCE", "BROKER", "PUSHES"]
    body = []
    for row in rows:
        labels = row["labels"]
        cells = [
            row["client_instance_id"] if wide else row["client_instance_id"][:8],
            labels.get("client_id", ""),
            _software(labels),
            row["workload"] or "<none>",
            _pod(row) or "<none>",
            age(now_ms, row["last_push_ms"]),
            ",".join(row["subscriptions"]) or "<none>",
        ]
        if wide:
            source = labels.get("client_source_address", "")
            if labels.get("client_source_port"):
                source = f"{source}:{labels['client_source_port']}"
            cells += [labels.get("principal", ""), source, labels.get("broker_id", ""), str(row["pushes"])]
        body.append(cells)
    return table(headers, body)


def dump(rows: Any, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(rows, indent=2, sort_keys=True) + "\n"
    return str(yaml.safe_dump(rows, sort_keys=True))


def why_text(entry: ClientEntry, outcomes: Sequence[tuple[Subscription, SubscriptionMatch]]) -> str:
    lines = [f"client {entry['client_instance_id']} ({entry['labels'].get('client_id', '')}, "
             f"{workload(entry) or 'no workload'}, pod {_pod(entry) or '<none>'})"]
    if not outcomes:
        lines.append("  no ClientMetricsSubscription in scope")
    for subscription, outcome in outcomes:
        verdict = "MATCHES" if outcome.matched else "does not match"
        lines.append(f"  {subscription.ref}: {verdict}")
        if not outcome.selectors:
            lines.append("    (no match selectors: every client)")
        for selector in outcome.selectors:
            mark = "ok  " if selector.matched else "FAIL"
            value = "<absent>" if selector.value is None else repr(selector.value)
            lines.append(f"    {mark} {selector.key} = {value} against ^(?:{selector.regex})$")
    return "\n".join(lines) + "\n"


def top_rows(clients: Sequence[ClientEntry], by: str) -> list[tuple[str, dict[str, float]]]:
    """(name, figures) per client, or per workload: rates add up, averages average, maxima take the max."""
    if by == "client":
        return [(f"{e['labels'].get('client_id', '')}/{e['client_instance_id'][:8]}", dict(e["metrics"]))
                for e in clients]
    groups: dict[str, list[dict[str, float]]] = {}
    for entry in clients:
        groups.setdefault(workload(entry) or "<none>", []).append(entry["metrics"])
    rows = []
    for name, figures in groups.items():
        combined: dict[str, float] = {}
        for column in METRIC_COLUMNS:
            values = [f[column] for f in figures if column in f]
            if values:
                combined[column] = (sum(values) if column.endswith("_per_s") else max(values)
                                    if column.endswith("_max_ms") else sum(values) / len(values))
        rows.append((name, combined))
    return rows


_TOP_HEADERS = {
    "records_per_s": "RECORDS/S", "bytes_per_s": "BYTES/S", "errors_per_s": "ERRORS/S",
    "request_latency_avg_ms": "LATENCY AVG(ms)", "request_latency_max_ms": "LATENCY MAX(ms)",
    "queue_time_avg_ms": "QUEUE AVG(ms)", "queue_time_max_ms": "QUEUE MAX(ms)",
    "throttle_time_avg_ms": "THROTTLE AVG(ms)", "throttle_time_max_ms": "THROTTLE MAX(ms)",
}


def top_table(rows: Sequence[tuple[str, dict[str, float]]], by: str, sort: str) -> str:
    ordered = sorted(rows, key=lambda row: (-row[1].get(sort, float("-inf")), row[0]))
    headers = ["WORKLOAD" if by == "workload" else "CLIENT", *(_TOP_HEADERS[c] for c in METRIC_COLUMNS)]
    return table(headers, [[name, *(_figure(figures.get(c)) for c in METRIC_COLUMNS)] for name, figures in ordered])


def _figure(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.1f}"
