"""Builders of the aggregation's objects: the job's ConfigMap and a kubeflow spark-operator
(`sparkoperator.k8s.io/v1beta2`) SparkApplication (streaming) or ScheduledSparkApplication (scheduled).

They follow spark/sparkapplication-aggregation.yaml: the job file in the Spark image, its config from
the ConfigMap (the `AggregationConfig` model, rendered from the TelemetryReceiver's `aggregation`
section), Parquet under `sinkPath` on an optional shared volume.
"""

from __future__ import annotations

import copy
from typing import Any

from kct.aggregation.config import JOB_SPARK_CONF
from kct.render.names import COMPONENT_AGGREGATION, child_labels
from kct.render.params import (
    AGGREGATION_CONFIG_DIR,
    AGGREGATION_CONFIG_KEY,
    ReceiverParams,
    aggregation_config,
    aggregation_config_yaml,
    config_hash,
)

__all__ = [
    "JOB_FILE",
    "render_aggregation_configmap",
    "render_scheduled_spark_application",
    "render_spark_application",
]

JOB_FILE = "local:///opt/kct/spark/aggregation_job.py"
SPARK_API = "sparkoperator.k8s.io/v1beta2"


def _metadata(params: ReceiverParams, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": params.namespace,
        "labels": child_labels(params.name, COMPONENT_AGGREGATION, params.version),
        "ownerReferences": [params.owner_reference()],
    }


def render_aggregation_configmap(params: ReceiverParams) -> dict[str, Any] | None:
    config = aggregation_config(params)
    if config is None:
        return None
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(params, params.names.aggregation),
        "data": {AGGREGATION_CONFIG_KEY: aggregation_config_yaml(config)},
    }


def _application_spec(params: ReceiverParams, *, streaming: bool) -> dict[str, Any]:
    aggregation = params.spec.aggregation
    config = aggregation_config(params)
    assert aggregation is not None and config is not None
    mounts: list[dict[str, Any]] = [{"name": "config", "mountPath": AGGREGATION_CONFIG_DIR, "readOnly": True}]
    volumes: list[dict[str, Any]] = [{"name": "config", "configMap": {"name": params.names.aggregation}}]
    if aggregation.sink_claim_name:
        mounts.append({"name": "aggregates", "mountPath": aggregation.sink_path})
        volumes.append({"name": "aggregates", "persistentVolumeClaim": {"claimName": aggregation.sink_claim_name}})
    labels = child_labels(params.name, COMPONENT_AGGREGATION, params.version)
    # The spark-operator does not restart a running application when its ConfigMap changes:
    # an annotation with the config's hash on the driver makes the change visible in the spec.
    annotations = {"telemetry.kct.dev/config-hash": config_hash(aggregation_config_yaml(config))}
    driver: dict[str, Any] = {
        "cores": aggregation.driver.cores,
        "memory": aggregation.driver.memory,
        "labels": labels,
        "annotations": annotations,
        "volumeMounts": mounts,
    }
    if aggregation.driver.service_account:
        driver["serviceAccount"] = aggregation.driver.service_account
    spark_conf = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.streaming.metricsEnabled": "true",
        "spark.ui.prometheus.enabled": "true",
        **JOB_SPARK_CONF,  # the job's tuning, as `kct aggregate` sets it on the sessions it creates
        **aggregation.spark_conf,
    }
    restart: dict[str, Any] = (
        {"type": "Always", "onFailureRetryInterval": 10, "onSubmissionFailureRetryInterval": 20}
        if streaming
        else {
            "type": "OnFailure",
            "onFailureRetries": 2,
            "onFailureRetryInterval": 60,
            "onSubmissionFailureRetries": 2,
            "onSubmissionFailureRetryInterval": 60,
        }
    )
    arguments = ["--config", f"{AGGREGATION_CONFIG_DIR}/{AGGREGATION_CONFIG_KEY}", "--mode", "stream"]
    if not streaming:
        arguments.append("--until-drained")
    return {
        "type": "Python",
        "pythonVersion": "3",
        "mode": "cluster",
        "image": aggregation.image,
        "imagePullPolicy": aggregation.image_pull_policy,
        "sparkVersion": aggregation.spark_version,
        "mainApplicationFile": JOB_FILE,
        "arguments": arguments,
        "sparkConf": spark_conf,
        "restartPolicy": restart,
        "volumes": volumes,
        "driver": driver,
        "executor": {
            "instances": aggregation.executor.instances,
            "cores": aggregation.executor.cores,
            "memory": aggregation.executor.memory,
            "labels": dict(labels),
            "volumeMounts": copy.deepcopy(mounts),
        },
    }


def render_spark_application(params: ReceiverParams) -> dict[str, Any] | None:
    """The streaming job (runs until deleted, resumes from its checkpoint)."""
    aggregation = params.spec.aggregation
    if aggregation is None or not aggregation.enabled or aggregation.mode != "streaming":
        return None
    return {
        "apiVersion": SPARK_API,
        "kind": "SparkApplication",
        "metadata": _metadata(params, params.names.aggregation),
        "spec": _application_spec(params, streaming=True),
    }


def render_scheduled_spark_application(params: ReceiverParams) -> dict[str, Any] | None:
    """The job on a cron schedule: each run drains the topic since its checkpoint, then stops."""
    aggregation = params.spec.aggregation
    if aggregation is None or not aggregation.enabled or aggregation.mode != "scheduled":
        return None
    return {
        "apiVersion": SPARK_API,
        "kind": "ScheduledSparkApplication",
        "metadata": _metadata(params, params.names.aggregation),
        "spec": {
            "schedule": aggregation.schedule,
            "timeZone": "Etc/UTC",
            "concurrencyPolicy": "Forbid",
            "successfulRunHistoryLimit": 3,
            "failedRunHistoryLimit": 3,
            "template": _application_spec(params, streaming=False),
        },
    }
