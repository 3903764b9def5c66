"""Builders of the aggregation's objects: the job's ConfigMap and a kubeflow spark-operator
(`sparkoperator.k8s.io/v1beta2`) SparkApplication (streaming) or ScheduledSparkApplication (scheduled),
and the hourly roll-up's ScheduledSparkApplication.

Every application runs the job file of the Spark image with its config from the ConfigMap (the
`AggregationConfig` model, rendered from the TelemetryReceiver's `aggregation` section) and writes Parquet
under `sinkPath` on an optional shared volume. The operator applies the first three; the hourly roll-up is
not a child of a TelemetryReceiver (yet): `dev/gen_spark_manifests.py` writes it, with the others, as the
standalone manifests under spark/, so those are this module's output and never a hand-written copy.

Driver and executors run as the Spark image's user (185, the official image's `spark`), with a read-only
root filesystem, no capabilities, no privilege escalation and the runtime's default seccomp profile. What
Spark writes goes to volumes: its local dirs to the emptyDirs Spark itself mounts on Kubernetes
(`SPARK_LOCAL_DIRS`), the JVM's and Python's temporary files (and an Ivy cache, should a `sparkConf` ask for
packages) to an emptyDir on /tmp, the image's working directory to another, the aggregates to the sink.
"""

from __future__ import annotations

import copy
from typing import Any, Final

from kct.aggregation.config import JOB_SPARK_CONF
from kct.render.names import COMPONENT_AGGREGATION, child_labels
from kct.render.params import (
    AGGREGATION_CONFIG_DIR,
    AGGREGATION_CONFIG_KEY,
    EXPORT_CA_DIR,
    KAFKA_CLIENT_DIR,
    ReceiverParams,
    aggregation_config,
    aggregation_config_yaml,
    config_hash,
    export_header_env,
    kafka_secret_name,
    kafka_secret_parts,
)

__all__ = [
    "HOURLY_SCHEDULE",
    "JOB_FILE",
    "SPARK_USER",
    "SPARK_WORK_DIR",
    "render_aggregation_configmap",
    "render_hourly_rollup_application",
    "render_scheduled_spark_application",
    "render_spark_application",
]

JOB_FILE = "local:///opt/kct/spark/aggregation_job.py"
SPARK_API = "sparkoperator.k8s.io/v1beta2"
SPARK_USER: Final = 185
"""The Spark image's user and group (the official image's `spark`; the Dockerfile's spark stage keeps it)."""
SPARK_WORK_DIR: Final = "/opt/spark/work-dir"
"""The Spark image's working directory, where the driver and executors start."""
HOURLY_SCHEDULE: Final = "5 * * * *"
"""At 5 past every hour: the previous hour's last one-minute windows are written by then."""
# Streaming: a query resumes from its checkpoint, so it is always restarted. A run on a schedule is
# retried a couple of times; the next run covers what a failed one left.
_RESTART_STREAMING: Final[dict[str, Any]] = {
    "type": "Always", "onFailureRetryInterval": 10, "onSubmissionFailureRetryInterval": 20,
}
_RESTART_SCHEDULED: Final[dict[str, Any]] = {
    "type": "OnFailure",
    "onFailureRetries": 2,
    "onFailureRetryInterval": 60,
    "onSubmissionFailureRetries": 2,
    "onSubmissionFailureRetryInterval": 60,
}


