"""The chart's monitoring objects: dashboards as ConfigMaps, the PrometheusRule, the receivers' ServiceMonitor,
the operator's PodMonitor and metrics port.

All off by default (the Prometheus Operator's CRDs and Grafana's sidecar are the user's choice); rendered with
the real helm binary, like test_helm_chart.py.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_support import CHART, KUBE_VERSION, Render
from preconditions import require_module

from kct.render.names import COMPONENT_RECEIVER, MANAGED_BY, child_labels
from kct.render.receiver_workload import PORT_NAME

ALL_ON = ("--set", "dashboards.enabled=true", "--set", "prometheusRule.enabled=true",
          "--set", "serviceMonitor.enabled=true", "--set", "podMonitor.enabled=true")
RULES = CHART / "rules" / "kct.rules.yaml"
MONITORING_KINDS = {"PrometheusRule", "ServiceMonitor", "PodMonitor"}


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


def dashboards_of(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [obj for obj in of_kind(objects, "ConfigMap") if "grafana_dashboard" in obj["metadata"]["labels"]]


def test_nothing_for_monitoring_by_default(render: Render) -> None:
    """Given the default values, Then no dashboard ConfigMap, PrometheusRule, ServiceMonitor or PodMonitor is
    rendered (the install manifest and clusters without the Prometheus Operator stay as they were)."""
    objects = render()
    assert not dashboards_of(objects)
    assert not [obj for obj in objects if obj["kind"] in MONITORING_KINDS]


def test_helm_lint_passes_with_monitoring_on(helm: Path) -> None:
    """Given dashboards, rule and monitor enabled, When `helm lint --strict` runs, Then it passes."""
    proc = subprocess.run([str(helm), "lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION, *ALL_ON],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dashboards_ship_as_sidecar_configmaps(render: Render) -> None:
    """Given dashboards.enabled, Then each committed dashboard is one ConfigMap labelled grafana_dashboard: "1",
    holding the file unchanged, valid for Kubernetes; namespace, label and folder follow the values."""
    kubernetes_validate: Any = require_module("kubernetes_validate", "it holds the Kubernetes schemas (a test extra)")
    maps = dashboards_of(render(*ALL_ON))
    files = {path.name: path.read_text() for path in (CHART / "dashboards").glob("*.json")}
    assert {key for cm in maps for key in cm["data"]} == set(files)
    for cm in maps:
        ((key, text),) = cm["data"].items()
        assert json.loads(text) == json.loads(files[key])
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["metadata"]["namespace"] == "kct-system"
        assert "annotations" not in cm["metadata"]
        kubernetes_validate.validate(cm, "1.36", strict=True)
    assert sorted(cm["metadata"]["name"] for cm in maps) == [
        "kct-dashboard-clients", "kct-dashboard-fleet", "kct-dashboard-pipeline"]
    moved = dashboards_of(render("--set", "dashboards.enabled=true", "--set", "dashboards.namespace=monitoring",
                                 "--set", "dashboards.label=my_dashboards", "--set", "dashboards.labelValue=yes",
                                 "--set", "dashboards.folder=Kafka", "--set", "dashboards.label=grafana_dashboard"))
    assert {cm["metadata"]["namespace"] for cm in moved} == {"monitoring"}
    assert {cm["metadata"]["annotations"]["grafana_folder"] for cm in moved} == {"Kafka"}
    assert {cm["metadata"]["labels"]["grafana_dashboard"] for cm in moved} == {"yes"}


def test_prometheus_rule_embeds_the_rules_file(render: Render) -> None:
    """Given prometheusRule.enabled with default thresholds, Then its spec is rules/kct.rules.yaml as is."""
    (rule,) = of_kind(render(*ALL_ON), "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"] == yaml.safe_load(RULES.read_text())


def threshold_of(expr: str) -> float:
    match = re.search(r">\s*([0-9.eE+-]+)\s*$", expr)
    assert match, expr
    return float(match.group(1))


def test_default_thresholds_are_the_rules_files_own() -> None:
    """Given values.yaml, Then every threshold names an alert whose expression ends in `> <that value>`:
    the values and the plain rules file agree, and the template has a number to replace."""
    thresholds = yaml.safe_load((CHART / "values.yaml").read_text())["prometheusRule"]["thresholds"]
    exprs = {rule["alert"]: rule["expr"] for group in yaml.safe_load(RULES.read_text())["groups"]
             for rule in group["rules"] if "alert" in rule}
    assert thresholds and set(thresholds) <= set(exprs)
    for alert, value in thresholds.items():
        assert threshold_of(exprs[alert]) == value, alert


def test_thresholds_replace_only_their_alerts_number(render: Render) -> None:
    """Given new thresholds and extra labels, Then the named alerts compare against them, every other rule is
    unchanged, and the labels are on the PrometheusRule."""
    (rule,) = of_kind(render(*ALL_ON, "--set", "prometheusRule.thresholds.KctWorkloadRequestLatencyHigh=250",
                             "--set-json", "prometheusRule.thresholds.KctReceiverRefusing=0.25",
                             "--set", "prometheusRule.labels.release=monitoring"), "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "monitoring"
    given = {r.get("alert"): r for group in yaml.safe_load(RULES.read_text())["groups"] for r in group["rules"]}
    for group in rule["spec"]["groups"]:
        for rendered in group["rules"]:
            name = rendered["alert"]
            if name in {"KctWorkloadRequestLatencyHigh", "KctReceiverRefusing"}:
                assert threshold_of(rendered["expr"]) == {"KctWorkloadRequestLatencyHigh": 250,
                                                          "KctReceiverRefusing": 0.25}[name]
                assert rendered["expr"].rsplit(">", 1)[0] == given[name]["expr"].rsplit(">", 1)[0]
            else:
                assert rendered == given[name]


def test_service_monitor_scrapes_the_receivers_with_their_job(render: Render) -> None:
    """Given serviceMonitor.enabled, Then it selects the operator's receiver Services in every namespace, on
    the OTLP port's /metrics, with job from app.kubernetes.io/name (kct-receiver, what the rules select);
    listed namespaces, the scheme and a tlsConfig follow the values; by default https (receivers serve TLS by
    default), encrypted without verification (each issued receiver has its own CA)."""
    (monitor,) = of_kind(render(*ALL_ON), "ServiceMonitor")
    spec = monitor["spec"]
    assert spec["jobLabel"] == "app.kubernetes.io/name"
    assert spec["selector"]["matchLabels"] == {"app.kubernetes.io/name": "kct-receiver",
                                               "app.kubernetes.io/managed-by": "kct-operator"}
    assert spec["namespaceSelector"] == {"any": True}
    assert spec["endpoints"] == [{"port": "http-otlp", "path": "/metrics", "interval": "30s", "scheme": "https",
                                  "tlsConfig": {"insecureSkipVerify": True}}]
    assert 'job="kct-receiver"' in RULES.read_text()
    (narrow,) = of_kind(render("--set", "serviceMonitor.enabled=true", "--set", "serviceMonitor.namespaces={kafka}",
                               "--set", "serviceMonitor.tlsConfig.serverName=receiver.kafka.svc",
                               "--set", "serviceMonitor.tlsConfig.insecureSkipVerify=false"), "ServiceMonitor")
    assert narrow["spec"]["namespaceSelector"] == {"matchNames": ["kafka"]}
    assert narrow["spec"]["endpoints"][0]["scheme"] == "https"
    assert narrow["spec"]["endpoints"][0]["tlsConfig"] == {"serverName": "receiver.kafka.svc",
                                                           "insecureSkipVerify": False}
    (plain,) = of_kind(render("--set", "serviceMonitor.enabled=true", "--set", "serviceMonitor.scheme=http",
                              "--set", "serviceMonitor.tlsConfig=null"), "ServiceMonitor")
    assert plain["spec"]["endpoints"][0]["scheme"] == "http" and "tlsConfig" not in plain["spec"]["endpoints"][0]


def operator_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = of_kind(objects, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


def test_pod_monitor_scrapes_the_operators_metrics_port_with_its_job(render: Render) -> None:
    """Given podMonitor.enabled, Then it selects the operator's pods (the Deployment's selector) in the release's
    namespace, on the container's `metrics` port, which serves `--metrics-address` on metricsPort, with
    job="kct-operator"; with metricsPort 0 there is neither port, flag nor PodMonitor."""
    objects = render(*ALL_ON)
    (monitor,) = of_kind(objects, "PodMonitor")
    (deployment,) = of_kind(objects, "Deployment")
    spec = monitor["spec"]
    assert spec["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert spec["namespaceSelector"] == {"matchNames": ["kct-system"]}
    assert spec["podMetricsEndpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "30s",
                                            "relabelings": [{"targetLabel": "job", "replacement": "kct-operator"}]}]
    container = operator_container(objects)
    assert {"name": "metrics", "containerPort": 8081, "protocol": "TCP"} in container["ports"]
    assert "--metrics-address=0.0.0.0:8081" in container["args"]

    off = render(*ALL_ON, "--set", "metricsPort=0")
    assert not of_kind(off, "PodMonitor")
    assert [port["name"] for port in operator_container(off)["ports"]] == ["health"]
    assert not [arg for arg in operator_container(off)["args"] if arg.startswith("--metrics-address")]


def test_receiver_labels_and_port_match_the_monitor() -> None:
    """Given the receiver's Service as the operator renders it, Then it carries the labels and port name the
    ServiceMonitor selects (a rename on either side fails here)."""
    labels = child_labels("default", COMPONENT_RECEIVER, "1.0")
    assert labels["app.kubernetes.io/name"] == "kct-receiver" and MANAGED_BY == "kct-operator"
    assert PORT_NAME == "http-otlp"


@pytest.mark.parametrize(("args", "named"), [
    (("--set", "prometheusRule.thresholds.KctReceiverDown=1"), "KctReceiverDown"),
    (("--set", "serviceMonitor.scheme=ftp"), "scheme"),
])
def test_values_schema_rejects_unknown_thresholds_and_schemes(helm: Path, args: tuple[str, ...], named: str) -> None:
    """Given a threshold for an alert without one, or an unknown scheme, Then helm refuses, naming it."""
    proc = subprocess.run([str(helm), "template", "kct", str(CHART), "--kube-version", KUBE_VERSION, *args],
                          capture_output=True, text=True, check=False)
    assert proc.returncode != 0 and named in proc.stderr, proc.stderr
