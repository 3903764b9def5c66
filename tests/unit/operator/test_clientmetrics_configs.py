"""The broker's CLIENT_METRICS config format: spec -> configs, configs -> spec, and the diff."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kct.api.subscription import MATCH_SELECTOR_KEYS, ClientMetricsSubscriptionSpec
from kct.kafka.clientmetrics import config_changes, desired_configs, parse_configs


def spec(**fields: object) -> ClientMetricsSubscriptionSpec:
    return ClientMetricsSubscriptionSpec.model_validate({"metrics": ["*"], **fields})


def test_desired_configs_use_broker_names() -> None:
    """Given a spec with selectors, Then metrics and match are comma-separated with snake_case keys."""
    configs = desired_configs(spec(
        metrics=["org.apache.kafka.producer.", "org.apache.kafka.consumer."],
        intervalMs=15000,
        match={"clientId": "checkout-.*", "clientSoftwareVersion": "3\\.7\\..*"},
    ))
    assert configs == {
        "metrics": "org.apache.kafka.producer.,org.apache.kafka.consumer.",
        "interval.ms": "15000",
        "match": "client_id=checkout-.*,client_software_version=3\\.7\\..*",
    }


def test_no_match_means_no_match_config() -> None:
    """Given no selectors, Then `match` is not among the desired configs (it gets deleted)."""
    assert desired_configs(spec()) == {"metrics": "*", "interval.ms": "300000"}
    assert desired_configs(spec(metrics=[]))["metrics"] == ""


def test_changes_only_what_differs() -> None:
    """Given a broker with the same metrics written differently and another interval, When diffed,
    Then only interval.ms is set and the stray match is deleted."""
    desired = desired_configs(spec(metrics=["a.", "b."], intervalMs=1000))
    actual = {"metrics": "a., b.", "interval.ms": "2000", "match": "client_id=x"}
    changes = config_changes(desired, actual)
    assert changes.set_configs == {"interval.ms": "1000"}
    assert changes.delete_configs == ("match",)


def test_nothing_to_change() -> None:
    """Given a broker equal to the spec (selectors in another order), Then there is nothing to send."""
    desired = desired_configs(spec(match={"clientId": "a", "clientSoftwareName": "b"}))
    actual = {"metrics": "*", "interval.ms": "300000", "match": "client_software_name=b,client_id=a"}
    assert not config_changes(desired, actual)


def test_absent_subscription_gets_everything() -> None:
    """Given no such resource on the broker, Then every desired config is set."""
    desired = desired_configs(spec(metrics=[]))
    assert config_changes(desired, {}).set_configs == desired


def test_unknown_selector_is_kept_aside() -> None:
    """Given a broker match with a selector we do not know, When parsed, Then it lands in `unknown`."""
    parsed = parse_configs({"metrics": "a", "match": "client_id=x,principal=y"})
    assert parsed.match == {"clientId": "x"}
    assert parsed.unknown == {"match:principal=y": "principal=y"}


_regex = st.from_regex(r"[A-Za-z0-9_-]{1,10}(\.\*)?", fullmatch=True)
_prefix = st.from_regex(r"[a-z][a-z0-9.]{0,20}", fullmatch=True)


@given(
    metrics=st.lists(_prefix, max_size=5),
    interval=st.integers(100, 3_600_000),
    match=st.dictionaries(st.sampled_from(sorted(MATCH_SELECTOR_KEYS)), _regex, max_size=6),
)
def test_configs_round_trip_to_spec(metrics: list[str], interval: int, match: dict[str, str]) -> None:
    """Given any valid spec, When turned into broker configs and parsed back, Then the spec is the same."""
    original = spec(metrics=metrics, intervalMs=interval, **({"match": match} if match else {}))
    back = ClientMetricsSubscriptionSpec.model_validate(parse_configs(desired_configs(original)).to_spec())
    assert back == original
