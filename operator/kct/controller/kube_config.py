"""How every Kubernetes client of the project finds its cluster: in-cluster service account first,
else KUBECONFIG (or ~/.kube/config), optionally with a named context.

One place, so the operator's children client, its Secret reader and `kct client-metrics` cannot drift
apart in how they log in.
"""

from __future__ import annotations

from typing import Any

__all__ = ["kube_api_client"]


def kube_api_client(context: str | None = None) -> Any:
    """A `kubernetes.client.ApiClient` for the cluster this process runs in, else the kubeconfig's."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config(context=context)  # type: ignore[no-untyped-call]
    return client.ApiClient()
