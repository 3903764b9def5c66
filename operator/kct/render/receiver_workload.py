"""Builders of the receiver's Kubernetes objects, one pure function per kind.

Each takes `ReceiverParams` and returns a manifest dict (or None when the spec does not want that
object), ready for server-side apply: only the fields we manage, labels and an ownerReference to the
TelemetryReceiver. Nothing here talks to an API server.
"""

from __future__ import annotations

import base64
import copy
from typing import Any

from kct.render.attribution_rbac import receiver_service_account
from kct.render.certificates import CA_CERT_KEY, CA_KEY_KEY, PREVIOUS_CA_CERT_KEY, PREVIOUS_CA_KEY_KEY
from kct.render.names import COMPONENT_RECEIVER, CONFIG_HASH_ANNOTATION, child_labels, selector_labels
from kct.render.params import (
    CLIENT_CA_DIR,
    KAFKA_CLIENT_DIR,
    OTLP_PORT,
    RECEIVER_CONFIG_DIR,
    RECEIVER_CONFIG_KEY,
    TLS_DIR,
    TOKEN_DIR,
    ReceiverParams,
    config_hash,
    kafka_secret_name,
    kafka_secret_parts,
    producer_secret_env,
    receiver_config_yaml,
)

__all__ = [
    "render_ca_bundle_secret",
    "render_ca_secret",
    "render_receiver_configmap",
    "render_receiver_deployment",
    "render_receiver_hpa",
    "render_receiver_network_policy",
    "render_receiver_pdb",
    "render_receiver_service",
    "render_tls_secret",
    "render_token_secret",
]

PORT_NAME = "http-otlp"
RUN_AS_USER = 10001  # the runtime image's user (Dockerfile)
PRE_STOP_SECONDS = 5  # the preStop pause before SIGTERM (see _container)


def _metadata(params: ReceiverParams, name: str, component: str = COMPONENT_RECEIVER) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": params.namespace,
        "labels": child_labels(params.name, component, params.version),
        "ownerReferences": [params.owner_reference()],
    }


def render_receiver_configmap(params: ReceiverParams) -> dict[str, Any]:
    """The receiver's config file (`kct receiver --config`), from the receiver's own config model."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(params, params.names.receiver),
        "data": {RECEIVER_CONFIG_KEY: receiver_config_yaml(params)},
    }


def render_token_secret(params: ReceiverParams) -> dict[str, Any] | None:
    """The generated push token; None when auth is off or the spec references its own Secret."""
    auth = params.spec.receiver.auth
    if not auth.enabled or auth.token_secret_ref is not None or params.generated_token is None:
        return None
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(params, params.names.token_secret),
        "type": "Opaque",
        "data": {"token": base64.b64encode(params.generated_token.encode()).decode()},
    }


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def render_ca_secret(params: ReceiverParams) -> dict[str, Any] | None:
    """The operator's CA (and the previous one through a renewal's overlap), with keys: mounted nowhere, read
    only by the operator. None unless `tls.mode` is issued."""
    material = params.issued_tls
    if material is None:
        return None
    data = {CA_CERT_KEY: _b64(material.ca.cert_pem), CA_KEY_KEY: _b64(material.ca.key_pem)}
    if material.previous_ca is not None:
        data |= {PREVIOUS_CA_CERT_KEY: _b64(material.previous_ca.cert_pem),
                 PREVIOUS_CA_KEY_KEY: _b64(material.previous_ca.key_pem)}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": _metadata(params, params.names.ca_secret),
            "type": "Opaque", "data": data}


def render_tls_secret(params: ReceiverParams) -> dict[str, Any] | None:
    """The receivers' serving certificate as cert-manager writes one (`tls.crt`, `tls.key`, `ca.crt`)."""
    material = params.issued_tls
    if material is None:
        return None
    data = {"tls.crt": _b64(material.serving.cert_pem), "tls.key": _b64(material.serving.key_pem),
            "ca.crt": _b64(material.bundle)}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": _metadata(params, params.names.tls_secret),
            "type": "kubernetes.io/tls", "data": data}


def render_ca_bundle_secret(params: ReceiverParams) -> dict[str, Any] | None:
    """The trust bundle for the brokers (`ca.crt`: the CA, and the previous one through an overlap), apart
    from any private key so reading it grants nothing more."""
    material = params.issued_tls
    if material is None:
        return None
    return {"apiVersion": "v1", "kind": "Secret", "metadata": _metadata(params, params.names.ca_bundle_secret),
            "type": "Opaque", "data": {"ca.crt": _b64(material.bundle)}}


