"""`kubectl kct ...`: the command line (argparse), the one place that prints and picks the exit status.

Exit status: 0 done, 1 the cluster could not tell (PluginError: no CRDs, no receiver, refused), 2 usage.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from kct.api.client_census import is_live
from kct.kubectl.cluster import Cluster, KubeCluster, PluginError, current_namespace
from kct.kubectl.gather import Subscription, gather, load_subscriptions, match_all
from kct.kubectl.tables import clients_rows, clients_table, dump, top_rows, top_table, why_text
from kct.otlp.clients_doc import METRIC_COLUMNS, ClientEntry

__all__ = ["build_parser", "main"]

ClusterFactory = Callable[[argparse.Namespace], Cluster]

_EPILOG = """\
The receivers are asked through the API server's proxy with your kubeconfig: you need `list` on
telemetryreceivers and clientmetricssubscriptions, `get` on the receiver's token Secret, and `get` on the
receiver Service's endpoints and pods/proxy (every replica is asked) or on services/proxy (one answers).

examples:
  kubectl kct clients -A                       every client every receiver saw lately
  kubectl kct clients -n kafka -o wide         with principal, source address, broker, push count
  kubectl kct clients --subscription producers only the clients one subscription matches
  kubectl kct why checkout-7d9f8-abcde         every subscription in scope, selector by selector
  kubectl kct top --by workload --sort records_per_s
  source <(kubectl-kct completion bash)        shell completion
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubectl kct",
        description="Kafka clients pushing KIP-714 telemetry: which workload each is, which "
        "ClientMetricsSubscriptions match it, and the figures it pushed.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    scope = argparse.ArgumentParser(add_help=False)
    where = scope.add_mutually_exclusive_group()
    where.add_argument("-n", "--namespace", help="namespace of the receivers and subscriptions "
                       "(default: the kubeconfig context's)")
    where.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    scope.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    scope.add_argument("--context", help="kubeconfig context (default: the current one)")

    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    clients = commands.add_parser("clients", parents=[scope], help="list the clients the receivers saw",
                                  description="Clients seen lately by the receivers in scope, newest push first, "
                                  "with the subscriptions each matches (the broker's rule: every selector's "
                                  "anchored RE2 regex matches).")
    clients.add_argument("--subscription", metavar="NAME",
                         help="only the live clients this subscription matches (what its status.clients counts)")
    clients.add_argument("-o", "--output", choices=("wide", "json", "yaml"), help="output format")
    why = commands.add_parser("why", parents=[scope], help="why a client does or does not match each subscription",
                              description="Every ClientMetricsSubscription in scope, and for each of its match "
                              "selectors the client's value, the regex and whether it matched.")
    why.add_argument("client", metavar="INSTANCE-ID|POD", help="client instance id (or a prefix of it), or pod name")
    top = commands.add_parser("top", parents=[scope], help="latest figures the clients pushed",
                              description="The latest figures each client pushed: record and byte rates, errors, "
                              "request latency, queue time, throttling. '-' where the client does not send it.")
    top.add_argument("--by", choices=("workload", "client"), default="workload", help="one row per (default: workload)")
    top.add_argument("--sort", choices=METRIC_COLUMNS, default="records_per_s", metavar="METRIC",
                     help=f"sort by, descending (default: records_per_s; one of {', '.join(METRIC_COLUMNS)})")
    completion = commands.add_parser("completion", help="print a shell completion script",
                                     description="Print a completion script: `source <(kubectl-kct completion bash)`.")
    completion.add_argument("shell", choices=("bash",))
    return parser


def main(
    argv: Sequence[str] | None = None,
    *,
    make_cluster: ClusterFactory | None = None,
    out: TextIO | None = None,
    now_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    stdout, stderr = out or sys.stdout, sys.stderr
    if args.command == "completion":
        stdout.write(bash_completion(parser))
        return 0
    try:
        cluster = (make_cluster or _kube_cluster)(args)
        namespace = None if args.all_namespaces else args.namespace or current_namespace(args.kubeconfig, args.context)
        gathered = gather(cluster, namespace)
        for warning in gathered.warnings:
            stderr.write(f"warning: {warning}\n")
        if args.command == "top":
            stdout.write(top_table(top_rows(gathered.clients, args.by), args.by, args.sort))
        elif args.command == "why":
            stdout.write(_why(args.client, gathered.clients, load_subscriptions(cluster, namespace)))
        else:
            rows = _clients(args.subscription, gathered.clients, load_subscriptions(cluster, namespace), now_ms())
            if args.output in ("json", "yaml"):
                stdout.write(dump(rows, args.output))
            elif rows:
                stdout.write(clients_table(rows, now_ms(), wide=args.output == "wide"))
            else:
                stderr.write("No clients found.\n")
        return 0
    except PluginError as exc:
        stderr.write(f"error: {exc}\n")
        return 1


def _clients(
    subscription: str | None, clients: Sequence[ClientEntry], subscriptions: Sequence[Subscription], now: int
) -> list[dict[str, Any]]:
    if subscription is None:
        return clients_rows(clients, subscriptions)
    refs = {s.ref for s in subscriptions if subscription in (s.name, s.ref)}
    if not refs:
        raise PluginError(f"no ClientMetricsSubscription {subscription!r} in scope")
    # The clients the subscription's status.clients counts: live ones (kct.api.client_census), same match.
    rows = clients_rows([entry for entry in clients if is_live(entry, now)], subscriptions)
    return [row for row in rows if refs & set(row["subscriptions"])]


def _why(client: str, clients: Sequence[ClientEntry], subscriptions: Sequence[Subscription]) -> str:
    chosen = [e for e in clients
              if e["client_instance_id"].startswith(client) or e["attributes"].get("k8s.pod.name") == client]
    if not chosen:
        raise PluginError(f"no client with instance id or pod {client!r} seen by the receivers in scope")
    return "".join(why_text(e, match_all(e, subscriptions)) for e in chosen)


def _kube_cluster(args: argparse.Namespace) -> Cluster:
    return KubeCluster(args.kubeconfig, args.context)


def bash_completion(parser: argparse.ArgumentParser) -> str:
    """Completes the subcommands and their options of `kubectl-kct` typed directly. (`kubectl kct <TAB>` goes
    through kubectl's own completion, which asks a `kubectl_complete-kct` executable: not installed yet.)"""
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    cases = []
    for name, sub in subparsers.choices.items():
        words = sorted(opt for action in sub._actions for opt in action.option_strings)
        words += [c for action in sub._actions if action.choices and not action.option_strings for c in action.choices]
        cases.append(f'    {name}) words="{" ".join(words)}" ;;')
    return f"""# bash completion for kubectl-kct
_kubectl_kct() {{
  local cur="${{COMP_WORDS[COMP_CWORD]}}" sub="" i
  for ((i = 1; i < COMP_CWORD; i++)); do
    case "${{COMP_WORDS[i]}}" in kct) ;; -*) ;; *) sub="${{COMP_WORDS[i]}}"; break ;; esac
  done
  local words="{' '.join(subparsers.choices)} --help"
  case "$sub" in
{chr(10).join(cases)}
  esac
  COMPREPLY=($(compgen -W "$words" -- "$cur"))
}}
complete -F _kubectl_kct kubectl-kct
"""
