"""Least privilege in what the operator renders: the receiver pods get no API token, a NetworkPolicy guards
them by default, and the Spark driver and executors run non-root on a read-only root filesystem."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from kct.api.telemetry_receiver import parse_receiver_spec
from kct.render import render_children
from kct.render.params import OTLP_PORT, ReceiverParams
from kct.render.receiver_workload import render_receiver_deployment, render_receiver_network_policy
from kct.render.spark import (
    SPARK_USER,
    render_hourly_rollup_application,
    render_scheduled_spark_application,
    render_spark_application,
)

REPO = Path(__file__).resolve().parents[3]
BROKERS = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kafka"}}}
SCRAPER = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
           "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}
HOST_BROKERS = {"ipBlock": {"cidr": "10.250.0.2/32"}}


def params(spec: dict[str, Any] | None = None) -> ReceiverParams:
    return ReceiverParams("tr", "ns", "uid-1", parse_receiver_spec(spec or {}), "broker:9092", generated_token="t")


# ------------------------------------------------------------------------------------- receiver pods


@pytest.mark.parametrize("spec", [{}, {"serviceAccountName": "receivers"}], ids=["default", "own-account"])
def test_receiver_pods_never_mount_an_api_token(spec: dict[str, Any]) -> None:
    """Given a receiver with or without its own ServiceAccount, When its Deployment is rendered, Then the pods
    do not mount a Kubernetes API token (the receiver calls no Kubernetes API)."""
    pod = render_receiver_deployment(params(spec))["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod.get("serviceAccountName") == spec.get("serviceAccountName")
    assert not any(v.get("projected") or "serviceAccountToken" in str(v) for v in pod["volumes"])


def test_network_policy_is_on_by_default_and_opens_only_the_otlp_port() -> None:
    """Given an empty spec, When the children are rendered, Then a NetworkPolicy selects the receiver pods and
    admits ingress to the OTLP port only, from any source (the brokers' location is unknown)."""
    policies = [m for m in render_children(params()) if m["kind"] == "NetworkPolicy"]
    assert len(policies) == 1
    spec = policies[0]["spec"]
    assert spec["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "receiver"
    assert spec["policyTypes"] == ["Ingress"]
    assert spec["ingress"] == [{"ports": [{"protocol": "TCP", "port": OTLP_PORT}]}]


def test_network_policy_admits_the_brokers_and_the_scraper_only() -> None:
    """Given `from` (brokers by namespace, or by CIDR for brokers on the host) and `metricsFrom` (the scraper),
    When the policy is rendered, Then one rule admits the brokers and another the scraper, both to the OTLP
    port (which serves /metrics), and nothing else."""
    policy = render_receiver_network_policy(params({"networkPolicy": {
        "from": [BROKERS, HOST_BROKERS], "metricsFrom": [SCRAPER]}}))
    assert policy is not None
    port = [{"protocol": "TCP", "port": OTLP_PORT}]
    assert policy["spec"]["ingress"] == [{"from": [BROKERS, HOST_BROKERS], "ports": port},
                                         {"from": [SCRAPER], "ports": port}]


def test_network_policy_can_be_turned_off() -> None:
    """Given `networkPolicy.enabled: false`, When the children are rendered, Then there is no NetworkPolicy."""
    assert "NetworkPolicy" not in [m["kind"] for m in render_children(params({"networkPolicy": {"enabled": False}}))]
    assert render_receiver_network_policy(params({"networkPolicy": {"enabled": False}})) is None


def test_network_policy_spec_refuses_unknown_fields() -> None:
    """Given a typo in networkPolicy, When the spec is parsed, Then it is refused (not silently open)."""
    with pytest.raises(ValueError, match="metricFrom"):
        parse_receiver_spec({"networkPolicy": {"metricFrom": [SCRAPER]}})


# ------------------------------------------------------------------------------------- Spark pods

_AGGREGATION: dict[str, Any] = {"aggregation": {"sinkClaimName": "aggregates"}}


def _applications() -> list[tuple[str, dict[str, Any]]]:
    streaming = render_spark_application(params(_AGGREGATION))
    scheduled = render_scheduled_spark_application(params(
        {"aggregation": {**_AGGREGATION["aggregation"], "mode": "scheduled", "schedule": "*/15 * * * *"}}))
    hourly = render_hourly_rollup_application(params(_AGGREGATION))
    assert streaming is not None and scheduled is not None and hourly is not None
    return [("streaming", streaming["spec"]), ("scheduled", scheduled["spec"]["template"]),
            ("hourly", hourly["spec"]["template"])]


@pytest.mark.parametrize("role", ["driver", "executor"])
def test_spark_pods_run_non_root_read_only_without_capabilities(role: str) -> None:
    """Given an aggregation (streaming, scheduled, hourly roll-up), When its applications are rendered, Then
    the driver and the executors run as the image's non-root user with the RuntimeDefault seccomp profile,
    a read-only root filesystem, no privilege escalation and every capability dropped."""
    for mode, spec in _applications():
        pod = spec[role]
        assert pod["podSecurityContext"] == {"runAsNonRoot": True, "runAsUser": SPARK_USER,
                                             "runAsGroup": SPARK_USER, "seccompProfile": {"type": "RuntimeDefault"}}
        assert pod["securityContext"] == {
            "runAsNonRoot": True, "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}, mode


@pytest.mark.parametrize("role", ["driver", "executor"])
def test_spark_pods_write_only_to_volumes(role: str) -> None:
    """Given the read-only root filesystem, When the applications are rendered, Then /tmp (JVM, PySpark, the
    Ivy cache Spark is pointed at) and the image's work dir are emptyDirs, the config is read-only, and the
    sink is the claim."""
    for mode, spec in _applications():
        volumes = {v["name"]: v for v in spec["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in spec[role]["volumeMounts"]}
        assert mounts == {"/tmp": "tmp", "/opt/spark/work-dir": "work-dir", "/etc/kct/aggregation": "config",
                          "/data/aggregates": "aggregates"}, mode
        assert volumes["tmp"] == {"name": "tmp", "emptyDir": {}} and volumes["work-dir"]["emptyDir"] == {}
        assert volumes["aggregates"]["persistentVolumeClaim"] == {"claimName": "aggregates"}
        assert spec["sparkConf"]["spark.jars.ivy"].startswith("/tmp/")


def test_a_local_sink_without_a_claim_stays_writable() -> None:
    """Given a local sinkPath and no claim, When the application is rendered, Then an emptyDir backs the sink
    (the root filesystem is read-only); Given an object store URL, Then no volume is added for it."""
    local = render_spark_application(params({"aggregation": {"sinkPath": "/data/out"}}))
    assert local is not None
    assert {"name": "aggregates", "emptyDir": {}} in local["spec"]["volumes"]
    assert {"name": "aggregates", "mountPath": "/data/out"} in local["spec"]["executor"]["volumeMounts"]
    remote = render_spark_application(params({"aggregation": {"sinkPath": "s3a://bucket/aggregates"}}))
    assert remote is not None
    assert "aggregates" not in {v["name"] for v in remote["spec"]["volumes"]}


def test_the_spark_user_is_the_images_user() -> None:
    """Given the Dockerfile's spark stage, When its last USER is read, Then it is the user the applications run
    as (runAsUser must match the image, or the work dir and the Spark home would not be the job's)."""
    dockerfile = (REPO / "Dockerfile").read_text()
    stage = dockerfile[dockerfile.index("AS spark\n"):]
    stage = stage[: stage.index("\nFROM ")] if "\nFROM " in stage else stage
    users = re.findall(r"^USER (\d+):(\d+)$", stage, re.MULTILINE)
    assert users and users[-1] == (str(SPARK_USER), str(SPARK_USER))


def test_every_child_carries_the_label_the_admission_policy_requires() -> None:
    """Given a spec with every optional object, When the children are rendered, Then each carries
    app.kubernetes.io/managed-by=kct-operator: the chart's admission policy refuses the operator's writes of
    anything without it (helm/kct/templates/admissionpolicy.yaml)."""
    spec = {"autoscaling": {}, "aggregation": {"mode": "scheduled", "schedule": "0 * * * *"}}
    children = [*render_children(params(spec)), *render_children(params({"aggregation": {}}))]
    assert {"Secret", "ConfigMap", "Deployment", "NetworkPolicy", "HorizontalPodAutoscaler",
            "ScheduledSparkApplication", "SparkApplication"} <= {m["kind"] for m in children}
    for manifest in children:
        assert manifest["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kct-operator", manifest["kind"]
