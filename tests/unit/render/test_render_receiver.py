"""What the builders promise beyond their golden files: names fit, config changes roll the pods,
optional objects come and go with the spec, and the rendered configs are what the programs read."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

from kct.aggregation.config import SourceConfig
from kct.aggregation.config import parse_job_config as parse_aggregation_config
from kct.api.telemetry_receiver import parse_receiver_spec
from kct.receiver.config import load_receiver_config
from kct.render import render_children
from kct.render.names import CONFIG_HASH_ANNOTATION, ChildNames, dns_label, selector_labels
from kct.render.params import ReceiverParams, receiver_config
from kct.render.receiver_workload import (
    render_receiver_configmap,
    render_receiver_deployment,
    render_receiver_hpa,
    render_receiver_service,
    render_token_secret,
)
from kct.render.spark import render_scheduled_spark_application, render_spark_application


def params(spec: dict[str, Any] | None = None, *, name: str = "tr", token: str | None = "t0k") -> ReceiverParams:
    return ReceiverParams(name, "ns", "uid-1", parse_receiver_spec(spec or {}), "broker:9092", generated_token=token)


def kinds(spec: dict[str, Any]) -> list[str]:
    return [m["kind"] for m in render_children(params(spec))]


def pod_hash(spec: dict[str, Any]) -> str:
    deployment = render_receiver_deployment(params(spec))
    return str(deployment["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH_ANNOTATION])


def test_long_names_are_truncated_to_63_characters_stably_and_distinctly() -> None:
    """Given two 80-character resource names sharing a 70-character prefix, When children are named,
    Then every name is at most 63 characters, the same input gives the same name, and they differ."""
    first, second = "a" * 70 + "x" * 10, "a" * 70 + "y" * 10
    names = [ChildNames(first).receiver, ChildNames(second).receiver]
    assert all(len(n) <= 63 for n in names)
    assert names[0] != names[1]
    assert ChildNames(first).receiver == names[0]
    assert dns_label("short") == "short"
    assert all(len(v) <= 63 for v in selector_labels(first, "receiver").values())


def test_changing_receiver_settings_changes_the_pod_template_hash() -> None:
    """Given a receiver, When a receiver setting (a limit) changes, Then the config-hash annotation on the
    pod template changes (the pods roll); When only the replica count changes, Then it does not."""
    base = {"replicas": 2}
    assert pod_hash(base) == pod_hash({"replicas": 5})
    assert pod_hash(base) != pod_hash({**base, "receiver": {"limits": {"maxCompressedBytes": 1000}}})


def test_configmap_holds_the_receivers_own_config_file(tmp_path: Path) -> None:
    """Given a spec with quotas and privacy settings, When the ConfigMap is rendered, Then its file loads
    with the receiver's own `load_receiver_config` into exactly the config built from the spec."""
    spec = {
        "receiver": {
            "quotas": {"defaultByteRate": 1000, "overrides": [{"clientId": "a", "byteRate": 5}]},
            "privacy": {"deny": ["host.*"]},
        },
        "topic": {"name": "raw"},
    }
    data = render_receiver_configmap(params(spec))["data"]
    path = tmp_path / "receiver.yaml"
    path.write_text(data["receiver.yaml"])
    loaded = load_receiver_config(path)
    assert loaded == receiver_config(parse_receiver_spec(spec), "broker:9092")
    assert loaded.kafka.topic == "raw" and loaded.auth.bearer_token_file == "/etc/kct/token/token"
    assert loaded.auth.bearer_token_env is None
    assert loaded.listen.port == 4318


def _token_mount(spec: dict[str, Any] | None = None) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(the pod's token volume, the container's mount of it), None when absent."""
    pod = render_receiver_deployment(params(spec))["spec"]["template"]["spec"]
    volume = next((v for v in pod["volumes"] if v["name"] == "token"), None)
    mount = next((m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "token"), None)
    return volume, mount


def test_generated_token_secret_or_the_referenced_one() -> None:
    """Given no tokenSecretRef, Then a Secret with the generated token is rendered and mounted as the file the
    config names; Given a tokenSecretRef, Then no Secret is rendered and the referenced key is mounted;
    Given auth disabled, Then neither, and the config turns token checks off."""
    secret = render_token_secret(params())
    assert secret is not None and base64.b64decode(secret["data"]["token"]).decode() == "t0k"
    volume, mount = _token_mount()
    assert volume == {
        "name": "token",
        "secret": {"secretName": "tr-token", "items": [{"key": "token", "path": "token"}], "defaultMode": 0o440},
    }
    assert mount == {"name": "token", "mountPath": "/etc/kct/token", "readOnly": True}
    assert "subPath" not in mount  # a subPath mount is never updated by kubelet: no rotation
    config = yaml.safe_load(render_receiver_configmap(params())["data"]["receiver.yaml"])
    assert config["auth"]["bearerTokenFile"] == "/etc/kct/token/token"

    referenced = {"receiver": {"auth": {"tokenSecretRef": {"name": "mine", "key": "k"}}}}
    assert render_token_secret(params(referenced)) is None
    volume, _ = _token_mount(referenced)
    assert volume is not None and volume["secret"]["secretName"] == "mine"
    assert volume["secret"]["items"] == [{"key": "k", "path": "token"}]

    disabled = {"receiver": {"auth": {"enabled": False}}}
    assert "Secret" not in kinds(disabled)
    assert _token_mount(disabled) == (None, None)
    assert "env" not in render_receiver_deployment(params(disabled))["spec"]["template"]["spec"]["containers"][0]
    data = render_receiver_configmap(params(disabled))["data"]["receiver.yaml"]
    assert yaml.safe_load(data)["auth"]["bearerTokenFile"] is None


def test_autoscaling_renders_an_hpa_and_leaves_replicas_to_it() -> None:
    """Given autoscaling enabled, Then an HPA with min/max/CPU target is rendered and the Deployment has no
    replicas field; Given it disabled, Then no HPA and the Deployment has spec.replicas."""
    scaled = {"replicas": 3, "autoscaling": {"minReplicas": 2, "maxReplicas": 4, "targetCPUUtilizationPercentage": 60}}
    hpa = render_receiver_hpa(params(scaled))
    assert hpa is not None
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 4)
    assert hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 60
    assert "replicas" not in render_receiver_deployment(params(scaled))["spec"]
    off = {"replicas": 3, "autoscaling": {"enabled": False}}
    assert render_receiver_hpa(params(off)) is None
    assert render_receiver_deployment(params(off))["spec"]["replicas"] == 3


def test_deployment_is_hardened_and_probed() -> None:
    """Given any receiver, Then the pod runs as non-root with a read-only root filesystem, probes
    /healthz and /readyz on the Service's named port, and runs `kct receiver --config <mounted file>`."""
    deployment = render_receiver_deployment(params())
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["command"] + container["args"] == [
        "kct",
        "receiver",
        "--config",
        "/etc/kct/receiver/receiver.yaml",
    ]
    service = render_receiver_service(params())
    assert service["spec"]["ports"][0]["targetPort"] == container["ports"][0]["name"]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


