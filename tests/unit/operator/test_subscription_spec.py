"""The ClientMetricsSubscription spec model: what it accepts, and how it says no."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from kct.api.subscription import ClientMetricsSubscriptionSpec, effective_subscription_name
from kct.validation import format_validation_error

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "subscriptions"


def parse(spec: dict[str, Any]) -> ClientMetricsSubscriptionSpec:
    return ClientMetricsSubscriptionSpec.model_validate(spec)


def problem(spec: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        parse(spec)
    return format_validation_error(caught.value)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_examples_parse(path: Path) -> None:
    """Given an example manifest, When its spec is parsed, Then it is valid and round-trips."""
    manifest = yaml.safe_load(path.read_text())
    spec = parse(manifest["spec"])
    assert parse(spec.to_kube()) == spec


def test_defaults() -> None:
    """Given only metrics, When parsed, Then the interval is 5 minutes and every client matches."""
    spec = parse({"metrics": ["*"]})
    assert spec.interval_ms == 300_000
    assert spec.match is None
    assert spec.to_kube() == {"metrics": ["*"], "intervalMs": 300000}


def test_empty_metrics_is_valid() -> None:
    """Given metrics: [], When parsed, Then it is a valid subscription to nothing."""
    assert parse({"metrics": []}).metrics == []


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"metrics": ["*"], "intervalMs": 50}, "spec.intervalMs: Input should be greater than or equal to 100"),
        ({"metrics": ["*"], "intervalMs": 4_000_000}, "spec.intervalMs: Input should be less than or equal to 3600000"),
        ({"metrics": [""]}, "spec.metrics.0: String should have at least 1 character"),
        ({"metrics": ["a,b"]}, "must not contain ','"),
        ({"metrics": ["*", "org.apache.kafka."]}, "'*' (all metrics) must be the only entry"),
        ({"metrics": ["*"], "match": {"clientHost": "x"}}, "spec.match.clientHost: Extra inputs are not permitted"),
        ({"metrics": ["*"], "intervalMs": "1000"}, "spec.intervalMs: Input should be a valid integer"),
        ({"metrics": ["*"], "subscriptionName": "has space"}, "spec.subscriptionName: String should match pattern"),
        ({"metrics": ["*"], "typo": 1}, "spec.typo: Extra inputs are not permitted"),
    ],
)
def test_invalid_specs_name_the_field(spec: dict[str, Any], expected: str) -> None:
    """Given an invalid spec, When parsed, Then the error names the field and the rule."""
    assert expected in problem(spec)


def test_regex_checked_with_re2() -> None:
    """Given a negative look-ahead (valid for Python's re, not for RE2), When parsed, Then the error names the
    field, the value and RE2's reason."""
    message = problem({"metrics": ["*"], "match": {"clientId": "(?!a)b"}})
    assert message.startswith("spec.match.clientId: '(?!a)b' is not a valid RE2 regular expression")
    assert "invalid perl operator" in message


def test_unbalanced_regex() -> None:
    """Given an unbalanced parenthesis, When parsed, Then RE2's 'missing )' is reported."""
    assert "missing )" in problem({"metrics": ["*"], "match": {"clientSoftwareVersion": "2.(1"}})


def test_selector_must_not_contain_separators() -> None:
    """Given a regex with ',' (the broker's list separator), When parsed, Then it is refused."""
    assert "must not contain ',' or '='" in problem({"metrics": ["*"], "match": {"clientId": "a{1,3}"}})


def test_spec_is_frozen() -> None:
    """Given a parsed spec, When a field is assigned, Then it refuses (specs are values)."""
    spec = parse({"metrics": ["*"]})
    with pytest.raises(ValidationError):
        spec.interval_ms = 5  # type: ignore[misc]


def test_effective_subscription_name() -> None:
    """Given a spec with and without subscriptionName, Then the name defaults to metadata.name."""
    assert effective_subscription_name({"subscriptionName": "legacy_sub"}, "cr") == "legacy_sub"
    assert effective_subscription_name({"metrics": []}, "cr") == "cr"
    assert effective_subscription_name(None, "cr") == "cr"
