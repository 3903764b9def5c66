"""Reconciling one TelemetryReceiver, without kopf.

`reconcile_receiver` reads top to bottom, one named step each: pause? -> `parse_spec` -> `resolve_tls` (the
operator's CA and serving certificate, issued or renewed as `kct.render.certificates` decides) -> `resolve_token`
-> `resolve_kafka_secret_version` (the version of spec.kafka.secretRef's Secret, in the pods' config hash)
-> `plan_receiver` (pure: the desired children, rendered once by `kct.render`) -> `apply_children`
(server-side, forced) -> `prune_children` (ours, owned, no longer desired) -> `sync_topic` (through the
Admin API; partitions only grow; replication chosen at creation against the broker count, min ISR kept)
-> status, validated by the `TelemetryReceiverStatus` model before it is written. A step that cannot go
on raises `StopReconcile`, which becomes Ready=False with its reason. The function is plain and blocking
over two ports (`ChildrenClient` for Kubernetes, `TopicAdmin` for Kafka), so unit tests drive each step
and the whole with in-memory fakes, and the kopf handlers (`kct.controller.telemetry_receiver_handlers`) run
it in a thread and only translate its `Outcome` into a status patch, events and retries.

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
from dataclasses import dataclass
from typing import Any, Final

from pydantic import ValidationError

from kct.api.subscription import KafkaConnection
from kct.api.telemetry_receiver import TelemetryReceiverSpec, TelemetryReceiverStatus, parse_receiver_spec
from kct.controller.children import ApplyRefused, ChildrenClient, KindNotInstalled
from kct.controller.conditions import ConditionType, Reason, now_rfc3339
from kct.controller.export_status import export_condition, read_export_status
from kct.controller.kernel import (
    NO_DEFAULT_CLUSTER,
    ConditionTracker,
    ConnectionProblem,
    Event,
    Outcome,
    StopReconcile,
    backoff,
    stopped_outcome,
)
from kct.controller.reasons import KAFKA_PROBLEMS, apply_stop, connection_stop, invalid_spec_stop, kafka_stop
from kct.controller.resource import PAUSE_ANNOTATION, ResourceView
from kct.kafka.topics import (
    DEFAULT_REPLICATION_FACTOR,
    MIN_INSYNC_REPLICAS,
    Durability,
    TopicAdmin,
    TopicPlan,
    TopicState,
    plan_durability,
    plan_topic,
)
from kct.render import CHILD_KINDS, render_children
from kct.render.certificates import TlsMaterial, ensure_certificates, service_dns_names
from kct.render.names import CONFIG_HASH_ANNOTATION, ChildNames, owned_selector
from kct.render.params import ReceiverParams

__all__ = [
    "AppliedChildren",
    "ReceiverPlan",
    "ReceiverResource",
    "StopReconcile",
    "TopicAdminFactory",
    "TopicResult",
    "aggregation_status",
    "application_state",
    "apply_children",
    "delete_receiver",
    "parse_spec",
    "plan_receiver",
    "prune_children",
    "reconcile_receiver",
    "resolve_kafka_secret_version",
    "resolve_tls",
    "resolve_token",
    "sync_topic",
    "topic_configs",
]

# (connection from the spec or None for the default cluster, namespace) -> admin of that cluster
TopicAdminFactory = Callable[[KafkaConnection | None, str], TopicAdmin]
SPARK_KINDS: Final = frozenset({"SparkApplication", "ScheduledSparkApplication"})


class ReceiverResource(ResourceView):
    """The parts of a TelemetryReceiver body that reconciliation reads."""


def topic_configs(spec: TelemetryReceiverSpec, durability: Durability | None = None) -> dict[str, str]:
    """Topic configs the spec pins (others stay at the broker's defaults): its retention, and the min ISR
    `durability` decided (none when it was refused: the topic's own value is left alone)."""
    configs: dict[str, str] = {}
    if spec.topic.retention_ms is not None:
        configs["retention.ms"] = str(spec.topic.retention_ms)
    if durability is not None and durability.min_insync_replicas is not None:
        configs[MIN_INSYNC_REPLICAS] = str(durability.min_insync_replicas)
    return configs


# ----------------------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class ReceiverPlan:
    """Everything one reconcile wants, decided once before any write: the parsed spec, the cluster and
    the rendered children. The rest of the reconcile reads its decisions (replicas, config hash) from
    here instead of deciding again."""

    params: ReceiverParams
    children: tuple[dict[str, Any], ...]

    @property
    def spec(self) -> TelemetryReceiverSpec:
        return self.params.spec

    @property
    def bootstrap(self) -> str:
        return self.params.bootstrap_servers

    @property
    def names(self) -> ChildNames:
        return self.params.names

    @property
    def wanted(self) -> frozenset[tuple[str, str]]:
        """(kind, name) of every desired child: what pruning keeps."""
        return frozenset((str(m["kind"]), str(m["metadata"]["name"])) for m in self.children)

    def manifest(self, kind: str) -> Mapping[str, Any]:
        return next((m for m in self.children if m["kind"] == kind), {})

    @property
    def wanted_replicas(self) -> int | None:
        """The Deployment's replicas as rendered; None when the HorizontalPodAutoscaler owns the count."""
        replicas = (self.manifest("Deployment").get("spec") or {}).get("replicas")
        return int(replicas) if replicas is not None else None

    @property
    def config_hash(self) -> str:
        """The hash the pods carry (their template's annotation), so status shows what rolled them."""
        template = (self.manifest("Deployment").get("spec") or {}).get("template") or {}
        return str(((template.get("metadata") or {}).get("annotations") or {}).get(CONFIG_HASH_ANNOTATION, ""))


def parse_spec(resource: ReceiverResource, default_bootstrap: str | None) -> tuple[TelemetryReceiverSpec, str]:
    """The spec as a strict model, and the output topic's cluster (spec.kafka or the operator's default).
    The API server checked the schema and CEL rules; the models check the rest."""
    try:
        spec = parse_receiver_spec(dict(resource.spec))
    except ValidationError as error:
        raise invalid_spec_stop(error, untouched="nothing was applied") from None
    bootstrap = spec.kafka.bootstrap_servers if spec.kafka is not None else default_bootstrap
    if not bootstrap:
        raise connection_stop(ConnectionProblem(NO_DEFAULT_CLUSTER))
    return spec, bootstrap


def _existing_token(children: ChildrenClient, namespace: str, name: str) -> str | None:
    found = children.get("v1", "Secret", namespace, name)
    encoded = ((found or {}).get("data") or {}).get("token")
    if not encoded:
        return None
    try:
        return base64.b64decode(encoded).decode()
    except ValueError:
        return None


def resolve_token(
    resource: ReceiverResource,
    spec: TelemetryReceiverSpec,
    children: ChildrenClient,
    new_token: Callable[[], str],
) -> str | None:
    """The push token of the generated Secret (kept across reconciles, made once); None when auth is off
    or the user names their own Secret."""
    auth = spec.receiver.auth
    if not auth.enabled or auth.token_secret_ref is not None:
        return None
    try:
        return _existing_token(children, resource.namespace, ChildNames(resource.name).token_secret) or new_token()
    except ApplyRefused as error:
        raise apply_stop(error) from None


def _secret_strings(children: ChildrenClient, namespace: str, name: str) -> dict[str, str]:
    """A Secret's data, decoded; keys that are not base64 UTF-8 are left out (and so re-issued)."""
    found = children.get("v1", "Secret", namespace, name)
    decoded: dict[str, str] = {}
    for key, value in ((found or {}).get("data") or {}).items():
        try:
            decoded[key] = base64.b64decode(value).decode()
        except (ValueError, TypeError):
            continue
    return decoded


def resolve_tls(
    resource: ReceiverResource, spec: TelemetryReceiverSpec, children: ChildrenClient, now: dt.datetime
) -> TlsMaterial | None:
    """The operator's CA and serving certificate as they should be now (`tls.mode: issued`): what the owned
    Secrets hold, renewed or issued where `kct.render.certificates.plan_certificates` says so; None for the
    other modes. Runs on every reconcile, so the periodic resync renews before expiry."""
    tls = spec.receiver.tls
    if tls.mode != "issued":
        return None
    names = ChildNames(resource.name)
    try:
        ca_data = _secret_strings(children, resource.namespace, names.ca_secret)
        serving_data = _secret_strings(children, resource.namespace, names.tls_secret)
    except ApplyRefused as error:
        raise apply_stop(error) from None
    dns_names = service_dns_names(names.receiver, resource.namespace)
    ca_name = f"kct {resource.namespace}/{resource.name}"
    return ensure_certificates(now, tls.issued, dns_names, ca_data, serving_data, ca_name)


def resolve_kafka_secret_version(
    resource: ReceiverResource, spec: TelemetryReceiverSpec, children: ChildrenClient
) -> str | None:
    """resourceVersion of spec.kafka.secretRef's Secret (None: no Secret named, or not there yet: the topic step
    reports a missing one), so pods that read it at start roll when it changes."""
    name = None if spec.kafka is None or spec.kafka.secret_ref is None else spec.kafka.secret_ref.name
    if name is None:
        return None
    try:
        found = children.get("v1", "Secret", resource.namespace, name)
    except ApplyRefused as error:
        raise apply_stop(error) from None
    version = ((found or {}).get("metadata") or {}).get("resourceVersion")
    return str(version) if version else None


def plan_receiver(
    resource: ReceiverResource, spec: TelemetryReceiverSpec, bootstrap: str, token: str | None,
    tls: TlsMaterial | None = None, *, kafka_secret_version: str | None = None,
) -> ReceiverPlan:
    """The desired children, rendered once (pure: no I/O)."""
    params = ReceiverParams(resource.name, resource.namespace, resource.uid, spec, bootstrap, generated_token=token,
                            tls=tls, kafka_secret_version=kafka_secret_version)
    try:
        children = tuple(render_children(params))
    except ValueError as error:  # a setting the receiver's own config model refuses
        raise invalid_spec_stop(error, untouched="nothing was applied") from None
    return ReceiverPlan(params, children)


# ---------------------------------------------------------------------------------- children


@dataclass(frozen=True)
class AppliedChildren:
    """The children as the API server returned them, by kind; whether the spark-operator's CRDs are absent."""

    bodies: dict[str, dict[str, Any]]
    spark_missing: bool = False


def apply_children(plan: ReceiverPlan, children: ChildrenClient) -> AppliedChildren:
    """Server-side apply every desired child, forced: drift on our fields is reverted. A missing
    spark-operator only skips the Spark objects; anything else refused stops the reconcile."""
    bodies: dict[str, dict[str, Any]] = {}
    spark_missing = False
    for manifest in plan.children:
        kind = str(manifest["kind"])
        try:
            bodies[kind] = children.apply(manifest)
        except KindNotInstalled as error:
            if kind not in SPARK_KINDS:
                raise apply_stop(error) from None
            spark_missing = True
        except ApplyRefused as error:
            raise apply_stop(error) from None
    return AppliedChildren(bodies, spark_missing)


def prune_children(resource: ReceiverResource, plan: ReceiverPlan, children: ChildrenClient) -> list[Event]:
    """Delete what carries our labels, is owned by this resource, and is no longer desired."""
    events: list[Event] = []
    wanted = plan.wanted
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
    return events


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


# ------------------------------------------------------------------------------------- topic


@dataclass(frozen=True)
class TopicResult:
    """The topic after `sync_topic`: its partitions, what the plan was, and what to tell the user.
    `durability`: its replication as decided against the brokers; `state`: the topic as last described."""

    partitions: int
    plan: TopicPlan
    events: tuple[Event, ...] = ()
    durability: Durability | None = None
    state: TopicState | None = None


def _durability_stop(topic_name: str, durability: Durability) -> StopReconcile:
    """The topic cannot be created as the spec asks: not retried (the resync looks again, e.g. once brokers
    were added); TopicReady goes False with Ready."""
    message = f"spec.topic.{durability.refused}; topic {topic_name!r} is not created"
    return StopReconcile(Reason.REPLICATION_UNSATISFIABLE, message, also=ConditionType.TOPIC_READY)


def sync_topic(plan: ReceiverPlan, admin_for: TopicAdminFactory, namespace: str) -> TopicResult:
    """Create the topic with the replication the spec and the broker count allow, grow its partitions and
    converge its configs (min ISR included: drift is reverted); never shrink it."""
    topic = plan.spec.topic
    events: list[Event] = []
    try:
        admin = admin_for(plan.spec.kafka, namespace)
        actual = admin.describe_topic(topic.name)
        durability = plan_durability(topic.replication_factor, topic.min_insync_replicas, admin.broker_count(),
                                     actual)
        if durability.refused is not None:
            raise _durability_stop(topic.name, durability)
        configs = topic_configs(plan.spec, durability)
        topic_plan = plan_topic(topic.partitions, configs, actual)
        if topic_plan.create:
            admin.create_topic(topic.name, topic.partitions, durability.replication_factor, configs)
            message = (f"created topic {topic.name!r} with {topic.partitions} partitions, "
                       f"{durability.replication_factor} replicas each and {MIN_INSYNC_REPLICAS}="
                       f"{durability.min_insync_replicas} on {plan.bootstrap}")
            events.append(Event("Normal", "TopicCreated", message))
        if topic_plan.grow_to is not None:
            admin.grow_partitions(topic.name, topic_plan.grow_to)
            message = f"topic {topic.name!r} grown to {topic_plan.grow_to} partitions"
            events.append(Event("Normal", "PartitionsAdded", message))
        if topic_plan.set_configs:
            admin.alter_topic_configs(topic.name, topic_plan.set_configs)
        if topic_plan.changes:
            actual = admin.describe_topic(topic.name) or TopicState(topic.name, topic.partitions, 0)
    except KAFKA_PROBLEMS as error:
        # TopicReady goes False with Ready: whatever stopped the talk to Kafka, the topic was not checked.
        refused = f"spec.topic: the broker refused topic {topic.name!r}"
        raise kafka_stop(error, servers=plan.bootstrap, refused=refused, also=ConditionType.TOPIC_READY) from None
    partitions = actual.partitions if actual is not None else 0
    return TopicResult(partitions, topic_plan, tuple(events), durability, actual)


# ------------------------------------------------------------------------------------ status


def _status(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The status patch, checked against the CRD's status model (a field the schema lacks is a bug here,
    not something for the API server to prune silently)."""
    return TelemetryReceiverStatus.model_validate(dict(fields)).to_kube()


# The spark-operator's states of an application that failed (its restart policy may still retry it).
SPARK_FAILED_STATES: Final = frozenset({"FAILED", "SUBMISSION_FAILED", "FAILING", "INVALIDATING"})


def aggregation_status(plan: ReceiverPlan, applied: AppliedChildren) -> dict[str, Any] | None:
    """The aggregation's application and the state the spark-operator wrote into its status (the body the
    apply returned carries it), or None without an applied application."""
    aggregation = plan.spec.aggregation
    if aggregation is None or not aggregation.enabled:
        return None
    kind = "SparkApplication" if aggregation.mode == "streaming" else "ScheduledSparkApplication"
    body = applied.bodies.get(kind)
    if body is None:
        return None
    return {"application": f"{kind}/{plan.names.aggregation}", **application_state(body)}


def application_state(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the spark-operator reports in a (Scheduled)SparkApplication's status, as the owner's
    `status.aggregation` shows it: state, message and, for a schedule, its last run (absent fields left out)."""
    observed = body.get("status") or {}
    fields: dict[str, Any]
    if body.get("kind") == "ScheduledSparkApplication":
        fields = {"state": observed.get("scheduleState"), "message": observed.get("reason"),
                  "lastRun": observed.get("lastRunName")}
    else:
        state = observed.get("applicationState") or {}
        fields = {"state": state.get("state"), "message": state.get("errorMessage")}
    return {key: value for key, value in fields.items() if value}


def _aggregation_condition(plan: ReceiverPlan, applied: AppliedChildren, conditions: ConditionTracker) -> None:
    aggregation = plan.spec.aggregation
    if aggregation is None or not aggregation.enabled:
        conditions.remove(ConditionType.AGGREGATION_READY)
    elif applied.spark_missing:
        conditions.set(
            ConditionType.AGGREGATION_READY,
            False,
            Reason.SPARK_OPERATOR_MISSING,
            "spec.aggregation: the sparkoperator.k8s.io/v1beta2 CRDs are not installed; install the kubeflow "
            "spark-operator and the aggregation is deployed on the next resync",
        )
    else:
        status = aggregation_status(plan, applied) or {}
        kind, _, name = str(status.get("application", "/")).partition("/")
        state = status.get("state")
        message = f"{kind} {name} applied" + (f", {state}" if state else ", not yet seen by the spark-operator")
        if status.get("message"):
            message += f": {status['message']}"
        if state in SPARK_FAILED_STATES:
            conditions.set(ConditionType.AGGREGATION_READY, False, Reason.SPARK_APPLICATION_FAILED, message)
        else:
            conditions.set(ConditionType.AGGREGATION_READY, True, Reason.RECONCILED, message)


def _export_report(
    resource: ReceiverResource,
    plan: ReceiverPlan,
    aggregation: dict[str, Any] | None,
    children: ChildrenClient,
    conditions: ConditionTracker,
) -> None:
    """With `spec.aggregation.export`: the last run's export report into `aggregation["export"]` (the
    previous one kept while a run is in progress) and the `AggregationExported` condition."""
    spec = plan.spec.aggregation
    exporting = aggregation is not None and spec is not None and spec.export is not None
    export = None
    if exporting and aggregation is not None:
        previous = (resource.status.get("aggregation") or {}).get("export")
        export = read_export_status(children, resource.namespace, aggregation.get("lastRun"), previous)
        if export is not None:
            aggregation["export"] = export
    export_condition(export, exporting, conditions)


def _children_status(plan: ReceiverPlan, applied: AppliedChildren) -> dict[str, Any]:
    _, replicas, ready_replicas, _ = _deployment_progress(applied.bodies.get("Deployment", {}), plan.wanted_replicas)
    fields: dict[str, Any] = {
        "replicas": replicas,
        "readyReplicas": ready_replicas,
        "endpoint": plan.params.endpoint,
        "configHash": plan.config_hash,
        "children": [f"{m['kind']}/{m['metadata']['name']}" for m in plan.children if m["kind"] in applied.bodies],
    }
    ref = plan.params.token_ref
    if ref is not None:
        fields["tokenSecret"] = f"{ref.name}/{ref.key}"
    tls = _tls_status(plan.params)
    if tls is not None:
        fields["tls"] = tls
    return fields


def _tls_status(params: ReceiverParams) -> dict[str, Any] | None:
    """status.tls: where brokers find the CA bundle, and the issued certificates' expiry."""
    bundle, serving = params.ca_bundle_ref, params.serving_secret
    if bundle is None or serving is None:
        return None
    fields: dict[str, Any] = {"mode": params.spec.receiver.tls.mode, "caBundleSecret": f"{bundle.name}/{bundle.key}",
                              "servingSecret": serving}
    issued = params.issued_tls
    if issued is not None:
        fields |= {"notAfter": now_rfc3339(issued.serving_not_after), "caNotAfter": now_rfc3339(issued.ca_not_after)}
    return fields


def _topic_conditions(plan: ReceiverPlan, topic: TopicResult, conditions: ConditionTracker) -> list[Event]:
    """TopicReady and PartitionsShrinkRefused (warned once, not on every resync)."""
    spec_topic = plan.spec.topic
    message = f"topic {spec_topic.name!r} has {topic.partitions} partitions on {plan.bootstrap}"
    conditions.set(ConditionType.TOPIC_READY, True, Reason.RECONCILED, message)
    if topic.plan.shrink_refused is None:
        message = f"spec.topic.partitions: {spec_topic.partitions} is in effect"
        conditions.set(ConditionType.PARTITIONS_SHRINK_REFUSED, False, Reason.PARTITIONS_MATCH, message)
        return []
    has, asked = topic.plan.shrink_refused
    message = (
        f"spec.topic.partitions: {asked} is below the topic's {has} partitions; Kafka cannot remove "
        f"partitions, so the topic keeps {has} (recreate the topic to shrink it)"
    )
    previous = conditions.find(ConditionType.PARTITIONS_SHRINK_REFUSED)
    warn = previous is None or previous.get("status") != "True"
    conditions.set(ConditionType.PARTITIONS_SHRINK_REFUSED, True, Reason.PARTITIONS_SHRINK_REFUSED, message)
    return [Event("Warning", Reason.PARTITIONS_SHRINK_REFUSED, message)] if warn else []


def _replication_condition(plan: ReceiverPlan, topic: TopicResult, conditions: ConditionTracker) -> list[Event]:
    """ReplicationFactorDiffers: an existing topic whose replication is not the spec's (Kafka changes it by
    reassigning partitions, not by config), or on which the spec's min ISR cannot be set; warned once."""
    durability = topic.durability
    if durability is None:
        return []
    spec_topic = plan.spec.topic
    problems: list[str] = []
    reason = Reason.REPLICATION_MATCHES
    if durability.replication_differs is not None:
        has, asked = durability.replication_differs
        defaulted = spec_topic.replication_factor is None
        default = f" (the default: min({DEFAULT_REPLICATION_FACTOR}, brokers))" if defaulted else ""
        problems.append(
            f"spec.topic.replicationFactor: topic {spec_topic.name!r} has {has} replicas per partition, the spec "
            f"asks for {asked}{default} on {durability.brokers} broker(s); Kafka does not change an existing "
            f"topic's replication by config, so it keeps {has} (reassign its partitions to change it)")
        reason = Reason.REPLICATION_FACTOR_DIFFERS
    if durability.min_insync_refused is not None:
        asked, replicas = durability.min_insync_refused
        problems.append(
            f"spec.topic.minInsyncReplicas: {asked} is above the topic's {replicas} replicas; it must not exceed "
            "them (no write could be acknowledged), so the topic's own min.insync.replicas is kept")
        reason = Reason.MIN_INSYNC_ABOVE_REPLICAS
    if not problems:
        message = (f"topic {spec_topic.name!r}: {durability.replication_factor} replicas per partition, "
                   f"{MIN_INSYNC_REPLICAS}={durability.min_insync_replicas}, as the spec asks")
        conditions.set(ConditionType.REPLICATION_FACTOR_DIFFERS, False, reason, message)
        return []
    message = "; ".join(problems)
    previous = conditions.find(ConditionType.REPLICATION_FACTOR_DIFFERS)
    warn = previous is None or (previous.get("status"), previous.get("reason")) != ("True", str(reason))
    conditions.set(ConditionType.REPLICATION_FACTOR_DIFFERS, True, reason, message)
    return [Event("Warning", reason, message)] if warn else []


def _topic_status(spec: TelemetryReceiverSpec, bootstrap: str, topic: TopicResult) -> dict[str, Any]:
    """status.topic: what the broker has next to what the spec asks."""
    fields: dict[str, Any] = {
        "name": spec.topic.name,
        "partitions": topic.partitions,
        "requestedPartitions": spec.topic.partitions,
        "bootstrapServers": bootstrap,
    }
    durability = topic.durability
    if durability is not None:
        asked = durability.replication_differs[1] if durability.replication_differs else durability.replication_factor
        fields |= {"replicationFactor": durability.replication_factor, "requestedReplicationFactor": asked,
                   "brokers": durability.brokers}
    isr = (topic.state.configs if topic.state is not None else {}).get(MIN_INSYNC_REPLICAS)
    if isr is not None and isr.isdigit():
        fields["minInsyncReplicas"] = int(isr)
    return fields


def _ready_condition(plan: ReceiverPlan, applied: AppliedChildren, conditions: ConditionTracker) -> None:
    """Ready: the Deployment has every wanted pod available and the topic is present."""
    available, _, _, rollout = _deployment_progress(applied.bodies.get("Deployment", {}), plan.wanted_replicas)
    deployment = plan.names.receiver
    if available:
        message = (
            f"Deployment {deployment}: {rollout}; topic {plan.spec.topic.name!r} ready; endpoint {plan.params.endpoint}"
        )
        conditions.set(ConditionType.READY, True, Reason.RECONCILED, message)
    else:
        conditions.set(ConditionType.READY, False, Reason.ROLLOUT_IN_PROGRESS, f"Deployment {deployment}: {rollout}")


# --------------------------------------------------------------------------------- reconcile


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
    conditions = ConditionTracker(resource.status.get("conditions"), resource.generation, now)
    if resource.paused:
        message = f"annotation {PAUSE_ANNOTATION}=true: children and topic are left alone"
        conditions.set(ConditionType.RECONCILIATION_PAUSED, True, Reason.PAUSED, message)
        # The pause is not a new observation of the spec: observedGeneration stays where it was.
        return Outcome(_status({"conditions": conditions.items}))
    conditions.remove(ConditionType.RECONCILIATION_PAUSED)
    status: dict[str, Any] = {"observedGeneration": resource.generation}
    events: list[Event] = []

    def retry_in(scale: float) -> float:
        return backoff(retry, backoff_base * scale, backoff_max)

    try:
        spec, bootstrap = parse_spec(resource, default_bootstrap)
        tls = resolve_tls(resource, spec, children, now or dt.datetime.now(dt.UTC))
        events += [Event("Normal", "CertificateIssued", message) for message in (tls.events if tls else ())]
        plan = plan_receiver(resource, spec, bootstrap, resolve_token(resource, spec, children, new_token), tls,
                             kafka_secret_version=resolve_kafka_secret_version(resource, spec, children))
        applied = apply_children(plan, children)
        events += prune_children(resource, plan, children)
        _aggregation_condition(plan, applied, conditions)
        status.update(_children_status(plan, applied))
        aggregation = aggregation_status(plan, applied)
        if aggregation is not None:
            status["aggregation"] = aggregation
        _export_report(resource, plan, aggregation, children, conditions)
        # The topic after the children: a Kafka outage must not keep the Deployment from being fixed.
        topic = sync_topic(plan, topic_admin_for, resource.namespace)
    except StopReconcile as stop:
        outcome = stopped_outcome(stop, conditions, status, events, retry_in)
        return Outcome(_status(outcome.status), outcome.events, outcome.retry_after, outcome.error)
    events += topic.events
    status["topic"] = _topic_status(spec, bootstrap, topic)
    events += _topic_conditions(plan, topic, conditions)
    events += _replication_condition(plan, topic, conditions)
    _ready_condition(plan, applied, conditions)
    status["conditions"] = conditions.items
    status["lastSyncTime"] = now_rfc3339(now)
    return Outcome(_status(status), events=tuple(events))


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
    except KAFKA_PROBLEMS as error:
        message = f"cannot delete topic {spec.topic.name!r}: {error}"
        return Outcome({}, retry_after=backoff(retry, backoff_base, backoff_max), error=message)
    return Outcome({}, events=(Event("Normal", "TopicDeleted", f"deleted topic {spec.topic.name!r}"),))