def pod_config_hash(params: ReceiverParams) -> str:
    """Changes whenever the pods must restart to see a change: the config file, the token's source (the
    token itself is not in it: a changed token reaches running pods through the mounted file), and the version
    of the Kafka Secret (read once at start)."""
    ref = params.token_ref
    return config_hash(receiver_config_yaml(params), f"{ref.name}/{ref.key}" if ref else "",
                       *kafka_secret_parts(params))


def _probe(path: str, *, period: int, failures: int, tls: bool) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": PORT_NAME, "scheme": "HTTPS" if tls else "HTTP"},
        "periodSeconds": period,
        "timeoutSeconds": 2,
        "failureThreshold": failures,
    }


def _container(params: ReceiverParams) -> dict[str, Any]:
    spec = params.spec
    tls = spec.receiver.tls.enabled
    container: dict[str, Any] = {
        "name": "receiver",
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": ["kct"],
        "args": ["receiver", "--config", f"{RECEIVER_CONFIG_DIR}/{RECEIVER_CONFIG_KEY}"],
        "ports": [{"name": PORT_NAME, "containerPort": OTLP_PORT, "protocol": "TCP"}],
        "livenessProbe": _probe("/healthz", period=10, failures=3, tls=tls),
        "readinessProbe": _probe("/readyz", period=10, failures=2, tls=tls),
        # Up to a minute to start (Kafka metadata at startup) before liveness counts.
        "startupProbe": _probe("/healthz", period=2, failures=30, tls=tls),
        # A terminating pod leaves the Service's endpoints only after kube-proxy on every node has caught up;
        # until then new connections still arrive. Serving normally for a few seconds before SIGTERM (the
        # kubelet's own sleep action: no binary needed in the image) means none of them is refused.
        "lifecycle": {"preStop": {"sleep": {"seconds": PRE_STOP_SECONDS}}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "config", "mountPath": RECEIVER_CONFIG_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    if params.token_ref is not None:
        container["volumeMounts"].append({"name": "token", "mountPath": TOKEN_DIR, "readOnly": True})
    if params.serving_secret is not None:
        container["volumeMounts"].append({"name": "tls", "mountPath": TLS_DIR, "readOnly": True})
    if spec.receiver.tls.client_auth is not None:
        container["volumeMounts"].append({"name": "client-ca", "mountPath": CLIENT_CA_DIR, "readOnly": True})
    if kafka_secret_name(spec) is not None:
        container["volumeMounts"].append({"name": "kafka-client", "mountPath": KAFKA_CLIENT_DIR, "readOnly": True})
    env: list[dict[str, Any]] = []
    secret_properties = spec.receiver.producer_properties_from_secrets
    for prop, variable in producer_secret_env(spec).items():
        source = secret_properties[prop]
        env.append({"name": variable, "valueFrom": {"secretKeyRef": {"name": source.name, "key": source.key}}})
    if env:
        container["env"] = env
    container["resources"] = spec.resources.to_kube()
    return container


def render_receiver_deployment(params: ReceiverParams) -> dict[str, Any]:
    """Non-root, read-only root filesystem, probes on /healthz and /readyz, and a config-hash
    annotation on the pod template so a config change rolls the pods."""
    spec = params.spec
    selector = selector_labels(params.name, COMPONENT_RECEIVER)
    pod_spec: dict[str, Any] = {
        # The token only when attribution reads the API (the receiver calls it for nothing else).
        "automountServiceAccountToken": spec.receiver.attribution.enabled,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_USER,
            "runAsGroup": RUN_AS_USER,
            "fsGroup": RUN_AS_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        # Room for the preStop pause, then the receiver's own drain (in-flight pushes, producer flush).
        "terminationGracePeriodSeconds": PRE_STOP_SECONDS + spec.receiver.shutdown.drain_timeout_ms // 1000 + 10,
        "containers": [_container(params)],
        "volumes": [
            {"name": "config", "configMap": {"name": params.names.receiver}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
        ],
    }
    ref = params.token_ref
    if ref is not None:
        # A whole-volume mount (no subPath), so kubelet updates the file when the Secret changes; the
        # receiver re-reads it. Readable by the pod's fsGroup only.
        pod_spec["volumes"].append({
            "name": "token",
            "secret": {"secretName": ref.name, "items": [{"key": ref.key, "path": "token"}], "defaultMode": 0o440},
        })
    serving = params.serving_secret
    if serving is not None:
        # Whole-volume mounts again: kubelet swaps the files on rotation, the receiver reloads them.
        items = [{"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}]
        pod_spec["volumes"].append({"name": "tls", "secret": {"secretName": serving, "items": items,
                                                              "defaultMode": 0o440}})
    client_auth = spec.receiver.tls.client_auth
    if client_auth is not None:
        ca_ref = client_auth.ca_secret_ref
        pod_spec["volumes"].append({"name": "client-ca", "secret": {
            "secretName": ca_ref.name, "items": [{"key": ca_ref.key, "path": "ca.crt"}], "defaultMode": 0o440}})
    kafka_secret = kafka_secret_name(spec)
    if kafka_secret is not None:
        # The cluster's credentials and CA (spec.kafka.secretRef), one file per property: the receiver's config
        # names only the directory, so no value reaches the ConfigMap.
        pod_spec["volumes"].append({"name": "kafka-client",
                                    "secret": {"secretName": kafka_secret, "defaultMode": 0o440}})
    account = receiver_service_account(params)
    if account is not None:
        pod_spec["serviceAccountName"] = account
    if spec.node_selector:
        pod_spec["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        pod_spec["tolerations"] = [t.to_kube() for t in spec.tolerations]
    if spec.affinity:
        pod_spec["affinity"] = dict(spec.affinity)
    deployment_spec: dict[str, Any] = {
        "selector": {"matchLabels": selector},
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
        "template": {
            "metadata": {
                "labels": child_labels(params.name, COMPONENT_RECEIVER, params.version),
                "annotations": {
                    CONFIG_HASH_ANNOTATION: pod_config_hash(params),
                    "prometheus.io/scrape": str(
                        spec.receiver.observability.ingress
                        or spec.receiver.observability.pipeline
                        or spec.receiver.observability.sink
                    ).lower(),
                    "prometheus.io/port": str(OTLP_PORT),
                    "prometheus.io/scheme": "https" if spec.receiver.tls.enabled else "http",
                    "prometheus.io/path": spec.receiver.observability.metrics_path,
                },
            },
            "spec": pod_spec,
        },
    }
    if not _autoscaled(params):
        # With an HPA the replica count is the HPA's: leaving the field out hands it over under SSA.
        deployment_spec["replicas"] = spec.replicas
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(params, params.names.receiver),
        "spec": deployment_spec,
    }


def _autoscaled(params: ReceiverParams) -> bool:
    autoscaling = params.spec.autoscaling
    return autoscaling is not None and autoscaling.enabled


def render_receiver_service(params: ReceiverParams) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(params, params.names.receiver),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(params.name, COMPONENT_RECEIVER),
            "ports": [
                {
                    "name": PORT_NAME,
                    "port": OTLP_PORT,
                    "targetPort": PORT_NAME,
                    "protocol": "TCP",
                    "appProtocol": "https" if params.spec.receiver.tls.enabled else "http",
                },
            ],
        },
    }


def render_receiver_pdb(params: ReceiverParams) -> dict[str, Any] | None:
    budget = params.spec.pod_disruption_budget
    if not budget.enabled:
        return None
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(params, params.names.receiver),
        "spec": {
            "maxUnavailable": budget.max_unavailable,
            "selector": {"matchLabels": selector_labels(params.name, COMPONENT_RECEIVER)},
        },
    }


def render_receiver_hpa(params: ReceiverParams) -> dict[str, Any] | None:
    autoscaling = params.spec.autoscaling
    if autoscaling is None or not autoscaling.enabled:
        return None
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _metadata(params, params.names.receiver),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": params.names.receiver},
            "minReplicas": autoscaling.min_replicas,
            "maxReplicas": autoscaling.max_replicas,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {
                            "type": "Utilization",
                            "averageUtilization": autoscaling.target_cpu_utilization_percentage,
                        },
                    },
                }
            ],
        },
    }


def render_receiver_network_policy(params: ReceiverParams) -> dict[str, Any] | None:
    """Ingress to the OTLP port (which serves the metrics too) from `spec.networkPolicy.from` (the brokers)
    and `metricsFrom` (the scraper), from anyone when `from` is empty; every other port closed, egress
    untouched. A NetworkPolicy allows the union of its rules, so the scraper's rule is a second rule."""
    policy = params.spec.network_policy
    if not policy.enabled:
        return None
    port = [{"protocol": "TCP", "port": OTLP_PORT}]
    ingress: list[dict[str, Any]] = [{"ports": port}]
    if policy.from_:
        ingress = [{"from": [dict(peer) for peer in policy.from_], "ports": port}]
        if policy.metrics_from:
            ingress.append({"from": [dict(peer) for peer in policy.metrics_from], "ports": copy.deepcopy(port)})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(params, params.names.receiver),
        "spec": {
            "podSelector": {"matchLabels": selector_labels(params.name, COMPONENT_RECEIVER)},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }
