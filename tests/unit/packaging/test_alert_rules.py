"""The alert rules (helm/kct/rules/kct.rules.yaml) and every PromQL expression the chart ships, with promtool.

`promtool check rules` parses the file (and every expression in it) as Prometheus would load it; `promtool
test rules` runs tests/promtool/<Alert>.test.yaml, one file per alert with a case where it fires and one where
it stays quiet. The dashboards' expressions have no server to run on here, so they are checked the way
Prometheus would parse them: as recording rules of a generated file, after Grafana's variables are replaced
by values of the right kind. Running them against a Prometheus holding data is the e2e part of issue 43.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_support import CHART, REPO
from preconditions import missing_precondition
from script_loader import load_script

from kct.receiver.config import ObservabilityConfig
from kct.receiver.telemetry import Telemetry

RULES = CHART / "rules" / "kct.rules.yaml"
PROMTOOL_TESTS = REPO / "tests" / "promtool"
# Grafana's built-in and our own variables, replaced by values PromQL accepts where they stand.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}
LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.*), *(?P<label>\w+)\)$")


@pytest.fixture(scope="module")
def promtool() -> Path:
    """The promtool `make stack-install` builds (dev/stack/prometheus.py, cached); never built here."""
    stack = load_script(REPO / "dev" / "stack" / "prometheus.py")
    path: Path = stack.binary("promtool")
    if not path.is_file():
        missing_precondition(f"promtool {stack.PROMETHEUS_VERSION} is not at {path} (make stack-install builds it)")
    return path


def run(promtool: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(promtool), *args], capture_output=True, text=True, check=False, cwd=cwd, timeout=120)


def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def test_rules_file_passes_promtool_check(promtool: Path) -> None:
    """Given the rules file, When `promtool check rules` runs (with its linter), Then it succeeds."""
    proc = run(promtool, "check", "rules", "--lint-fatal", str(RULES))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in proc.stdout


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    """Given the alerts, Then each has tests/promtool/<alert>.test.yaml with a case expecting it to fire and
    one expecting nothing, and no test file names an alert that does not exist."""
    names = {rule["alert"] for rule in alerts()}
    files = {path.name.removesuffix(".test.yaml"): path for path in PROMTOOL_TESTS.glob("*.test.yaml")}
    assert set(files) == names
    for name, path in files.items():
        cases = [case for test in yaml.safe_load(path.read_text())["tests"] for case in test["alert_rule_test"]]
        assert {case["alertname"] for case in cases} == {name}, path
        assert any(case["exp_alerts"] for case in cases), f"{path}: no case where {name} fires"
        assert any(not case["exp_alerts"] for case in cases), f"{path}: no case where {name} stays quiet"


@pytest.mark.parametrize("test_file", sorted(PROMTOOL_TESTS.glob("*.test.yaml")), ids=lambda p: p.stem)
def test_promtool_unit_tests_pass(promtool: Path, test_file: Path) -> None:
    """Given an alert's unit test file, When `promtool test rules` runs it, Then every case passes."""
    proc = run(promtool, "test", "rules", test_file.name, cwd=test_file.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout + proc.stderr


def test_a_failing_expectation_fails_promtool_test(promtool: Path, tmp_path: Path) -> None:
    """Given a unit test expecting an alert the input cannot raise, When run, Then promtool fails: the unit
    tests above can fail."""
    case = yaml.safe_load((PROMTOOL_TESTS / "KctReceiverDown.test.yaml").read_text())
    case["rule_files"] = [str(RULES)]
    quiet = case["tests"][1]
    quiet["alert_rule_test"][0]["exp_alerts"] = case["tests"][0]["alert_rule_test"][0]["exp_alerts"]
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(case))
    proc = run(promtool, "test", "rules", "t.yaml", cwd=tmp_path)
    assert proc.returncode != 0 and "FAILED" in proc.stdout + proc.stderr


def dashboard_expressions() -> list[tuple[str, str]]:
    """(where, PromQL) of every panel query and query variable of the committed dashboards."""
    found = []
    for path in sorted((CHART / "dashboards").glob("*.json")):
        dashboard = json.loads(path.read_text())
        for variable in dashboard["templating"]["list"]:
            if variable["type"] == "query":
                match = LABEL_VALUES.match(variable["query"])
                assert match, f"{path.name} ${variable['name']}: not label_values(selector, label)"
                expr = f"count by ({match['label']}) ({match['selector']})"
                found.append((f"{path.stem} ${variable['name']}", expr))
        for panel in dashboard["panels"]:
            for target in panel.get("targets", []):
                found.append((f"{path.stem} {panel['title']} {target['refId']}", target["expr"]))
    return found


