"""The OTLP/HTTP telemetry receiver: brokers' plugin (or any OTLP sender) in, one Kafka record per push out.

Layers, outermost first: `server` (aiohttp, HTTP semantics) -> `pipeline` (one push: `codec`,
`ratelimit`, `quota`, `sanitize`/`privacy`) -> `sink` (the `Sink` port; `kafka_sink` is the real one).
`config` is the single configuration model, also rendered by the operator; it imports only pydantic.
"""

from kct.receiver.config import ReceiverConfig, load_receiver_config

__all__ = ["ReceiverConfig", "load_receiver_config"]
