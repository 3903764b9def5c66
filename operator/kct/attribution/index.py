"""Pods by IP address over time, and the owners above them: who held an address when a push arrived.

A push names only its source address; pods reuse addresses as they come and go. So each address keeps the
short history of pods that held it, each with its lifetime (the API server's creation time; the time the
receiver saw it go: deleted, or finished and so without an address). A push at time t belongs to the newest
pod created by t whose lifetime, stretched by a grace after its end, covers t: a replaced pod's last pushes
(still queued in the broker's plugin) stay its own, and once a new pod holds the address, pushes are the new
pod's. Pods on the host network share their node's address with everything else on the node: pushes from such
an address are ambiguous, never guessed.

Owners come from metadata alone: a pod's controller reference (ReplicaSet, StatefulSet, DaemonSet, Job), a
ReplicaSet's Deployment and a Job's CronJob from the ReplicaSet and Job indexes.

Writers (the watch threads, one per kind and namespace) take a lock; readers on the event loop do not: every
update replaces one immutable value in a dict (atomic), so a reader sees an address's history before or after
an event, never half of one. What is
kept per pod is what the attributes need: a few interned strings.
"""

from __future__ import annotations

import ipaddress
import sys
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from kct.attribution.config import AttributionConfig, MetadataAttribute

__all__ = [
    "K8S_CRONJOB_NAME",
    "K8S_DAEMONSET_NAME",
    "K8S_DEPLOYMENT_NAME",
    "K8S_JOB_NAME",
    "K8S_NAMESPACE_NAME",
    "K8S_NODE_NAME",
    "K8S_POD_NAME",
    "K8S_POD_UID",
    "K8S_REPLICASET_NAME",
    "K8S_STATEFULSET_NAME",
    "Lookup",
    "PodIndex",
    "PodRecord",
    "canonical_address",
    "pod_record",
]

# OpenTelemetry semantic conventions, Kubernetes resource attributes.
K8S_NAMESPACE_NAME: Final = "k8s.namespace.name"
K8S_POD_NAME: Final = "k8s.pod.name"
K8S_POD_UID: Final = "k8s.pod.uid"
K8S_NODE_NAME: Final = "k8s.node.name"
K8S_REPLICASET_NAME: Final = "k8s.replicaset.name"
K8S_DEPLOYMENT_NAME: Final = "k8s.deployment.name"
K8S_STATEFULSET_NAME: Final = "k8s.statefulset.name"
K8S_DAEMONSET_NAME: Final = "k8s.daemonset.name"
K8S_JOB_NAME: Final = "k8s.job.name"
K8S_CRONJOB_NAME: Final = "k8s.cronjob.name"

_OWNER_ATTRIBUTE: Final = {
    "ReplicaSet": K8S_REPLICASET_NAME,
    "StatefulSet": K8S_STATEFULSET_NAME,
    "DaemonSet": K8S_DAEMONSET_NAME,
    "Job": K8S_JOB_NAME,
}
# Addresses keep at most this many ended pods (a history longer than any grace is of no use).
_HISTORY: Final = 4

Attributes = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class PodRecord:
    """What attribution keeps of a pod."""

    uid: str
    namespace: str
    name: str
    node: str
    ip: str
    host_network: bool
    created_ms: int
    owner_kind: str  # the controller reference's kind, "" when none
    owner_name: str
    selected: Attributes  # the configured labels and annotations, already named as attributes
    ended_ms: int | None = None  # when the receiver saw it deleted or finished (its address released)


@dataclass(frozen=True, slots=True)
class Lookup:
    """The index's answer for one address at one time."""

    outcome: Literal["pod", "ambiguous", "unknown"]
    attributes: Attributes = ()


_UNKNOWN: Final = Lookup("unknown")
_AMBIGUOUS: Final = Lookup("ambiguous")


def canonical_address(address: str) -> str:
    """One spelling per address: Java writes IPv6 in full (`0:0:0:0:0:0:0:1`), the API compressed (`::1`);
    an IPv4-mapped IPv6 address is its IPv4 address. IPv4 (no colon) is taken as is (the common, cheap case)."""
    if ":" not in address:
        return address
    try:
        parsed = ipaddress.IPv6Address(address.split("%", 1)[0])
    except ValueError:
        return address
    return str(parsed.ipv4_mapped or parsed.compressed)


def _timestamp_ms(value: object) -> int:
    if not isinstance(value, str) or not value:
        return 0
    return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)


def _controller(meta: Mapping[str, Any]) -> tuple[str, str]:
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller"):
            return sys.intern(str(ref.get("kind", ""))), sys.intern(str(ref.get("name", "")))
    return "", ""


def _selected(
    meta: Mapping[str, Any], labels: Iterable[MetadataAttribute], annotations: Iterable[MetadataAttribute]
) -> Attributes:
    out: list[tuple[str, str]] = []
    for source, wanted in ((meta.get("labels") or {}, labels), (meta.get("annotations") or {}, annotations)):
        for item in wanted:
            value = source.get(item.key)
            if isinstance(value, str):
                out.append((item.attribute, sys.intern(value)))
    return tuple(out)


