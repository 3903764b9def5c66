"""Which Kubernetes workload sent a push (issue 42, part 1).

`config` (the `attribution` section of the receiver's config), `index` (pods by address over time, owners),
`attributor` (index, then rules: the precedence), `resource_bytes` (adding resource attributes to the stored
OTLP bytes without decoding them), `watch` (the list+watch loop behind the `ObjectSource` port),
`kube_source` (the one real source: the Kubernetes API over HTTPS, without a client library) and
`fake_source` (the unit tests' source). Only `kube_source` does I/O.
"""
