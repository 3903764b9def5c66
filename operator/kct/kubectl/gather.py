"""From the cluster to rows: ask every TelemetryReceiver in scope for its clients, merge, match.

Each receiver replica knows only the pushes it stored, so every ready pod behind the receiver's Service is
asked (pods/proxy); where the user may not read its Endpoints or proxy to pods, the Service is asked instead
(services/proxy: one replica answers) and a warning says so. A client pushes through one broker to one
receiver at a time, but a reconnect lands it on another replica: entries are merged by client instance id,
the one with the newest push wins (counts add up).
Every ClientMetricsSubscription in scope is matched against every client with `kct.api.matching`, the
broker's rule, so what we print is what the broker applies.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kct.api.client_census import workload
from kct.api.matching import SubscriptionMatch, broker_selectors, match_client
from kct.kubectl.cluster import RECEIVERS, SUBSCRIPTIONS, Cluster, Forbidden, PluginError, Unreachable
from kct.otlp.clients_doc import CLIENTS_ROUTE, READ_TOKEN_HEADER, ClientEntry
from kct.render.names import ChildNames
from kct.render.params import OTLP_PORT

__all__ = ["Gathered", "Subscription", "gather", "load_subscriptions", "match_all", "matched_refs", "workload"]

@dataclass(frozen=True)
class Subscription:
    namespace: str
    name: str
    selectors: dict[str, str]  # broker keys

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class Gathered:
    clients: list[ClientEntry]
    warnings: list[str] = field(default_factory=list)  # receivers that did not answer, and why


def load_subscriptions(cluster: Cluster, namespace: str | None) -> list[Subscription]:
    found = []
    for obj in cluster.list_objects(SUBSCRIPTIONS, namespace):
        match = (obj.get("spec") or {}).get("match")
        meta = obj["metadata"]
        selectors = broker_selectors(match if isinstance(match, dict) else None)
        found.append(Subscription(meta["namespace"], meta["name"], selectors))
    return sorted(found, key=lambda s: (s.namespace, s.name))


def gather(cluster: Cluster, namespace: str | None) -> Gathered:
    """Every client the receivers in scope saw; PluginError when there is no receiver or none answered."""
    receivers = cluster.list_objects(RECEIVERS, namespace)
    if not receivers:
        where = f"namespace {namespace!r}" if namespace else "any namespace"
        raise PluginError(f"no TelemetryReceiver in {where} (try -A, or -n with the receiver's namespace)")
    merged: dict[str, ClientEntry] = {}
    warnings: list[str] = []
    answered = 0
    for receiver in receivers:
        try:
            documents = _ask(cluster, receiver, warnings)
        except PluginError as exc:
            warnings.append(str(exc))
            continue
        answered += 1
        for document in documents:
            for entry in document.get("clients", []):
                _merge(merged, entry)
    if not answered:
        raise Unreachable("no receiver answered: " + "; ".join(warnings))
    clients = sorted(merged.values(), key=lambda e: -e["last_push_ms"])
    return Gathered(clients, warnings)


def match_all(
    entry: ClientEntry, subscriptions: Iterable[Subscription]
) -> list[tuple[Subscription, SubscriptionMatch]]:
    labels: dict[str, str | None] = {**entry["labels"], "client_instance_id": entry["client_instance_id"]}
    return [(s, match_client(s.selectors, labels)) for s in subscriptions]


def matched_refs(entry: ClientEntry, subscriptions: Sequence[Subscription]) -> list[str]:
    return [s.ref for s, outcome in match_all(entry, subscriptions) if outcome.matched]


def _ask(cluster: Cluster, receiver: dict[str, Any], warnings: list[str]) -> list[dict[str, Any]]:
    """The documents of the receiver's replicas (at least one, else PluginError); what failed in `warnings`."""
    meta = receiver["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    auth = ((receiver.get("spec") or {}).get("receiver") or {}).get("auth") or {}  # spec.receiver.auth
    headers: dict[str, str] = {}
    if auth.get("enabled", True):
        ref = auth.get("tokenSecretRef") or {}
        secret, key = ref.get("name") or ChildNames(name).token_secret, ref.get("key") or "token"
        headers[READ_TOKEN_HEADER] = cluster.secret_value(namespace, secret, key)
    service = ChildNames(name).receiver
    tls = ((receiver.get("spec") or {}).get("receiver") or {}).get("tls") or {}  # spec.receiver.tls, on by default
    scheme = "http" if tls.get("mode") == "disabled" else "https"

    def get(kind: str, target: str) -> dict[str, Any]:
        document = cluster.proxy_get(namespace, kind, target, OTLP_PORT, CLIENTS_ROUTE, headers, scheme)
        if not isinstance(document, dict):
            raise Unreachable(f"{kind} {namespace}/{target}: the answer is not a clients document")
        return document

    try:
        pods = cluster.endpoint_pods(namespace, service)
        documents = []
        for pod in pods:
            try:
                documents.append(get("pods", pod))
            except Forbidden:
                raise
            except PluginError as exc:
                warnings.append(str(exc))
        if documents:
            return documents
    except Forbidden as exc:
        warnings.append(f"{exc}: asked Service {namespace}/{service} instead, which reaches one replica")
    return [get("services", service)]


def _merge(merged: dict[str, ClientEntry], entry: ClientEntry) -> None:
    seen = merged.get(entry["client_instance_id"])
    if seen is None:
        merged[entry["client_instance_id"]] = entry
        return
    newer, older = (entry, seen) if entry["last_push_ms"] >= seen["last_push_ms"] else (seen, entry)
    merged[entry["client_instance_id"]] = {
        **newer,
        "first_push_ms": min(newer["first_push_ms"], older["first_push_ms"]),
        "pushes": newer["pushes"] + older["pushes"],
    }
