"""Small OTLP helpers shared by the receiver, the operator and the analytics job.

`labels` holds the one list of broker-added label names: the HTTP headers the broker plugin sends and the
Kafka record headers the receiver writes. Nothing here imports more than the standard library.
"""
