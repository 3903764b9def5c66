"""`kct operator`: run the controllers with kopf, standalone (no peering), on KUBECONFIG or in-cluster.

Settings come from flags with environment fallbacks so the Deployment and local runs share them:
`KCT_RESYNC_SECONDS` (default 60), `KCT_WATCH_NAMESPACES` (comma-separated; default all),
`KAFKA_BOOTSTRAP_SERVERS` (the default cluster), `KCT_KAFKA_PROPERTIES_FILE`, and for several replicas
`KCT_LEADER_ELECTION` (true/false), `KCT_LEADER_ELECTION_NAME`, `POD_NAMESPACE`, `POD_NAME`, and
`KCT_WATCH_SPARK_APPLICATIONS` (true/false: the aggregation's state reaches status as the spark-operator
reports it; needs list/watch on sparkoperator.k8s.io applications), `KCT_CLIENTS_INTERVAL_SECONDS` (default
30: how often each subscription's matched clients are counted), `KCT_NO_CLIENTS_WARNING_SECONDS`
(default 600: how long a subscription may match nothing before its Warning), and `KCT_METRICS_ADDRESS`
(host:port of the Prometheus /metrics endpoint, `kct.controller.metrics`; empty: none).

The metrics endpoint is served by every replica, the standbys too (their reconcile counts stay at zero), so
a scrape of the Deployment's pods tells the leader from the standbys and a standby's scrape never fails.

With leader election on, a replica first waits for the Lease (kct.controller.leadership), answering its
liveness endpoint meanwhile so the kubelet does not restart a healthy standby; only the holder starts
kopf. A holder that loses the Lease exits (status 1) at once, as client-go's controllers do: the kubelet
restarts it as the new standby, and nothing it had in flight can overlap the new leader's work.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import socket
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import kopf

    from kct.controller.kernel import OperatorConfig
    from kct.controller.leadership import LeaderElector
    from kct.controller.metrics import OperatorMetrics

__all__ = ["LeaderElection", "register", "register_handlers", "run_operator"]

log = logging.getLogger("kct.operator")


@dataclass(frozen=True)
class LeaderElection:
    """Which Lease the replicas compete for, and under which name this one competes."""

    namespace: str
    name: str
    identity: str
    lease_duration_seconds: float = 10.0


class _Healthy(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(b"standby: waiting for the lease\n")

    def log_message(self, *_: Any) -> None:  # probes every few seconds: keep them out of the log
        pass


@contextlib.contextmanager
def _standby_liveness(endpoint: str | None) -> Iterator[None]:
    """Answer `endpoint` (kopf's liveness URL) while kopf is not running yet; freed before kopf binds it."""
    if not endpoint:
        yield
        return
    url = urllib.parse.urlsplit(endpoint)
    server = ThreadingHTTPServer((url.hostname or "0.0.0.0", url.port or 80), _Healthy)
    thread = threading.Thread(target=server.serve_forever, name="standby-liveness", daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


def _lead(election: LeaderElection, liveness_endpoint: str | None) -> LeaderElector | None:
    """Block until this replica holds the Lease; then renew it in the background. Returns the elector,
    or None when SIGTERM/SIGINT arrived while waiting (the caller exits without starting kopf)."""
    from kct.controller.leadership import ElectionTiming, KubernetesLeaseStore, LeaderElector

    timing = ElectionTiming.from_lease_duration(election.lease_duration_seconds)
    elector = LeaderElector(KubernetesLeaseStore(election.namespace, election.name), election.identity, timing)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with _standby_liveness(liveness_endpoint):
            if not elector.acquire(stop):
                return None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    def lost(reason: str) -> None:
        log.critical("leadership lost: %s; exiting so that only one replica reconciles", reason)
        logging.shutdown()
        os._exit(1)  # no cleanup: handlers in flight must not write after the new leader started

    threading.Thread(target=elector.keep_renewing, args=(lost, threading.Event()), name="lease", daemon=True).start()
    return elector


def register_handlers(
    registry: kopf.OperatorRegistry, config: OperatorConfig, metrics: OperatorMetrics | None = None
) -> None:
    """Every handler `kct operator` runs, on one registry: the ClientMetricsSubscription controller (whose
    startup and login handlers configure kopf for both), the TelemetryReceiver controller, and the timers
    counting each subscription's matched clients; the first two record into `metrics`."""
    from kct.controller.clients_handlers import register_clients_handlers
    from kct.controller.subscription_handlers import register_subscription_handlers
    from kct.controller.telemetry_receiver_handlers import register_receiver_handlers

    register_subscription_handlers(registry, config, metrics)
    register_receiver_handlers(registry, config, metrics)
    register_clients_handlers(registry, config)


def run_operator(
    namespaces: list[str],
    resync_seconds: float,
    backoff_max_seconds: float,
    liveness_endpoint: str | None = None,
    verbose: bool = False,
    election: LeaderElection | None = None,
    watch_spark_applications: bool = False,
    clients_interval_seconds: float = 30.0,
    no_clients_warning_seconds: float = 600.0,
    metrics_address: str | None = None,
) -> None:
    import kopf

    from kct.controller.kafka_clients import AdminPool, KubernetesSecretReader
    from kct.controller.kernel import OperatorConfig
    from kct.controller.metrics import OperatorMetrics, serve_metrics

    kopf.configure(verbose=verbose, log_prefix=True)  # kopf's format: [namespace/name] on object logs
    # kafka-python logs every refused connection at ERROR; the Ready condition already names the cause.
    logging.getLogger("kafka").setLevel(logging.WARNING if verbose else logging.CRITICAL)
    registry = kopf.OperatorRegistry()
    config = OperatorConfig(resync_seconds=resync_seconds, backoff_max_seconds=backoff_max_seconds,
                            watch_spark_applications=watch_spark_applications,
                            clients_interval_seconds=clients_interval_seconds,
                            no_clients_warning_seconds=no_clients_warning_seconds)
    metrics = OperatorMetrics()
    if metrics_address:
        server = serve_metrics(metrics, metrics_address)
        log.info("metrics on http://%s:%d/metrics", server.server_address[0], server.server_port)
    register_handlers(registry, config, metrics)
    # Everything that needs no lease is ready before waiting for it, so a takeover starts kopf at once.
    memo = kopf.Memo(admins=AdminPool.from_environment(KubernetesSecretReader()))
    elector = None
    if election is not None:
        elector = _lead(election, liveness_endpoint)
        if elector is None:
            return
    try:
        kopf.run(
            registry=registry,
            standalone=True,
            clusterwide=not namespaces,
            namespaces=namespaces,
            memo=memo,
            liveness_endpoint=liveness_endpoint,
        )
    finally:
        if elector is not None:
            elector.release()  # a clean stop (SIGTERM, a rollout) hands over at once, not after expiry


def _handle(args: argparse.Namespace) -> int:
    namespaces = [ns for ns in (args.namespace or []) if ns]
    election = None
    if args.leader_election:
        election = LeaderElection(
            namespace=args.leader_election_namespace,
            name=args.leader_election_name,
            identity=os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}",
            lease_duration_seconds=args.lease_duration_seconds,
        )
    run_operator(namespaces, args.resync_seconds, args.backoff_max_seconds, args.liveness, args.verbose, election,
                 watch_spark_applications=args.watch_spark_applications,
                 clients_interval_seconds=args.clients_interval_seconds,
                 no_clients_warning_seconds=args.no_clients_warning_seconds, metrics_address=args.metrics_address)
    return 0


def _flag(value: str) -> bool:
    return value.strip().lower() in {"1", "true", "yes", "on"}


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
    parser.add_argument(
        "--leader-election", action=argparse.BooleanOptionalAction,
        default=_flag(os.environ.get("KCT_LEADER_ELECTION", "false")),
        help="compete for a Lease so that of several replicas only one reconciles (default: $KCT_LEADER_ELECTION)",
    )
    parser.add_argument(
        "--leader-election-namespace", default=os.environ.get("POD_NAMESPACE") or "default",
        help="namespace of the Lease (default: $POD_NAMESPACE, else default)",
    )
    parser.add_argument(
        "--leader-election-name", default=os.environ.get("KCT_LEADER_ELECTION_NAME") or "kct-operator",
        help="name of the Lease (default: $KCT_LEADER_ELECTION_NAME, else kct-operator)",
    )
    parser.add_argument(
        "--lease-duration-seconds", type=float, default=10.0,
        help="how long a silent leader keeps the Lease; takeover after a kill takes at most this plus 20 %%",
    )
    parser.add_argument(
        "--watch-spark-applications", action=argparse.BooleanOptionalAction,
        default=_flag(os.environ.get("KCT_WATCH_SPARK_APPLICATIONS", "false")),
        help="watch the aggregation's SparkApplications so their state reaches status at once, not at the next "
             "resync; needs list/watch on them (default: $KCT_WATCH_SPARK_APPLICATIONS)",
    )
    parser.add_argument(
        "--clients-interval-seconds", type=float, default=float(os.environ.get("KCT_CLIENTS_INTERVAL_SECONDS", "30")),
        help="how often the receivers' client registries are read and each subscription's status.clients updated "
             "(default: $KCT_CLIENTS_INTERVAL_SECONDS or 30)",
    )
    parser.add_argument(
        "--no-clients-warning-seconds", type=float,
        default=float(os.environ.get("KCT_NO_CLIENTS_WARNING_SECONDS", "600")),
        help="how long a subscription may match no live client before ClientsMatched=False and a Warning event "
             "(default: $KCT_NO_CLIENTS_WARNING_SECONDS or 600)",
    )
    parser.add_argument("--liveness", default=None, help="e.g. http://0.0.0.0:8080/healthz")
    parser.add_argument(
        "--metrics-address", default=os.environ.get("KCT_METRICS_ADDRESS") or None,
        help="serve Prometheus metrics at http://HOST:PORT/metrics, e.g. 0.0.0.0:8081 (default: "
             "$KCT_METRICS_ADDRESS; none when unset)",
    )
    parser.add_argument("--verbose", "-v", action="store_true")
    parser.set_defaults(handler=_handle)
