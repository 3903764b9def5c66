"""Controllers (kopf handlers) and what they share: conditions, the admin pool, the operator runner.

Handlers are thin; the reconcile logic of each kind is a plain function over ports (see
`kct.controller.subscription`) so it is unit-tested without kopf, Kubernetes or Kafka.
"""
