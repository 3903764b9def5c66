"""An in-memory cluster for the plugin's tests: objects by (plural, namespace), Secrets, the pods behind each
Service, and what each Service or pod answers (a document, or the PluginError it raises). It records the
proxy calls made."""

from __future__ import annotations

from typing import Any

from kct.kubectl.cluster import CrdMissing, PluginError, Unreachable

__all__ = ["FakeCluster"]


class FakeCluster:
    def __init__(self, *, crds: bool = True) -> None:
        self.crds = crds
        self.objects: dict[str, list[dict[str, Any]]] = {}
        self.secrets: dict[tuple[str, str, str], str] = {}
        self.answers: dict[tuple[str, str, str, int], Any] = {}  # (namespace, kind, name, port)
        self.endpoints: dict[tuple[str, str], list[str] | PluginError] = {}  # (namespace, service) -> pods
        self.calls: list[tuple[str, str, str, int, str, dict[str, str]]] = []
        self.schemes: list[str] = []  # the scheme of each call

    def add(self, plural: str, obj: dict[str, Any]) -> None:
        self.objects.setdefault(plural, []).append(obj)

    def list_objects(self, plural: str, namespace: str | None) -> list[dict[str, Any]]:
        if not self.crds:
            raise CrdMissing(f"the {plural} CRD is not installed in this cluster")
        return [o for o in self.objects.get(plural, []) if namespace is None or o["metadata"]["namespace"] == namespace]

    def secret_value(self, namespace: str, name: str, key: str) -> str:
        try:
            return self.secrets[(namespace, name, key)]
        except KeyError:
            raise PluginError(f"reading Secret {namespace}/{name}: 404 Not Found") from None

    def endpoint_pods(self, namespace: str, service: str) -> list[str]:
        pods = self.endpoints.get((namespace, service), [])
        if isinstance(pods, PluginError):
            raise pods
        return pods

    def proxy_get(self, namespace: str, kind: str, name: str, port: int, path: str, headers: dict[str, str],
                  scheme: str = "http") -> Any:
        self.calls.append((namespace, kind, name, port, path, dict(headers)))
        self.schemes.append(scheme)
        answer = self.answers.get((namespace, kind, name, port))
        if answer is None:
            raise Unreachable(f"{kind} {namespace}/{name}:{port}{path}: 503 no endpoints available")
        if isinstance(answer, PluginError):
            raise answer
        return answer