# Written by the JVM (hsperfdata, java.io.tmpdir), PySpark (its gateway's files) and Ivy; and the work dir.
_SCRATCH_VOLUMES: Final = (("tmp", "/tmp"), ("work-dir", SPARK_WORK_DIR))
_POD_SECURITY_CONTEXT: Final[dict[str, Any]] = {
    "runAsNonRoot": True,
    "runAsUser": SPARK_USER,
    "runAsGroup": SPARK_USER,
    "seccompProfile": {"type": "RuntimeDefault"},
}
_CONTAINER_SECURITY_CONTEXT: Final[dict[str, Any]] = {
    "runAsNonRoot": True,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
# With a read-only root, Ivy's default cache (under the user's home, in the image) could not be written.
_SCRATCH_SPARK_CONF: Final = {"spark.jars.ivy": "/tmp/ivy2"}


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


def _application_spec(params: ReceiverParams, mode: list[str], restart: dict[str, Any]) -> dict[str, Any]:
    """The application's spec; `mode` are the job's arguments after its `--config`."""
    aggregation = params.spec.aggregation
    config = aggregation_config(params)
    assert aggregation is not None and config is not None
    mounts: list[dict[str, Any]] = [{"name": "config", "mountPath": AGGREGATION_CONFIG_DIR, "readOnly": True}]
    volumes: list[dict[str, Any]] = [{"name": "config", "configMap": {"name": params.names.aggregation}}]
    for name, path in _SCRATCH_VOLUMES:
        mounts.append({"name": name, "mountPath": path})
        volumes.append({"name": name, "emptyDir": {}})
    if aggregation.sink_claim_name:
        mounts.append({"name": "aggregates", "mountPath": aggregation.sink_path})
        volumes.append({"name": "aggregates", "persistentVolumeClaim": {"claimName": aggregation.sink_claim_name}})
    elif aggregation.sink_path.startswith("/"):
        # A local path without a claim was the container's own (ephemeral) filesystem, read-only now: an
        # emptyDir keeps it writable and as ephemeral (object store URLs need no volume).
        mounts.append({"name": "aggregates", "mountPath": aggregation.sink_path})
        volumes.append({"name": "aggregates", "emptyDir": {}})
    kafka_secret = kafka_secret_name(params.spec)
    if kafka_secret is not None:
        # The cluster's credentials and CA (spec.kafka.secretRef), one file per property, read by the driver into
        # the Kafka source's options; mounted on the executors too, for properties that name files. Kubernetes'
        # default mode, as the export's CA: the pods have no fsGroup, so a group-only file would be root's alone.
        mounts.append({"name": "kafka-client", "mountPath": KAFKA_CLIENT_DIR, "readOnly": True})
        volumes.append({"name": "kafka-client", "secret": {"secretName": kafka_secret}})
    labels = child_labels(params.name, COMPONENT_AGGREGATION, params.version)
    # The spark-operator does not restart a running application when its ConfigMap changes:
    # an annotation with the config's hash on the driver makes the change visible in the spec (and the Kafka
    # Secret's version: the driver reads it at start).
    annotations = {"telemetry.kct.dev/config-hash": config_hash(aggregation_config_yaml(config),
                                                                *kafka_secret_parts(params))}
    driver: dict[str, Any] = {
        "cores": aggregation.driver.cores,
        "memory": aggregation.driver.memory,
        "labels": labels,
        "annotations": annotations,
        "volumeMounts": mounts,
        "podSecurityContext": copy.deepcopy(_POD_SECURITY_CONTEXT),
        "securityContext": copy.deepcopy(_CONTAINER_SECURITY_CONTEXT),
    }
    if aggregation.driver.service_account:
        driver["serviceAccount"] = aggregation.driver.service_account
    _add_export_secrets(params, driver, volumes)
    spark_conf = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.streaming.metricsEnabled": "true",
        "spark.ui.prometheus.enabled": "true",
        **_SCRATCH_SPARK_CONF,
        **JOB_SPARK_CONF,  # the job's tuning, as `kct aggregate` sets it on the sessions it creates
        **aggregation.spark_conf,
    }
    arguments = ["--config", f"{AGGREGATION_CONFIG_DIR}/{AGGREGATION_CONFIG_KEY}", *mode]
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
        "restartPolicy": copy.deepcopy(restart),
        "volumes": volumes,
        "driver": driver,
        "executor": {
            "instances": aggregation.executor.instances,
            "cores": aggregation.executor.cores,
            "memory": aggregation.executor.memory,
            "labels": dict(labels),
            "volumeMounts": copy.deepcopy(mounts),
            "podSecurityContext": copy.deepcopy(_POD_SECURITY_CONTEXT),
            "securityContext": copy.deepcopy(_CONTAINER_SECURITY_CONTEXT),
        },
    }


def _add_export_secrets(params: ReceiverParams, driver: dict[str, Any], volumes: list[dict[str, Any]]) -> None:
    """The export's Secrets, on the driver only (it sends the windows): header values as environment
    variables (the config refers to them as `${NAME}`), the CA bundle as a file."""
    aggregation = params.spec.aggregation
    export = None if aggregation is None else aggregation.export
    if export is None:
        return
    env = [{"name": variable, "valueFrom": {"secretKeyRef": {"name": export.headers_from_secrets[header].name,
                                                             "key": export.headers_from_secrets[header].key}}}
           for header, variable in export_header_env(export).items()]
    if env:
        driver["env"] = env
    ca = export.tls.ca_secret_ref
    if ca is not None:
        volumes.append({"name": "export-ca",
                        "secret": {"secretName": ca.name, "items": [{"key": ca.key, "path": ca.key}]}})
        driver["volumeMounts"] = [*driver["volumeMounts"],
                                  {"name": "export-ca", "mountPath": EXPORT_CA_DIR, "readOnly": True}]


def render_spark_application(params: ReceiverParams) -> dict[str, Any] | None:
    """The streaming job (runs until deleted, resumes from its checkpoint)."""
    aggregation = params.spec.aggregation
    if aggregation is None or not aggregation.enabled or aggregation.mode != "streaming":
        return None
    return {
        "apiVersion": SPARK_API,
        "kind": "SparkApplication",
        "metadata": _metadata(params, params.names.aggregation),
        "spec": _application_spec(params, ["--mode", "stream"], _RESTART_STREAMING),
    }


def _scheduled_application(params: ReceiverParams, name: str, schedule: str, mode: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": SPARK_API,
        "kind": "ScheduledSparkApplication",
        "metadata": _metadata(params, name),
        "spec": {
            "schedule": schedule,
            "timeZone": "Etc/UTC",
            "concurrencyPolicy": "Forbid",
            "successfulRunHistoryLimit": 3,
            "failedRunHistoryLimit": 3,
            "template": _application_spec(params, mode, _RESTART_SCHEDULED),
        },
    }


def render_scheduled_spark_application(params: ReceiverParams) -> dict[str, Any] | None:
    """The job on a cron schedule: each run drains the topic since its checkpoint, then stops."""
    aggregation = params.spec.aggregation
    if aggregation is None or not aggregation.enabled or aggregation.mode != "scheduled":
        return None
    assert aggregation.schedule is not None  # the spec model requires it in scheduled mode
    mode = ["--mode", "stream", "--until-drained"]
    return _scheduled_application(params, params.names.aggregation, aggregation.schedule, mode)


def render_hourly_rollup_application(params: ReceiverParams) -> dict[str, Any] | None:
    """The hourly roll-up: at `HOURLY_SCHEDULE`, the previous UTC hour of client_metrics re-aggregated into
    client_metrics_hourly (`--mode hourly`: a batch job reading Parquet only, not the topic), with the same
    image, config, volumes and tuning as the aggregation. None when the aggregation is absent or disabled."""
    aggregation = params.spec.aggregation
    if aggregation is None or not aggregation.enabled:
        return None
    return _scheduled_application(params, params.names.aggregation_hourly, HOURLY_SCHEDULE, ["--mode", "hourly"])
