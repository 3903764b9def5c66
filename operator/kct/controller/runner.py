"""`kct operator`: run the controllers with kopf, standalone (no peering), on KUBECONFIG or in-cluster.

Settings come from flags with environment fallbacks so the Deployment and local runs share them:
`KCT_RESYNC_SECONDS` (default 60), `KCT_WATCH_NAMESPACES` (comma-separated; default all),
`KAFKA_BOOTSTRAP_SERVERS` (the default cluster), `KCT_KAFKA_PROPERTIES_FILE`.
"""

from __future__ import annotations

import argparse
import logging
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import kopf

    from kct.controller.kernel import OperatorConfig

__all__ = ["register", "register_handlers", "run_operator"]


def register_handlers(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    """Every handler `kct operator` runs, on one registry: the ClientMetricsSubscription controller (whose
    startup and login handlers configure kopf for both) and the TelemetryReceiver controller."""
    from kct.controller.receiver_handlers import register_receiver_handlers
    from kct.controller.subscription_handlers import register_subscription_handlers

    register_subscription_handlers(registry, config)
    register_receiver_handlers(registry, config)


def run_operator(
    namespaces: list[str],
    resync_seconds: float,
    backoff_max_seconds: float,
    liveness_endpoint: str | None = None,
    verbose: bool = False,
) -> None:
    import kopf

    from kct.controller.kafka_clients import AdminPool, KubernetesSecretReader
    from kct.controller.kernel import OperatorConfig

    kopf.configure(verbose=verbose, log_prefix=True)  # kopf's format: [namespace/name] on object logs
    # kafka-python logs every refused connection at ERROR; the Ready condition already names the cause.
    logging.getLogger("kafka").setLevel(logging.WARNING if verbose else logging.CRITICAL)
    registry = kopf.OperatorRegistry()
    config = OperatorConfig(resync_seconds=resync_seconds, backoff_max_seconds=backoff_max_seconds)
    register_handlers(registry, config)
    memo = kopf.Memo(admins=AdminPool.from_environment(KubernetesSecretReader()))
    kopf.run(
        registry=registry,
        standalone=True,
        clusterwide=not namespaces,
        namespaces=namespaces,
        memo=memo,
        liveness_endpoint=liveness_endpoint,
    )


def _handle(args: argparse.Namespace) -> int:
    namespaces = [ns for ns in (args.namespace or []) if ns]
    run_operator(namespaces, args.resync_seconds, args.backoff_max_seconds, args.liveness, args.verbose)
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "operator",
        help="run the operator (ClientMetricsSubscription, TelemetryReceiver controllers); honours KUBECONFIG",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    env_namespaces = [ns.strip() for ns in os.environ.get("KCT_WATCH_NAMESPACES", "").split(",") if ns.strip()]
    parser.add_argument(
        "--namespace", "-n", action="append", default=env_namespaces or None,
        help="watch only this namespace (repeatable); default: all namespaces",
    )
    parser.add_argument(
        "--resync-seconds", type=float, default=float(os.environ.get("KCT_RESYNC_SECONDS", "60")),
        help="period of the drift-reverting resync (default: $KCT_RESYNC_SECONDS or 60)",
    )
    parser.add_argument(
        "--backoff-max-seconds", type=float, default=float(os.environ.get("KCT_BACKOFF_MAX_SECONDS", "60")),
        help="longest wait between retries while Kafka is unreachable (default 60)",
    )
    parser.add_argument("--liveness", default=None, help="e.g. http://0.0.0.0:8080/healthz")
    parser.add_argument("--verbose", "-v", action="store_true")
    parser.set_defaults(handler=_handle)