def pod_record(body: Mapping[str, Any], config: AttributionConfig, now_ms: int) -> PodRecord | None:
    """The record of a pod as the API returns it; None while it has no address. A finished pod (Succeeded,
    Failed) released its address: it is recorded as ended now."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    ip = status.get("podIP")
    if not ip:
        return None
    owner_kind, owner_name = _controller(meta)
    finished = status.get("phase") in ("Succeeded", "Failed")
    return PodRecord(
        uid=str(meta.get("uid", "")),
        namespace=sys.intern(str(meta.get("namespace", ""))),
        name=str(meta.get("name", "")),
        node=sys.intern(str(spec.get("nodeName", ""))),
        ip=sys.intern(canonical_address(str(ip))),
        host_network=bool(spec.get("hostNetwork", False)),
        created_ms=_timestamp_ms(meta.get("creationTimestamp")),
        owner_kind=owner_kind,
        owner_name=owner_name,
        selected=_selected(meta, config.labels, config.annotations),
        ended_ms=now_ms if finished else None,
    )


class PodIndex:
    """Pods by address with their lifetimes; ReplicaSet -> Deployment and Job -> CronJob owners."""

    def __init__(self, config: AttributionConfig) -> None:
        self.config = config
        self._grace_ms = config.deleted_pod_grace_seconds * 1000
        self._skew_ms = config.clock_skew_seconds * 1000
        self._by_ip: dict[str, tuple[PodRecord, ...]] = {}  # oldest first
        self._ip_of: dict[str, str] = {}  # pod uid -> its address (to find it on deletion)
        self._replicaset_owner: dict[tuple[str, str], str] = {}  # (namespace, ReplicaSet) -> Deployment ("": none)
        self._job_owner: dict[tuple[str, str], str] = {}  # (namespace, Job) -> CronJob ("": none)
        self._write = threading.Lock()
        # pod uid -> (the record, its Deployment/CronJob, its attributes); written by readers, pruned by writers
        self._built: dict[str, tuple[PodRecord, str, Attributes]] = {}

    # -- writes (the watch thread) -------------------------------------------------------------------
    def upsert_pod(self, body: Mapping[str, Any], now_ms: int) -> None:
        with self._write:
            self._upsert_pod(body, now_ms)

    def _upsert_pod(self, body: Mapping[str, Any], now_ms: int) -> None:
        record = pod_record(body, self.config, now_ms)
        uid = str((body.get("metadata") or {}).get("uid", ""))
        if record is None:
            return
        previous_ip = self._ip_of.get(uid)
        if previous_ip is not None and previous_ip != record.ip:
            self._end(uid, previous_ip, now_ms)
        history = self._by_ip.get(record.ip, ())
        kept = tuple(p for p in history if p.uid != uid)
        old = next((p for p in history if p.uid == uid), None)
        if old is not None and old.ended_ms is not None and record.ended_ms is not None:
            record = _with_end(record, old.ended_ms)  # finished earlier: keep when it was first seen so
        # Every live pod stays (a node's address has as many hostNetwork pods as it runs); ended ones, a few.
        all_ended = [p for p in kept if p.ended_ms is not None]
        ended = all_ended[-_HISTORY:]
        for dropped in all_ended[:-_HISTORY]:
            self._built.pop(dropped.uid, None)
        live = [p for p in kept if p.ended_ms is None]
        self._by_ip[record.ip] = tuple(sorted((*live, *ended, record), key=lambda p: p.created_ms))
        self._ip_of[uid] = record.ip
        self._forget_expired(record.ip, now_ms)

    def delete_pod(self, body: Mapping[str, Any], now_ms: int) -> None:
        uid = str((body.get("metadata") or {}).get("uid", ""))
        with self._write:
            ip = self._ip_of.pop(uid, None)
            if ip is not None:
                self._end(uid, ip, now_ms)

    def replace_pods(self, bodies: Iterable[Mapping[str, Any]], now_ms: int, namespace: str | None = None) -> None:
        """A relist of `namespace` (None: all): the pods listed are its live ones; every other one of it ended
        now (its deletion was missed)."""
        with self._write:
            listed: set[str] = set()
            for body in bodies:
                listed.add(str((body.get("metadata") or {}).get("uid", "")))
                self._upsert_pod(body, now_ms)
            for uid, ip in list(self._ip_of.items()):
                if uid not in listed and (namespace is None or self._namespace_of(uid, ip) == namespace):
                    del self._ip_of[uid]
                    self._end(uid, ip, now_ms)

    def _namespace_of(self, uid: str, ip: str) -> str | None:
        return next((p.namespace for p in self._by_ip.get(ip, ()) if p.uid == uid), None)

    def upsert_owner(self, kind: str, body: Mapping[str, Any]) -> None:
        with self._write:
            self._upsert_owner(kind, body)

    def _upsert_owner(self, kind: str, body: Mapping[str, Any]) -> None:
        """A ReplicaSet or Job (metadata is enough): remember its own controller, if a Deployment/CronJob."""
        meta = body.get("metadata") or {}
        key = (sys.intern(str(meta.get("namespace", ""))), str(meta.get("name", "")))
        owner_kind, owner_name = _controller(meta)
        if kind == "ReplicaSet":
            self._replicaset_owner[key] = owner_name if owner_kind == "Deployment" else ""
        elif kind == "Job":
            self._job_owner[key] = owner_name if owner_kind == "CronJob" else ""

    def delete_owner(self, kind: str, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        with self._write:
            (self._replicaset_owner if kind == "ReplicaSet" else self._job_owner).pop(key, None)

    def replace_owners(self, kind: str, bodies: Iterable[Mapping[str, Any]], namespace: str | None = None) -> None:
        """A relist of `namespace`'s (None: every) ReplicaSets or Jobs."""
        owners = self._replicaset_owner if kind == "ReplicaSet" else self._job_owner
        with self._write:
            for key in [key for key in owners if namespace is None or key[0] == namespace]:
                del owners[key]
            for body in bodies:
                self._upsert_owner(kind, body)

    def _end(self, uid: str, ip: str, now_ms: int) -> None:
        history = self._by_ip.get(ip, ())
        self._by_ip[ip] = tuple(
            _with_end(p, now_ms) if p.uid == uid and p.ended_ms is None else p for p in history
        )
        self._forget_expired(ip, now_ms)

    def _forget_expired(self, ip: str, now_ms: int) -> None:
        history = self._by_ip.get(ip, ())
        live = tuple(p for p in history if p.ended_ms is None or now_ms < p.ended_ms + self._grace_ms)
        if len(live) != len(history):
            for gone in history:
                if gone not in live:
                    self._built.pop(gone.uid, None)
            if live:
                self._by_ip[ip] = live
            else:
                self._by_ip.pop(ip, None)

    def sweep(self, now_ms: int) -> None:
        """Forget pods ended longer than the grace ago (addresses no event touches again keep none)."""
        with self._write:
            self._sweep(now_ms)

    def _sweep(self, now_ms: int) -> None:
        for ip in [ip for ip, history in self._by_ip.items() if any(p.ended_ms is not None for p in history)]:
            self._forget_expired(ip, now_ms)

    # -- reads (the event loop) ------------------------------------------------------------------------
    def lookup(self, ip: str, at_ms: int) -> Lookup:
        """Who held `ip` at `at_ms` (receiver clock, epoch milliseconds)."""
        history = self._by_ip.get(canonical_address(ip))
        if not history:
            return _UNKNOWN
        if any(p.host_network and (p.ended_ms is None or at_ms < p.ended_ms + self._grace_ms) for p in history):
            return _AMBIGUOUS
        for pod in reversed(history):  # newest first
            held = pod.ended_ms is None or at_ms < pod.ended_ms + self._grace_ms
            if held and pod.created_ms - self._skew_ms <= at_ms:
                return Lookup("pod", self._attributes(pod))
        return _UNKNOWN

    def _attributes(self, pod: PodRecord) -> Attributes:
        """The pod's attributes, built once per pod and owner (the same tuple push after push, which also
        keeps the encoded form cached downstream)."""
        owner = ""
        if pod.owner_kind == "ReplicaSet":
            owner = self._replicaset_owner.get((pod.namespace, pod.owner_name), "")
        elif pod.owner_kind == "Job":
            owner = self._job_owner.get((pod.namespace, pod.owner_name), "")
        cached = self._built.get(pod.uid)
        if cached is not None and cached[0] is pod and cached[1] == owner:
            return cached[2]
        attributes = self._build_attributes(pod)
        self._built[pod.uid] = (pod, owner, attributes)
        return attributes

    def _build_attributes(self, pod: PodRecord) -> Attributes:
        attrs: list[tuple[str, str]] = [
            (K8S_NAMESPACE_NAME, pod.namespace),
            (K8S_POD_NAME, pod.name),
            (K8S_POD_UID, pod.uid),
        ]
        if pod.node:
            attrs.append((K8S_NODE_NAME, pod.node))
        owner_attribute = _OWNER_ATTRIBUTE.get(pod.owner_kind)
        if owner_attribute is not None:
            attrs.append((owner_attribute, pod.owner_name))
            key = (pod.namespace, pod.owner_name)
            if pod.owner_kind == "ReplicaSet" and self._replicaset_owner.get(key):
                attrs.append((K8S_DEPLOYMENT_NAME, self._replicaset_owner[key]))
            elif pod.owner_kind == "Job" and self._job_owner.get(key):
                attrs.append((K8S_CRONJOB_NAME, self._job_owner[key]))
        attrs.extend(pod.selected)
        return tuple(attrs)

    def __len__(self) -> int:
        """Pods indexed (live and recently ended)."""
        return sum(len(h) for h in self._by_ip.values())

    def owners(self) -> int:
        return len(self._replicaset_owner) + len(self._job_owner)


def _with_end(pod: PodRecord, ended_ms: int) -> PodRecord:
    return PodRecord(
        pod.uid, pod.namespace, pod.name, pod.node, pod.ip, pod.host_network, pod.created_ms,
        pod.owner_kind, pod.owner_name, pod.selected, ended_ms,
    )
