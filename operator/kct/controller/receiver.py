"""Reconciling one TelemetryReceiver, without kopf.

`reconcile_receiver` reads top to bottom: pause? -> parse the spec -> resolve the cluster and the
token -> build the desired children (pure, `kct.render`) -> server-side apply each -> prune children
no longer desired -> the output topic through the Admin API (partitions only grow) -> status. It is a
plain blocking function over two ports (`ChildrenClient` for Kubernetes, `TopicAdmin` for Kafka), so
unit tests drive it with in-memory fakes, and the kopf handlers (`kct.controller.receiver_handlers`)
run it in a thread and only translate its `Outcome` into a status patch, events and retries.

Ready is True only when the Deployment reports every wanted pod available *and* the topic exists.
On a cluster without nodes (the local stack), pods never start, so Ready stays False with reason
`RolloutInProgress` and a message saying how many pods are available: honest, and what Argo CD and
kstatus read as "progressing", not "failed".

Drift: every reconcile (including the periodic resync and the child watch) re-applies the whole
desired state with `force`, which restores changed fields and re-creates deleted children.
"""

from __future__ import annotations

import base64
import datetime as dt
import secrets
from collections.abc import Callable, Mapping
from typing import Any, Final

from pydantic import ValidationError

from kct.api.receiver import TelemetryReceiverSpec, parse_receiver_spec
from kct.api.subscription import KafkaConnection
from kct.controller.children import ApplyRefused, ChildrenClient, KindNotInstalled
from kct.controller.conditions import (
    ConditionType,
    Reason,
    find_condition,
    now_rfc3339,
    remove_condition,
    set_condition,
)
from kct.controller.resource import PAUSE_ANNOTATION, ResourceView
from kct.controller.subscription import (
    ConnectionProblem,
    Event,
    Outcome,
    format_validation_error,
)
from kct.kafka.errors import (
    InvalidClientMetricsConfigError,
    KafkaAdminError,
    KafkaNotAuthorizedError,
    KafkaUnreachableError,
)
from kct.kafka.topics import TopicAdmin, TopicState, plan_topic
from kct.render import CHILD_KINDS, render_children
from kct.render.names import ChildNames, owned_selector
from kct.render.params import ReceiverParams, receiver_config
from kct.render.receiver import pod_config_hash

__all__ = [
    "ReceiverResource",
    "TopicAdminFactory",
    "delete_receiver",
    "reconcile_receiver",
    "topic_configs",
]

# (connection from the spec or None for the default cluster, namespace) -> admin of that cluster
TopicAdminFactory = Callable[[KafkaConnection | None, str], TopicAdmin]
SPARK_KINDS: Final = frozenset({"SparkApplication", "ScheduledSparkApplication"})


class ReceiverResource(ResourceView):
    """The parts of a TelemetryReceiver body that reconciliation reads."""


def topic_configs(spec: TelemetryReceiverSpec) -> dict[str, str]:
    """Topic configs the spec pins (others stay at the broker's defaults)."""
    configs: dict[str, str] = {}
    if spec.topic.retention_ms is not None:
        configs["retention.ms"] = str(spec.topic.retention_ms)
    return configs


def _backoff(retry: int, base: float, maximum: float) -> float:
    return float(min(maximum, base * (2 ** min(retry, 16))))


def _existing_token(children: ChildrenClient, namespace: str, name: str) -> str | None:
    found = children.get("v1", "Secret", namespace, name)
    encoded = ((found or {}).get("data") or {}).get("token")
    if not encoded:
        return None
    try:
        return base64.b64decode(encoded).decode()
    except ValueError:
        return None


