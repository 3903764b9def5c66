"""Custom resource APIs: spec models (the single source of the CRD schemas) and the CRD generator."""

from kct.api.crds import CLIENT_METRICS_SUBSCRIPTION, DEFINITIONS, GROUP, VERSION
from kct.api.subscription import ClientMetricsSubscriptionSpec, MatchSelectors

__all__ = [
    "CLIENT_METRICS_SUBSCRIPTION",
    "DEFINITIONS",
    "GROUP",
    "VERSION",
    "ClientMetricsSubscriptionSpec",
    "MatchSelectors",
]
