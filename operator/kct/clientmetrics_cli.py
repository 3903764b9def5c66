"""`kct client-metrics`: kafka-client-metrics.sh's flags, GitOps output.

Apache Kafka's `kafka-client-metrics.sh` changes subscriptions on the cluster directly. This command
takes the same flags but prints the equivalent ClientMetricsSubscription YAML instead, for a GitOps
repository or `kubectl apply -f -`: the cluster then follows the resource, and the operator reverts
changes made behind its back. `--list` and `--describe` read what is on the cluster and mark
subscriptions that no resource manages; `--describe` prints a resource for each, so adopting existing
subscriptions is `kct client-metrics --describe --unmanaged-only | kubectl apply -f -`.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml
from pydantic import ValidationError

from kct.api.crds import CLIENT_METRICS_SUBSCRIPTION
from kct.api.subscription import MATCH_SELECTOR_KEYS, ClientMetricsSubscriptionSpec, effective_subscription_name
from kct.kafka.clientmetrics import parse_configs
from kct.kafka.errors import KafkaAdminError
from kct.kafka.port import ClientMetricsAdmin
from kct.validation import format_validation_error

__all__ = ["kubernetes_name", "managed_subscriptions", "parse_match", "register", "subscription_manifest"]

_SNAKE_TO_CAMEL = {snake: camel for camel, snake in MATCH_SELECTOR_KEYS.items()}
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def kubernetes_name(subscription_name: str) -> str:
    """A valid metadata.name for a subscription name (lowercase DNS subdomain, at most 253 chars)."""
    name = re.sub(r"[^a-z0-9.-]+", "-", subscription_name.lower()).strip("-.")
    return (name or "subscription")[:253].rstrip("-.")


def parse_match(values: Sequence[str]) -> dict[str, str]:
    """`--match 'client_id=app-.*,client_software_name=apache-kafka-java'` (repeatable) -> spec.match.
    Accepts the broker's snake_case selector names and the resource's camelCase keys."""
    match: dict[str, str] = {}
    for value in values:
        for item in (part.strip() for part in value.split(",")):
            if not item:
                continue
            key, sep, regex = item.partition("=")
            key = key.strip()
            camel = _SNAKE_TO_CAMEL.get(key, key if key in MATCH_SELECTOR_KEYS else None)
            if not sep or camel is None:
                raise ValueError(
                    f"--match {item!r}: expected selector=regex with selector one of {sorted(_SNAKE_TO_CAMEL)}"
                )
            match[camel] = regex
    return match


def parse_metrics(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def subscription_manifest(subscription_name: str, spec: Mapping[str, Any], namespace: str | None) -> dict[str, Any]:
    """A ClientMetricsSubscription manifest; spec.subscriptionName is set only when metadata.name
    cannot carry the subscription name."""
    name = kubernetes_name(subscription_name)
    full_spec = dict(spec)
    if name != subscription_name:
        full_spec["subscriptionName"] = subscription_name
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    definition = CLIENT_METRICS_SUBSCRIPTION
    return {
        "apiVersion": f"{definition.group}/{definition.version}",
        "kind": definition.kind,
        "metadata": metadata,
        "spec": ClientMetricsSubscriptionSpec.model_validate(full_spec).to_kube(),
    }


def managed_subscriptions(kubeconfig_context: str | None = None) -> dict[str, list[str]]:
    """Subscription name -> `namespace/name` of every resource claiming it, across all namespaces."""
    from kubernetes import client

    from kct.controller.kube_config import kube_api_client

    definition = CLIENT_METRICS_SUBSCRIPTION
    listing: Any = client.CustomObjectsApi(kube_api_client(kubeconfig_context)).list_cluster_custom_object(
        definition.group, definition.version, definition.plural
    )
    items: list[dict[str, Any]] = listing["items"]
    managed: dict[str, list[str]] = {}
    for item in items:
        meta = item.get("metadata", {})
        key = effective_subscription_name(item.get("spec"), meta.get("name", ""))
        managed.setdefault(key, []).append(f"{meta.get('namespace')}/{meta.get('name')}")
    return managed


def _admin(args: argparse.Namespace) -> ClientMetricsAdmin:
    from kct.controller.kafka_clients import kafka_python_admin, read_properties_file

    if not args.bootstrap_server:
        raise SystemExit("--bootstrap-server (or KAFKA_BOOTSTRAP_SERVERS) is required to read the cluster")
    properties = read_properties_file(Path(args.command_config)) if args.command_config else {}
    return kafka_python_admin(args.bootstrap_server, properties)


def _managed_or_none(args: argparse.Namespace, err: TextIO) -> dict[str, list[str]] | None:
    if args.no_kube:
        return None
    try:
        return managed_subscriptions()
    except Exception as error:  # no kubeconfig, CRD not installed, no RBAC: say so and go on
        print(f"# note: cannot list ClientMetricsSubscriptions ({type(error).__name__}: {error}); "
              "management status unknown", file=err)
        return None


def _dump(documents: Sequence[tuple[str, dict[str, Any]]], out: TextIO) -> None:
    for comment, document in documents:
        out.write("---\n")
        for line in comment.splitlines():
            out.write(f"# {line}\n")
        out.write(yaml.safe_dump(document, sort_keys=False, width=120))


def _alter(args: argparse.Namespace, out: TextIO) -> int:
    if bool(args.name) == bool(args.generate_name):
        raise SystemExit("--alter needs exactly one of --name or --generate-name")
    name = args.name or str(uuid.uuid4())
    spec: dict[str, Any] = {"metrics": []}
    if args.bootstrap_server and args.name:
        # Like kafka-client-metrics.sh --alter, only the given flags change an existing subscription.
        with _closing(_admin(args)) as admin:
            spec.update(parse_configs(admin.describe_subscription(name)).to_spec())
    if args.metrics is not None:
        spec["metrics"] = parse_metrics(args.metrics)
    if args.interval is not None:
        spec["intervalMs"] = args.interval
    if args.match:
        spec["match"] = parse_match(args.match)
    manifest = subscription_manifest(name, spec, args.namespace)
    _dump([(f"kct client-metrics --alter: CLIENT_METRICS {name}; apply with kubectl apply -f -", manifest)], out)
    return 0


class _closing:
    def __init__(self, admin: ClientMetricsAdmin) -> None:
        self.admin = admin

    def __enter__(self) -> ClientMetricsAdmin:
        return self.admin

    def __exit__(self, *_: object) -> None:
        self.admin.close()


def _list_or_describe(args: argparse.Namespace, out: TextIO, err: TextIO, admin: ClientMetricsAdmin) -> int:
    managed = _managed_or_none(args, err)
    names = [args.name] if args.name else admin.list_subscriptions()
    documents: list[tuple[str, dict[str, Any]]] = []
    for name in names:
        owners = managed.get(name) if managed is not None else None
        state = (
            "management unknown" if managed is None
            else f"managed by ClientMetricsSubscription {', '.join(owners)}" if owners
            else "UNMANAGED (no ClientMetricsSubscription)"
        )
        if args.unmanaged_only and (managed is None or owners):
            continue
        if args.list:
            out.write(f"{name}\t{state}\n")
            continue
        configs = admin.describe_subscription(name)
        if not configs:
            err.write(f"CLIENT_METRICS {name}: not found\n")
            continue
        parsed = parse_configs(configs)
        comment = f"CLIENT_METRICS {name}: {state}\nbroker configs: {configs}"
        if parsed.unknown:
            comment += f"\nnot representable: {parsed.unknown}"
        try:
            documents.append((comment, subscription_manifest(name, parsed.to_spec(), args.namespace)))
        except ValidationError as error:
            err.write(f"CLIENT_METRICS {name}: cannot be expressed as a resource: {format_validation_error(error)}\n")
    if args.describe:
        _dump(documents, out)
    return 0


def _delete(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if not args.name:
        raise SystemExit("--delete needs --name")
    managed = _managed_or_none(args, err)
    owners = (managed or {}).get(args.name, [])
    if owners:
        for owner in owners:
            namespace, name = owner.split("/", 1)
            out.write(f"kubectl delete clientmetricssubscription {name} -n {namespace}\n")
    else:
        out.write(
            f"# no ClientMetricsSubscription manages {args.name!r}; delete it from your GitOps repository, "
            f"or remove the file whose metadata.name is {kubernetes_name(args.name)!r}\n"
        )
    return 0


def _handle(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    try:
        if args.alter:
            return _alter(args, out)
        if args.delete:
            return _delete(args, out, err)
        with _closing(_admin(args)) as admin:
            return _list_or_describe(args, out, err, admin)
    except ValueError as error:  # includes pydantic's ValidationError
        message = format_validation_error(error) if isinstance(error, ValidationError) else str(error)
        err.write(f"error: {message}\n")
        return 2
    except KafkaAdminError as error:
        err.write(f"error: Kafka: {error}\n")
        return 1


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "client-metrics",
        help="kafka-client-metrics.sh flags -> ClientMetricsSubscription YAML; list/describe the cluster's",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--bootstrap-server", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--command-config", help="client properties file (SASL/TLS), as for the Kafka tools")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--alter", action="store_true", help="print the resource for this subscription")
    action.add_argument("--delete", action="store_true", help="print how to delete the managing resource")
    action.add_argument("--describe", action="store_true", help="print the cluster's subscriptions as resources")
    action.add_argument("--list", action="store_true", help="list the cluster's subscriptions")
    parser.add_argument("--name", help="CLIENT_METRICS resource name")
    parser.add_argument("--generate-name", action="store_true", help="with --alter: a random (UUID) name")
    parser.add_argument("--metrics", help="comma-separated metric-name prefixes; '*' for all")
    parser.add_argument("--interval", type=int, help="push interval in milliseconds")
    parser.add_argument(
        "--match", action="append", default=[],
        help="comma-separated selector=regex (client_id, client_instance_id, client_software_name, "
        "client_software_version, client_source_address, client_source_port); repeatable",
    )
    parser.add_argument("--namespace", "-n", help="metadata.namespace of the printed resources")
    parser.add_argument("--unmanaged-only", action="store_true", help="with --list/--describe")
    parser.add_argument("--no-kube", action="store_true", help="do not look for managing resources")
    parser.set_defaults(handler=_handle)