def as_promql(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    return re.sub(r"\$\w+", ".*", expr)  # the query variables only ever stand in regex matchers


def check_as_recording_rules(promtool: Path, tmp_path: Path, exprs: list[tuple[str, str]]) -> str:
    rules = [{"record": f"kct:check:{index}", "expr": expr} for index, (_, expr) in enumerate(exprs)]
    path = tmp_path / "expressions.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "expressions", "rules": rules}]}))
    proc = run(promtool, "check", "rules", str(path))
    return proc.stdout + proc.stderr if proc.returncode else ""


def test_every_dashboard_and_alert_expression_parses(promtool: Path, tmp_path: Path) -> None:
    """Given every panel query, query variable and alert expression the chart ships (the variables replaced),
    When checked by promtool as recording rules, Then all parse."""
    exprs = [(where, as_promql(expr)) for where, expr in dashboard_expressions()]
    exprs += [(rule["alert"], rule["expr"]) for rule in alerts()]
    assert len(exprs) > 40
    assert not [expr for _, expr in exprs if "$" in expr]
    assert check_as_recording_rules(promtool, tmp_path, exprs) == ""


def test_a_broken_expression_fails_the_parse_check(promtool: Path, tmp_path: Path) -> None:
    """Given one expression with a syntax error among good ones, Then the check fails naming it."""
    broken = 'sum by (reason) (rate(kct_receiver_rejections_total{job="kct-receiver"}[5m])'
    errors = check_as_recording_rules(promtool, tmp_path, [("ok", "up"), ("broken", broken)])
    assert '"kct:check:1": could not parse expression' in errors, errors
    assert "kct:check:0" not in errors


def receiver_series() -> set[str]:
    """Every series name a receiver with all layers on (and attribution) exposes, observed once each."""
    telemetry = Telemetry(ObservabilityConfig(), topic="telemetry")
    telemetry.track_connections(lambda: 1, lambda: 0)
    telemetry.track_attribution()
    telemetry.track_state(lambda: 0, lambda: 0)
    telemetry.track_sink(lambda: 0, lambda: True)
    telemetry.request_done("POST", "/v1/metrics", 200, 0.01, 100)
    telemetry.rejected("rate_limited", 429)
    telemetry.connection_closed("idle_timeout")
    telemetry.stage("decode", 0.001)
    telemetry.push_accepted(1, 0, 0, False)
    telemetry.throttled("rate_limited", 1.0)
    telemetry.sent(0.01, "kafka_timeout")
    telemetry.attributed("pod")
    text = telemetry.render().decode()
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}


def test_receiver_series_in_dashboards_and_rules_are_the_receivers_own() -> None:
    """Given the dashboards' and rules' expressions, Then every receiver series they name (kct_receiver_*,
    http_server_*, messaging_client_*) is one the receiver exposes: a renamed metric fails here, not on a
    blank panel."""
    exposed = receiver_series()
    exprs = [expr for _, expr in dashboard_expressions()] + [rule["expr"] for rule in alerts()]
    named = {name for expr in exprs for name in re.findall(r"\b((?:kct_receiver|http_server|messaging_client)_\w+)",
                                                            expr)}
    assert len(named) >= 10
    assert named - exposed == set()


def operator_series() -> set[str]:
    """Every series name the operator's /metrics exposes once each metric has a sample."""
    from prometheus_client.exposition import generate_latest

    from kct.controller.kernel import Outcome
    from kct.controller.metrics import OperatorMetrics

    metrics = OperatorMetrics()
    ready = {"conditions": [{"type": "Ready", "status": "False", "reason": "KafkaUnreachable"}]}
    metrics.observe_reconcile("TelemetryReceiver", 0.1, Outcome(ready, retry_after=1.0, error="down"))
    metrics.observe_export("ns", "tr", {"windowsSent": 1, "windowsFailed": 1})
    text = generate_latest(metrics.registry).decode()
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}


def test_operator_series_in_dashboards_and_rules_are_the_operators_own() -> None:
    """Given the dashboards' and rules' expressions, Then every operator series they name (kct_operator_*) is
    one the operator's /metrics exposes."""
    exprs = [expr for _, expr in dashboard_expressions()] + [rule["expr"] for rule in alerts()]
    named = {name for expr in exprs for name in re.findall(r"\b(kct_operator_\w+)", expr)}
    assert len(named) >= 3
    assert named - operator_series() == set()


def test_operations_doc_lists_every_alert() -> None:
    """Given docs/operations.md's alert table, Then it names every alert of the rules file, and no other."""
    doc = (REPO / "docs" / "operations.md").read_text()
    listed = set(re.findall(r"^\| `(Kct\w+)` \|", doc, re.MULTILINE))
    assert listed == {rule["alert"] for rule in alerts()}