def test_a_terminating_receiver_serves_until_it_left_the_endpoints_then_drains() -> None:
    """Given a drain timeout, Then the pod pauses before SIGTERM (preStop sleep, while kube-proxy stops
    routing new connections to it) and the grace period covers that pause plus the whole drain."""
    pod = render_receiver_deployment(params({"receiver": {"shutdown": {"drainTimeoutMs": 30000}}}))["spec"]["template"][
        "spec"
    ]
    pause = pod["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pause >= 3
    assert pod["terminationGracePeriodSeconds"] > pause + 30


def test_every_child_is_owned_and_labelled() -> None:
    """Given a spec with every optional object, Then every child has the controller ownerReference and the
    owner label pruning selects by."""
    spec = {"autoscaling": {}, "networkPolicy": {"enabled": True}, "aggregation": {}}
    children = render_children(params(spec))
    assert {m["kind"] for m in children} >= {
        "ConfigMap",
        "Secret",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "HorizontalPodAutoscaler",
        "NetworkPolicy",
        "SparkApplication",
    }
    for manifest in children:
        assert manifest["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
        assert manifest["metadata"]["labels"]["telemetry.kct.dev/receiver"] == "tr"


def test_aggregation_mode_picks_the_spark_kind_and_renders_the_jobs_config() -> None:
    """Given streaming, Then a SparkApplication; Given scheduled, Then a ScheduledSparkApplication with the
    schedule that drains the topic; Given disabled or absent, Then neither. The job's ConfigMap parses with
    the job's own config model and reads the receiver's topic."""
    streaming = params({"topic": {"name": "raw"}, "aggregation": {"window": {"sizeSeconds": 30}}})
    assert render_spark_application(streaming) is not None and render_scheduled_spark_application(streaming) is None
    scheduled = params({"aggregation": {"mode": "scheduled", "schedule": "0 * * * *"}})
    app = render_scheduled_spark_application(scheduled)
    assert app is not None and app["spec"]["schedule"] == "0 * * * *"
    assert "--until-drained" in app["spec"]["template"]["arguments"]
    assert "SparkApplication" not in kinds({"aggregation": {"enabled": False}})
    assert "SparkApplication" not in kinds({})
    configmap = next(
        m for m in render_children(streaming) if m["metadata"]["name"] == "tr-aggregation" and m["kind"] == "ConfigMap"
    )
    job = parse_aggregation_config(yaml.safe_load(configmap["data"]["aggregation.yaml"]))
    assert (job.source.topic, job.source.bootstrap_servers, job.window.size_seconds) == ("raw", "broker:9092", 30)


def test_max_records_per_trigger_bounds_the_jobs_micro_batches() -> None:
    """Given `maxRecordsPerTrigger`, Then the job's config reads at most that many records per micro-batch
    (Spark's maxOffsetsPerTrigger); Given none, Then the job's own default."""

    def source(aggregation: dict[str, object]) -> Any:
        configmap = next(m for m in render_children(params({"aggregation": aggregation}))
                         if m["metadata"]["name"] == "tr-aggregation" and m["kind"] == "ConfigMap")
        return parse_aggregation_config(yaml.safe_load(configmap["data"]["aggregation.yaml"])).source

    assert source({"maxRecordsPerTrigger": 25}).max_records_per_partition == 25
    assert source({}).max_records_per_partition == SourceConfig.model_fields["max_records_per_partition"].default


def test_secret_producer_properties_reach_the_pods_as_environment_variables() -> None:
    """Given SASL credentials in a Secret, When rendered, Then the ConfigMap names environment variables (never
    the values) and the pods get those variables from the Secret's keys."""
    spec = {"receiver": {"producerPropertiesFromSecrets": {"sasl.password": {"name": "kafka-user", "key": "pw"}}}}
    config = yaml.safe_load(render_receiver_configmap(params(spec))["data"]["receiver.yaml"])
    variable = config["kafka"]["producerPropertiesFromEnv"]["sasl.password"]
    env = render_receiver_deployment(params(spec))["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": variable, "valueFrom": {"secretKeyRef": {"name": "kafka-user", "key": "pw"}}} in env
    assert "kafka-user" not in yaml.safe_dump(config)
