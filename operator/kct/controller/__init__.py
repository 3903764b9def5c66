"""Controllers (kopf handlers) and what they share.

- `subscription`, `telemetry_receiver`: the reconcile of each kind, a plain blocking function over ports, read top to
  bottom as named steps, unit-tested without kopf, Kubernetes or Kafka.
- `kernel`: what both reconciles share (`Outcome`, `Event`, `StopReconcile`, `ConditionTracker`,
  `OperatorConfig`, backoff; validation messages are `kct.validation`'s); `conditions`: condition types,
  reasons, the condition helper.
- `subscription_handlers`, `telemetry_receiver_handlers`: the kopf handlers, one method each (`SubscriptionHandlers`,
  `ReceiverHandlers`); `kopf_outcome` writes an `Outcome` through kopf (status, events, retry).
- `children` (Kubernetes objects and owner status, behind `ChildrenClient`), `kafka_clients` (the admin
  pool, Secrets), `kube_config` (how every client finds its cluster), `resource` (the body view),
  `runner` (`kct operator`).
"""
