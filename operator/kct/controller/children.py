"""The Kubernetes port of the TelemetryReceiver controller: apply, list and delete owned children.

One `Protocol` (`ChildrenClient`), one real implementation (`KubernetesChildren`, the official client's
dynamic client, server-side apply under our field manager) and one in-memory fake (`InMemoryChildren`)
for unit tests. Errors: `KindNotInstalled` (a LookupError: the kind's CRD is absent, e.g. no
spark-operator) and `ApplyRefused` (a ValueError: the API server refused the object; the message is
the server's, naming the field).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

__all__ = [
    "FIELD_MANAGER",
    "ApplyRefused",
    "ChildRef",
    "ChildrenClient",
    "InMemoryChildren",
    "KindNotInstalled",
    "KubernetesChildren",
]

FIELD_MANAGER: Final = "kct-operator"


class KindNotInstalled(LookupError):
    """The API server does not serve this kind (its CRD is not installed)."""


class ApplyRefused(ValueError):
    """The API server refused the object (validation, admission, conflict)."""


@dataclass(frozen=True)
class ChildRef:
    api_version: str
    kind: str
    namespace: str
    name: str
    owner_uids: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return (self.kind, self.name)


class ChildrenClient(Protocol):
    def apply(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply (force, our field manager); returns the object as stored, status included."""
        ...

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None: ...

    def list(self, api_version: str, kind: str, namespace: str, label_selector: str) -> list[ChildRef]: ...

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        """Delete (background propagation); no-op when absent."""
        ...

    def patch_status(self, api_version: str, kind: str, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Merge `status` into the status subresource of a resource (the owner, not a child); no-op when absent."""
        ...


def _owner_uids(obj: Mapping[str, Any]) -> tuple[str, ...]:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return tuple(str(ref.get("uid", "")) for ref in refs)


class KubernetesChildren:
    """`ChildrenClient` over the official client (in-cluster config, else KUBECONFIG)."""

    def __init__(self, api_client: Any = None) -> None:
        from kubernetes.dynamic import DynamicClient

        from kct.controller.kube_config import kube_api_client

        if api_client is None:
            api_client = kube_api_client()
        self._dynamic = DynamicClient(api_client)  # type: ignore[no-untyped-call]
        self._lock = threading.Lock()

    def _resource(self, api_version: str, kind: str) -> Any:
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        with self._lock:  # discovery's cache is not thread-safe
            try:
                return self._dynamic.resources.get(api_version=api_version, kind=kind)
            except ResourceNotFoundError:
                # The CRD may have been installed since discovery was cached: look once more.
                try:
                    self._dynamic.resources.invalidate_cache()
                    return self._dynamic.resources.get(api_version=api_version, kind=kind)
                except ResourceNotFoundError as error:
                    raise KindNotInstalled(f"{kind}.{api_version} is not served by the API server") from error

    def _rediscover(self, api_version: str, kind: str) -> Any:
        """The server answered 404 for a kind discovery said it serves: discovery is stale (the python client
        caches it in a file shared by every client of the same server URL, and a CRD can be uninstalled).
        Forget it and look again; KindNotInstalled when the kind is really gone."""
        with self._lock:
            self._dynamic.resources.invalidate_cache()
        return self._resource(api_version, kind)

    def apply(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        from kubernetes.dynamic.exceptions import DynamicApiError, NotFoundError

        api_version, kind = str(manifest["apiVersion"]), str(manifest["kind"])
        metadata = manifest["metadata"]

        def server_side_apply(resource: Any) -> Any:
            return resource.server_side_apply(
                body=dict(manifest),
                name=metadata["name"],
                namespace=metadata.get("namespace"),
                field_manager=FIELD_MANAGER,
                force_conflicts=True,
            )

        try:
            try:
                applied = server_side_apply(self._resource(api_version, kind))
            except NotFoundError:
                # Server-side apply creates what is missing, so a 404 means the kind itself is not served.
                applied = server_side_apply(self._rediscover(api_version, kind))
        except DynamicApiError as error:
            raise ApplyRefused(f"{kind} {metadata['name']}: {_api_message(error)}") from error
        result: dict[str, Any] = applied.to_dict()
        return result

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        from kubernetes.dynamic.exceptions import NotFoundError

        try:
            found: dict[str, Any] = self._resource(api_version, kind).get(name=name, namespace=namespace).to_dict()
        except NotFoundError:
            return None
        return found

    def list(self, api_version: str, kind: str, namespace: str, label_selector: str) -> list[ChildRef]:
        from kubernetes.dynamic.exceptions import NotFoundError

        try:
            found = self._resource(api_version, kind).get(namespace=namespace, label_selector=label_selector)
        except NotFoundError:  # a list has no object to miss: the kind is not served (stale discovery)
            found = self._rediscover(api_version, kind).get(namespace=namespace, label_selector=label_selector)
        return [
            ChildRef(api_version, kind, namespace, str(item["metadata"]["name"]), _owner_uids(item.to_dict()))
            for item in found.items
        ]

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        from kubernetes.dynamic.exceptions import NotFoundError

        try:
            self._resource(api_version, kind).delete(
                name=name, namespace=namespace, body={"propagationPolicy": "Background"}
            )
        except NotFoundError:
            return

    def patch_status(self, api_version: str, kind: str, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Merge-patch the status subresource of a resource (not a child: the owner)."""
        from kubernetes.dynamic.exceptions import NotFoundError

        resource = self._resource(api_version, kind)
        try:
            resource.status.patch(
                name=name,
                namespace=namespace,
                body={"status": dict(status)},
                content_type="application/merge-patch+json",
            )
        except NotFoundError:
            return


def _api_message(error: Any) -> str:
    import json

    try:
        body = json.loads(error.body)
        return str(body.get("message") or error.summary())
    except (TypeError, ValueError, AttributeError):
        return str(getattr(error, "reason", error))


@dataclass
class InMemoryChildren:
    """`ChildrenClient` for unit tests: a dict of objects; `missing_kinds` are not served;
    `deployment_status` is what the 'controller manager' reports for every Deployment."""

    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    missing_kinds: set[str] = field(default_factory=set)
    refuse_kinds: dict[str, str] = field(default_factory=dict)
    deployment_status: dict[str, Any] = field(default_factory=dict)
    applied: list[tuple[str, str]] = field(default_factory=list)
    deleted: list[tuple[str, str]] = field(default_factory=list)

    def _check(self, kind: str) -> None:
        if kind in self.missing_kinds:
            raise KindNotInstalled(f"{kind} is not served (fake)")

    def apply(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        kind = str(manifest["kind"])
        self._check(kind)
        name = str(manifest["metadata"]["name"])
        if kind in self.refuse_kinds:
            raise ApplyRefused(f"{kind} {name}: {self.refuse_kinds[kind]}")
        stored = copy.deepcopy(dict(manifest))
        key = (kind, str(manifest["metadata"].get("namespace", "")), name)
        if kind == "Deployment":
            stored["status"] = copy.deepcopy(self.deployment_status)
        elif "status" in self.objects.get(key, {}):  # an apply leaves what another controller reported
            stored["status"] = self.objects[key]["status"]
        self.objects[key] = stored
        self.applied.append((kind, name))
        return copy.deepcopy(stored)

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self._check(kind)
        found = self.objects.get((kind, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def list(self, api_version: str, kind: str, namespace: str, label_selector: str) -> list[ChildRef]:
        self._check(kind)
        wanted = dict(pair.split("=", 1) for pair in label_selector.split(",") if pair)
        refs = []
        for (k, ns, name), obj in sorted(self.objects.items()):
            labels = (obj.get("metadata") or {}).get("labels") or {}
            if k == kind and ns == namespace and all(labels.get(key) == value for key, value in wanted.items()):
                refs.append(ChildRef(api_version, kind, ns, name, _owner_uids(obj)))
        return refs

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        self._check(kind)
        if self.objects.pop((kind, namespace, name), None) is not None:
            self.deleted.append((kind, name))

    def patch_status(self, api_version: str, kind: str, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        found = self.objects.get((kind, namespace, name))
        if found is not None:
            found["status"] = {**(found.get("status") or {}), **copy.deepcopy(dict(status))}
