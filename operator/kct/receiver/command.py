"""`kct receiver --config FILE`: run the OTLP receiver in front of Kafka.

Settings come from FILE (see `kct.receiver.config`), secrets from the environment variables or the token
file it names (the token file is re-read when it changes: `kct.receiver.tokens`).
Exit codes: 0 after a graceful drain (SIGTERM/SIGINT), 2 for an invalid configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from kct.receiver.config import ReceiverConfig
    from kct.receiver.kafka_sink import KafkaSink
    from kct.receiver.server import ReceiverServer

__all__ = ["GC_GEN0_THRESHOLD", "event_loop_factory", "kafka_sink", "register", "run", "tune_gc"]

log = logging.getLogger(__name__)

# Python's default is 700. Under load every push in flight holds a few dozen container objects (coroutines,
# futures, headers, the task), so at 700 the young collection ran every ~10-20 pushes and promoted in-flight
# objects to the older generations; the cyclic GC was ~14 % of the receiver's CPU at 1,024 connections
# (perf). Almost all of a push's objects are freed by reference counting: a larger young generation means
# fewer collections, each finding most of it already gone.
GC_GEN0_THRESHOLD = 10_000


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "receiver",
        help="run the OTLP/HTTP telemetry receiver (brokers' plugin -> Kafka topic)",
        description="OTLP/HTTP receiver: authenticate, validate, filter, rate-limit and quota client "
        "telemetry pushes, and write one Kafka record per push.",
    )
    parser.add_argument("--config", required=True, metavar="FILE", help="receiver configuration (YAML)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from kct.receiver.config import ConfigError, load_receiver_config, resolve_env
    from kct.receiver.jsonlog import configure_logging
    from kct.receiver.tokens import BearerTokens, TokenFileError

    try:
        config = load_receiver_config(args.config)
        auth = config.auth
        token: str | BearerTokens | None = None
        if auth.bearer_token_env is not None:
            token = resolve_env(auth.bearer_token_env, "auth.bearerTokenEnv")
        elif auth.bearer_token_file is not None:
            try:
                token = BearerTokens.from_file(auth.bearer_token_file, grace_s=auth.previous_token_grace_seconds)
            except TokenFileError as exc:
                raise ConfigError(str(exc)) from None
        configure_logging(config.logging.level, config.logging.format)
        from kct.receiver.server import ReceiverServer

        sink = kafka_sink(config)
    except ConfigError as exc:
        print(f"kct receiver: invalid configuration:\n{exc}", file=sys.stderr)
        return 2
    server = ReceiverServer(config, sink, token=token)
    stop_attribution = _start_attribution(config, server)
    tune_gc()
    try:
        with asyncio.Runner(loop_factory=event_loop_factory(config.runtime.event_loop)) as runner:
            runner.run(server.run_until_signalled())
    finally:
        if stop_attribution is not None:
            stop_attribution.set()
    return 0


def _start_attribution(config: ReceiverConfig, server: ReceiverServer) -> threading.Event | None:
    """The watch feeding the pipeline's pod index (None when attribution is off or not in Kubernetes)."""
    attributor = server.pipeline.attributor
    if attributor is None:
        return None
    from kct.attribution.kube_source import start_in_cluster

    return start_in_cluster(config.attribution, attributor.index)


def kafka_sink(config: ReceiverConfig) -> KafkaSink:
    """The Kafka sink `config` describes (records up to the decompressed limit plus room for headers)."""
    from kct.receiver.kafka_sink import KafkaSink

    return KafkaSink(
        config.kafka,
        max_record_bytes=config.limits.max_decompressed_bytes + 64 * 1024,
        retry_after_s=config.limits.overload_retry_after_seconds,
        delivery_wakeup=config.runtime.delivery_wakeup,
    )


def tune_gc() -> None:
    """Before serving: everything loaded so far (modules, descriptors, the configuration: long-lived) moves to
    the GC's permanent generation (`gc.freeze`), so full collections no longer traverse it, and the young
    generation grows to GC_GEN0_THRESHOLD. Reference cycles are still collected, only less often."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


def event_loop_factory(event_loop: Literal["uvloop", "asyncio"]) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The loop `runtime.eventLoop` chooses (None: asyncio's own, the default; see RuntimeConfig for why).
    uvloop where it is chosen; where it is not installed, asyncio's, said in the log."""
    if event_loop == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        log.warning("runtime.eventLoop is uvloop but uvloop is not installed; running asyncio's event loop")
        return None
    return uvloop.new_event_loop
