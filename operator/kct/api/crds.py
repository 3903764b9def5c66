"""The project's CRDs, and `kct crds generate [--check]` which writes them to `crds/`.

Add a kind by appending its `CrdDefinition` to `DEFINITIONS`; the generator, the staleness check and
the unit test that fails on a stale `crds/` pick it up.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Final

from kct.api._base import cel_rule
from kct.api.crdgen import CrdDefinition, PrinterColumn, render_all
from kct.api.status import ClientMetricsSubscriptionStatus
from kct.api.subscription import ClientMetricsSubscriptionSpec
from kct.api.telemetry_receiver import TelemetryReceiverSpec, TelemetryReceiverStatus

__all__ = [
    "CLIENT_METRICS_SUBSCRIPTION",
    "DEFINITIONS",
    "GROUP",
    "TELEMETRY_RECEIVER",
    "VERSION",
    "check_crds",
    "default_crd_dir",
    "register",
    "write_crds",
]

GROUP: Final = "telemetry.kct.dev"
VERSION: Final = "v1alpha1"

_READY = '.status.conditions[?(@.type=="Ready")]'

CLIENT_METRICS_SUBSCRIPTION: Final = CrdDefinition(
    group=GROUP,
    version=VERSION,
    kind="ClientMetricsSubscription",
    plural="clientmetricssubscriptions",
    short_names=("cms",),
    categories=("kct", "telemetry"),
    spec_model=ClientMetricsSubscriptionSpec,
    status_model=ClientMetricsSubscriptionStatus,
    description="A KIP-714 client metrics subscription: which Kafka clients push which metrics, and how "
    "often. Reconciled into the broker's CLIENT_METRICS config resource of the same name.",
    printer_columns=(
        PrinterColumn("Subscription", ".status.subscriptionName", description="CLIENT_METRICS resource name"),
        PrinterColumn("Interval", ".spec.intervalMs", "integer", "Push interval in milliseconds"),
        PrinterColumn("Metrics", ".spec.metrics", description="Metric-name prefixes"),
        PrinterColumn("Clients", ".status.clients.matched", "integer", "Live clients this subscription matches"),
        PrinterColumn("Ready", f"{_READY}.status"),
        PrinterColumn("Reason", f"{_READY}.reason", priority=1),
        PrinterColumn("Age", ".metadata.creationTimestamp", "date"),
    ),
    root_validations=(
        # The CLIENT_METRICS name is spec.subscriptionName, or metadata.name when unset; it must never
        # change, including by adding or removing spec.subscriptionName later.
        cel_rule(
            "(has(self.spec.subscriptionName) ? self.spec.subscriptionName : self.metadata.name) == "
            "(has(oldSelf.spec.subscriptionName) ? oldSelf.spec.subscriptionName : oldSelf.metadata.name)",
            "spec.subscriptionName is immutable: the CLIENT_METRICS resource name (spec.subscriptionName, "
            "or metadata.name when unset) cannot change; create a new resource instead",
            field_path=".spec.subscriptionName",
            reason="FieldValueForbidden",
        ),
    ),
)

TELEMETRY_RECEIVER: Final = CrdDefinition(
    group=GROUP,
    version=VERSION,
    kind="TelemetryReceiver",
    plural="telemetryreceivers",
    short_names=("tr",),
    categories=("kct", "telemetry"),
    spec_model=TelemetryReceiverSpec,
    status_model=TelemetryReceiverStatus,
    description="OTLP receivers for the brokers' client telemetry plugin, the Kafka topic they write to and "
    "the Spark application aggregating it (see kct.api.telemetry_receiver).",
    printer_columns=(
        PrinterColumn("Replicas", ".status.replicas", "integer", "Receiver pods"),
        PrinterColumn("Ready Replicas", ".status.readyReplicas", "integer", "Receiver pods ready"),
        PrinterColumn("Endpoint", ".status.endpoint", description="In-cluster OTLP/HTTP URL for the plugin"),
        PrinterColumn("Ready", f"{_READY}.status"),
        PrinterColumn("Reason", f"{_READY}.reason", priority=1),
        PrinterColumn("Topic", ".status.topic.name", priority=1),
        PrinterColumn("Age", ".metadata.creationTimestamp", "date"),
    ),
)

DEFINITIONS: Final[tuple[CrdDefinition, ...]] = (CLIENT_METRICS_SUBSCRIPTION, TELEMETRY_RECEIVER)


def default_crd_dir() -> Path:
    """`crds/` of the source checkout this package runs from, else `./crds`."""
    checkout = Path(__file__).resolve().parents[3] / "crds"
    return checkout if checkout.is_dir() else Path("crds")


def write_crds(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render_all(DEFINITIONS).items():
        path = directory / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            written.append(path)
    return written


def check_crds(directory: Path) -> list[str]:
    """Problems that make `directory` differ from what the models generate (empty = up to date)."""
    problems = []
    for name, text in render_all(DEFINITIONS).items():
        path = directory / name
        if not path.exists():
            problems.append(f"{path}: missing")
        elif path.read_text() != text:
            problems.append(f"{path}: stale (differs from the models)")
    return problems


def _generate(args: argparse.Namespace) -> int:
    directory: Path = args.output_dir or default_crd_dir()
    if args.check:
        problems = check_crds(directory)
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            print("run `kct crds generate` to regenerate", file=sys.stderr)
            return 1
        print(f"{directory}: up to date")
        return 0
    for path in write_crds(directory):
        print(f"wrote {path}")
    return 0


def register(subparsers: Any) -> None:
    crds = subparsers.add_parser("crds", help="CustomResourceDefinitions generated from the spec models")
    actions = crds.add_subparsers(dest="crds_command", metavar="ACTION", required=True)
    generate = actions.add_parser("generate", help="(re)write crds/ from the models")
    generate.add_argument("--check", action="store_true", help="write nothing; exit 1 when crds/ is stale")
    generate.add_argument("--output-dir", type=Path, default=None, help="default: the checkout's crds/")
    generate.set_defaults(handler=_generate)
