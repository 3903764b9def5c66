"""kct: declarative Kafka client telemetry (KIP-714) on Kubernetes.

The package holds the operator (ClientMetricsSubscription, TelemetryReceiver), the OTLP receiver and
the Spark aggregation job. It lives under the `operator/` source folder and is not itself called
`operator`, which would shadow the standard-library module of that name.
"""

__version__ = "0.1.0"
