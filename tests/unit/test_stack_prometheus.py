"""dev/stack/prometheus.py's configurations: the throwaway server's static scrape jobs and the node stack's
Kubernetes discovery, checked with promtool; the node's jobs select what the operator and the chart label."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from preconditions import missing_precondition
from script_loader import load_script

from kct.render.names import COMPONENT_RECEIVER, child_labels
from kct.render.receiver_workload import PORT_NAME

REPO = Path(__file__).resolve().parents[2]
stack = load_script(REPO / "dev" / "stack" / "prometheus.py")


@pytest.fixture(scope="module")
def promtool() -> Path:
    path: Path = stack.binary("promtool")
    if not path.is_file():
        missing_precondition(f"promtool {stack.PROMETHEUS_VERSION} is not at {path} (make stack-install builds it)")
    return path


def check_config(promtool: Path, text: str, tmp_path: Path) -> None:
    config = tmp_path / "prometheus.yml"
    config.write_text(text)
    proc = subprocess.run([str(promtool), "check", "config", "--syntax-only", str(config)], capture_output=True,
                          text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_static_scrape_jobs_carry_their_target_labels(promtool: Path, tmp_path: Path) -> None:
    """Given a job with a target and labels, Then promtool accepts the config and the job scrapes the target
    with those labels every `scrape_interval`."""
    text = stack.config_text({"kct-receiver": ["127.0.0.1:4318"]}, "1s", {"kct-receiver": {"namespace": "ns"}})
    check_config(promtool, text, tmp_path)
    (job,) = json.loads(text)["scrape_configs"]
    assert job["job_name"] == "kct-receiver" and job["scrape_interval"] == "1s"
    assert job["static_configs"] == [{"targets": ["127.0.0.1:4318"], "labels": {"namespace": "ns"}}]


def test_node_stack_jobs_keep_the_receiver_pods_and_the_operator_pods(promtool: Path, tmp_path: Path) -> None:
    """Given the node stack's config, Then promtool accepts it; the kct-receiver job keeps pods labelled as the
    operator labels its receivers, on the port it names, and the kct-operator job the chart's operator pods on
    `metrics`; both label targets with namespace and pod, through the stack's kubeconfig."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("{}")
    text = stack.node_config_text(kubeconfig)
    check_config(promtool, text, tmp_path)
    jobs = {job["job_name"]: job for job in json.loads(text)["scrape_configs"]}
    assert set(jobs) == {"kct-receiver", "kct-operator"}
    labels = child_labels("telemetry", COMPONENT_RECEIVER, "1.0")
    for name, port in (("kct-receiver", PORT_NAME), ("kct-operator", "metrics")):
        job = jobs[name]
        assert job["kubernetes_sd_configs"] == [{"role": "pod", "kubeconfig_file": str(kubeconfig)}]
        keeps = {rule["source_labels"][0]: rule["regex"]
                 for rule in job["relabel_configs"] if rule.get("action") == "keep"}
        assert keeps["__meta_kubernetes_pod_container_port_name"] == port
        targets = {rule["target_label"] for rule in job["relabel_configs"] if "target_label" in rule}
        if name == "kct-receiver":
            # TLS by default: the scheme and path the receiver pods announce in their annotations
            assert targets == {"namespace", "pod", "__scheme__", "__metrics_path__"}
            assert job["tls_config"] == {"insecure_skip_verify": True}
            for key in ("app.kubernetes.io/name", "app.kubernetes.io/managed-by"):
                assert keeps["__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9]", "_", key)] == labels[key]
        else:
            assert targets == {"namespace", "pod"}
            assert keeps["__meta_kubernetes_pod_label_app_kubernetes_io_component"] == "operator"
