"""spec.kafka.secretRef reaches every client of the cluster without its values leaving the Secret: the receiver
pods and the Spark job mount it and their configs name only the directory."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from kct.api.telemetry_receiver import parse_receiver_spec
from kct.render.params import KAFKA_CLIENT_DIR, ReceiverParams, aggregation_config, receiver_config
from kct.render.receiver_workload import render_receiver_configmap, render_receiver_deployment
from kct.render.spark import (
    render_aggregation_configmap,
    render_scheduled_spark_application,
    render_spark_application,
)

SECURED = {"kafka": {"bootstrapServers": "kafka:9093", "secretRef": {"name": "kafka-client"}},
           "aggregation": {"enabled": True}}


def params(spec: dict[str, Any]) -> ReceiverParams:
    return ReceiverParams("tr", "ns", "uid-1", parse_receiver_spec(spec), "kafka:9093", generated_token="t")


def test_receiver_pods_mount_the_kafka_secret_and_their_config_names_only_the_directory() -> None:
    """Given spec.kafka.secretRef, When the receiver's Deployment and config are rendered, Then the Secret is a
    whole-volume, read-only mount at KAFKA_CLIENT_DIR (group-readable: the pod's fsGroup) and the config's
    kafka.clientPropertiesDir points there, with no property copied into the ConfigMap."""
    rendered = params(SECURED)
    pod = render_receiver_deployment(rendered)["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "kafka-client"]
    assert volume["secret"] == {"secretName": "kafka-client", "defaultMode": 0o440}
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "kafka-client"]
    assert mount == {"name": "kafka-client", "mountPath": KAFKA_CLIENT_DIR, "readOnly": True}
    config = receiver_config(rendered.spec, rendered.bootstrap_servers)
    assert config.kafka.client_properties_dir == KAFKA_CLIENT_DIR
    assert config.kafka.producer_properties == {}
    document = yaml.safe_load(render_receiver_configmap(rendered)["data"]["receiver.yaml"])
    assert document["kafka"]["clientPropertiesDir"] == KAFKA_CLIENT_DIR


@pytest.mark.parametrize("mode", ["streaming", "scheduled"])
def test_spark_driver_and_executors_mount_the_kafka_secret_and_the_source_names_the_directory(mode: str) -> None:
    """Given spec.kafka.secretRef and aggregation (streaming or scheduled), When the application is rendered,
    Then driver and executors mount the Secret at KAFKA_CLIENT_DIR (Kubernetes' default mode: the Spark pods
    have no fsGroup) and the job's source reads its properties from there."""
    extra = {"mode": "scheduled", "schedule": "*/5 * * * *"} if mode == "scheduled" else {}
    rendered = params({**SECURED, "aggregation": {"enabled": True, **extra}})
    application = (render_spark_application(rendered) if mode == "streaming"
                   else render_scheduled_spark_application(rendered))
    assert application is not None
    spec = application["spec"] if mode == "streaming" else application["spec"]["template"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == "kafka-client"]
    assert volume == {"name": "kafka-client", "secret": {"secretName": "kafka-client"}}
    for role in ("driver", "executor"):
        assert {"name": "kafka-client", "mountPath": KAFKA_CLIENT_DIR, "readOnly": True} in spec[role]["volumeMounts"]
    config = aggregation_config(rendered)
    assert config is not None and config.source.client_properties_dir == KAFKA_CLIENT_DIR
    configmap = render_aggregation_configmap(rendered)
    assert configmap is not None and f"clientPropertiesDir: {KAFKA_CLIENT_DIR}" in configmap["data"]["aggregation.yaml"]


def test_without_a_secret_nothing_is_mounted_and_no_directory_is_named() -> None:
    """Given spec.kafka without secretRef, When rendered, Then no kafka-client volume exists anywhere and the
    configs name no properties directory (PLAINTEXT clusters keep their manifests)."""
    rendered = params({"kafka": {"bootstrapServers": "kafka:9092"}, "aggregation": {"enabled": True}})
    pod = render_receiver_deployment(rendered)["spec"]["template"]["spec"]
    application = render_spark_application(rendered)
    assert application is not None
    assert all(v["name"] != "kafka-client" for v in [*pod["volumes"], *application["spec"]["volumes"]])
    assert receiver_config(rendered.spec, rendered.bootstrap_servers).kafka.client_properties_dir is None
    config = aggregation_config(rendered)
    assert config is not None and config.source.client_properties_dir is None