def _deployment_progress(deployment: Mapping[str, Any], want: int | None) -> tuple[bool, int, int, str]:
    """(available, replicas, readyReplicas, message) from a Deployment as the API server returned it."""
    status = deployment.get("status") or {}
    metadata = deployment.get("metadata") or {}
    replicas = int(status.get("replicas") or 0)
    ready = int(status.get("readyReplicas") or 0)
    available_replicas = int(status.get("availableReplicas") or 0)
    wanted = want if want is not None else int((deployment.get("spec") or {}).get("replicas") or 0)
    observed = int(status.get("observedGeneration") or 0) >= int(metadata.get("generation") or 0)
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    available_condition = conditions.get("Available", {}).get("status") == "True"
    updated = int(status.get("updatedReplicas") or 0)
    available = observed and available_condition and updated >= wanted and available_replicas >= wanted
    if available:
        message = f"{available_replicas}/{wanted} pods available"
    elif not observed:
        message = "the Deployment controller has not observed the latest generation yet"
    else:
        message = (
            f"{available_replicas}/{wanted} pods available, {updated} updated; waiting for the rollout "
            "(pods that never start, e.g. on a cluster without nodes or with an unpullable image, keep it here)"
        )
    return available, replicas, ready, message


def reconcile_receiver(
    resource: ReceiverResource,
    children: ChildrenClient,
    topic_admin_for: TopicAdminFactory,
    *,
    default_bootstrap: str | None = None,
    retry: int = 0,
    backoff_base: float = 2.0,
    backoff_max: float = 60.0,
    now: dt.datetime | None = None,
    new_token: Callable[[], str] = lambda: secrets.token_urlsafe(32),
) -> Outcome:
    """Make the children and the topic follow `resource`'s spec, and say how far that got."""
    generation = resource.generation
    names = ChildNames(resource.name)
    conditions: list[dict[str, Any]] = list(resource.status.get("conditions") or [])
    status: dict[str, Any] = {"observedGeneration": generation}
    events: list[Event] = []

    def condition(type_: str, ok: bool, reason: Reason, message: str) -> None:
        nonlocal conditions
        conditions = set_condition(conditions, type_, ok, reason, message, observed_generation=generation, now=now)

    def failed(reason: Reason, message: str, *, retry_after: float | None, warn: bool = True) -> Outcome:
        previous = find_condition(conditions, ConditionType.READY) or {}
        news = (previous.get("reason"), previous.get("message")) != (str(reason), message)
        condition(ConditionType.READY, False, reason, message)
        status["conditions"] = conditions
        # One Warning event per new problem, not one per resync.
        posted = (*events, Event("Warning", reason, message)) if warn and news else tuple(events)
        return Outcome(status, events=posted, retry_after=retry_after, error=message)

    if resource.paused:
        condition(
            ConditionType.RECONCILIATION_PAUSED,
            True,
            Reason.PAUSED,
            f"annotation {PAUSE_ANNOTATION}=true: children and topic are left alone",
        )
        return Outcome({"conditions": conditions})
    conditions = remove_condition(conditions, ConditionType.RECONCILIATION_PAUSED)

    # 1. Parse: the API server checked the schema and CEL rules; the models check the rest.
    try:
        spec = parse_receiver_spec(dict(resource.spec))
    except ValidationError as error:
        return failed(Reason.INVALID_SPEC, f"{format_validation_error(error)}; nothing was applied", retry_after=None)
    bootstrap = spec.kafka.bootstrap_servers if spec.kafka is not None else default_bootstrap
    if not bootstrap:
        return failed(
            Reason.KAFKA_CONNECTION_INVALID,
            "spec.kafka: not set and the operator has no default cluster (set KAFKA_BOOTSTRAP_SERVERS)",
            retry_after=None,
        )
    try:
        receiver_config(spec, bootstrap)
    except ValueError as error:
        return failed(Reason.INVALID_SPEC, f"{error}; nothing was applied", retry_after=None)

    # 2. Desired state.
    token: str | None = None
    auth = spec.receiver.auth
    if auth.enabled and auth.token_secret_ref is None:
        try:
            token = _existing_token(children, resource.namespace, names.token_secret) or new_token()
        except ApplyRefused as error:
            return failed(Reason.APPLY_FAILED, str(error), retry_after=_backoff(retry, backoff_base, backoff_max))
    params = ReceiverParams(resource.name, resource.namespace, resource.uid, spec, bootstrap, generated_token=token)
    desired = render_children(params)

    # 3. Apply (server-side, forced: drift on our fields is reverted).
    applied: dict[str, dict[str, Any]] = {}
    spark_missing = False
    for manifest in desired:
        kind = str(manifest["kind"])
        try:
            applied[kind] = children.apply(manifest)
        except KindNotInstalled as error:
            if kind not in SPARK_KINDS:
                return failed(Reason.APPLY_FAILED, str(error), retry_after=_backoff(retry, backoff_base, backoff_max))
            spark_missing = True
        except ApplyRefused as error:
            return failed(Reason.APPLY_FAILED, str(error), retry_after=_backoff(retry, backoff_base, backoff_max))

    # 4. Prune what is labelled as ours, owned by this resource, and no longer desired.
    wanted = {(str(m["kind"]), str(m["metadata"]["name"])) for m in desired}
    selector = owned_selector(resource.name)
    for api_version, kind in CHILD_KINDS:
        try:
            found = children.list(api_version, kind, resource.namespace, selector)
        except KindNotInstalled:
            continue
        for child in found:
            if child.key not in wanted and resource.uid in child.owner_uids:
                children.delete(api_version, kind, resource.namespace, child.name)
                events.append(Event("Normal", "Pruned", f"deleted {kind} {child.name}: no longer in the spec"))

    aggregation = spec.aggregation
    if aggregation is None or not aggregation.enabled:
        conditions = remove_condition(conditions, ConditionType.AGGREGATION_READY)
    elif spark_missing:
        condition(
            ConditionType.AGGREGATION_READY,
            False,
            Reason.SPARK_OPERATOR_MISSING,
            "spec.aggregation: the sparkoperator.k8s.io/v1beta2 CRDs are not installed; install the kubeflow "
            "spark-operator and the aggregation is deployed on the next resync",
        )
    else:
        kind = "SparkApplication" if aggregation.mode == "streaming" else "ScheduledSparkApplication"
        condition(ConditionType.AGGREGATION_READY, True, Reason.RECONCILED, f"{kind} {names.aggregation} applied")

    deployment = applied.get("Deployment", {})
    autoscaling = spec.autoscaling
    want = None if autoscaling is not None and autoscaling.enabled else spec.replicas
    available, replicas, ready_replicas, rollout = _deployment_progress(deployment, want)
    ref = params.token_ref
    status.update(
        {
            "replicas": replicas,
            "readyReplicas": ready_replicas,
            "endpoint": params.endpoint,
            "configHash": pod_config_hash(params),
            "children": [f"{m['kind']}/{m['metadata']['name']}" for m in desired if m["kind"] in applied],
        }
    )
    if ref is not None:
        status["tokenSecret"] = f"{ref.name}/{ref.key}"

    # 5. The topic (after the children: a Kafka outage must not keep the Deployment from being fixed).
    topic = spec.topic
    try:
        admin = topic_admin_for(spec.kafka, resource.namespace)
        actual = admin.describe_topic(topic.name)
        plan = plan_topic(topic.partitions, topic_configs(spec), actual)
        if plan.create:
            admin.create_topic(topic.name, topic.partitions, topic.replication_factor, topic_configs(spec))
            events.append(
                Event(
                    "Normal",
                    "TopicCreated",
                    f"created topic {topic.name!r} with {topic.partitions} partitions on {bootstrap}",
                )
            )
        if plan.grow_to is not None:
            admin.grow_partitions(topic.name, plan.grow_to)
            events.append(
                Event("Normal", "PartitionsAdded", f"topic {topic.name!r} grown to {plan.grow_to} partitions")
            )
        if plan.set_configs:
            admin.alter_topic_configs(topic.name, plan.set_configs)
        if plan.changes:
            actual = admin.describe_topic(topic.name) or TopicState(topic.name, topic.partitions, 0)
    except ConnectionProblem as error:
        return failed(
            Reason.KAFKA_CONNECTION_INVALID,
            f"spec.kafka: {error}",
            retry_after=_backoff(retry, backoff_base * 5, backoff_max),
        )
    except InvalidClientMetricsConfigError as error:
        message = f"spec.topic: the broker refused topic {topic.name!r}: {error}"
        condition(ConditionType.TOPIC_READY, False, Reason.KAFKA_REJECTED, message)
        return failed(Reason.KAFKA_REJECTED, message, retry_after=_backoff(retry, backoff_base * 5, backoff_max))
    except KafkaAdminError as error:
        reason = {
            KafkaUnreachableError: Reason.KAFKA_UNREACHABLE,
            KafkaNotAuthorizedError: Reason.KAFKA_NOT_AUTHORIZED,
        }.get(type(error), Reason.KAFKA_ERROR)
        message = f"{reason}: {bootstrap}: {error}"
        condition(ConditionType.TOPIC_READY, False, reason, message)
        slow = 5.0 if reason is Reason.KAFKA_NOT_AUTHORIZED else 1.0
        return failed(reason, message, retry_after=_backoff(retry, backoff_base * slow, backoff_max), warn=False)

    partitions = actual.partitions if actual is not None else 0
    status["topic"] = {
        "name": topic.name,
        "partitions": partitions,
        "requestedPartitions": topic.partitions,
        "bootstrapServers": bootstrap,
    }
    condition(
        ConditionType.TOPIC_READY,
        True,
        Reason.RECONCILED,
        f"topic {topic.name!r} has {partitions} partitions on {bootstrap}",
    )
    if plan.shrink_refused is not None:
        has, asked = plan.shrink_refused
        message = (
            f"spec.topic.partitions: {asked} is below the topic's {has} partitions; Kafka cannot remove "
            f"partitions, so the topic keeps {has} (recreate the topic to shrink it)"
        )
        previous = find_condition(conditions, ConditionType.PARTITIONS_SHRINK_REFUSED)
        if previous is None or previous.get("status") != "True":  # warn once, not on every resync
            events.append(Event("Warning", Reason.PARTITIONS_SHRINK_REFUSED, message))
        condition(ConditionType.PARTITIONS_SHRINK_REFUSED, True, Reason.PARTITIONS_SHRINK_REFUSED, message)
    else:
        condition(
            ConditionType.PARTITIONS_SHRINK_REFUSED,
            False,
            Reason.PARTITIONS_MATCH,
            f"spec.topic.partitions: {topic.partitions} is in effect",
        )

    # 6. Ready: Deployment available and topic present.
    deployment_name = names.receiver
    if available:
        condition(
            ConditionType.READY,
            True,
            Reason.RECONCILED,
            f"Deployment {deployment_name}: {rollout}; topic {topic.name!r} ready; endpoint {params.endpoint}",
        )
    else:
        condition(ConditionType.READY, False, Reason.ROLLOUT_IN_PROGRESS, f"Deployment {deployment_name}: {rollout}")
    status["conditions"] = conditions
    status["lastSyncTime"] = now_rfc3339(now)
    return Outcome(status, events=tuple(events))


def delete_receiver(
    resource: ReceiverResource,
    topic_admin_for: TopicAdminFactory,
    *,
    retry: int = 0,
    backoff_base: float = 2.0,
    backoff_max: float = 60.0,
) -> Outcome:
    """Children go with the resource (ownerReferences, Kubernetes' garbage collector). The topic is
    deleted only when `spec.topic.deleteOnRemoval` is true and the resource is not paused."""
    if resource.paused:
        return Outcome({}, events=(Event("Normal", Reason.PAUSED, "paused: the topic is left in place"),))
    try:
        spec = parse_receiver_spec(dict(resource.spec))
    except ValidationError:
        return Outcome({})  # an invalid spec never created a topic it could claim to delete
    if not spec.topic.delete_on_removal:
        return Outcome({})
    try:
        topic_admin_for(spec.kafka, resource.namespace).delete_topic(spec.topic.name)
    except (KafkaAdminError, ConnectionProblem) as error:
        message = f"cannot delete topic {spec.topic.name!r}: {error}"
        return Outcome({}, retry_after=_backoff(retry, backoff_base, backoff_max), error=message)
    return Outcome({}, events=(Event("Normal", "TopicDeleted", f"deleted topic {spec.topic.name!r}"),))
