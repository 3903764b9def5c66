"""kct.api.matching against the broker's rule (ClientMetricsInstanceMetadata.isMatch, KIP-714): every
selector's regex must match the whole value, a missing value matches nothing, no selectors match all."""

from __future__ import annotations

from kct.api.matching import SelectorOutcome, broker_selectors, match_client

JAVA = {"client_id": "checkout-producer-1", "client_software_name": "apache-kafka-java",
        "client_software_version": "3.9.0", "client_source_address": "10.1.0.5", "client_source_port": "40000",
        "client_instance_id": "b69cc35a-7a54-4790-aa69-cc2bd4ee4538"}


def test_no_selectors_match_every_client_even_one_without_labels() -> None:
    assert match_client({}, JAVA).matched
    assert match_client({}, {}).matched


def test_regexes_are_anchored_at_both_ends() -> None:
    assert not match_client({"client_id": "checkout"}, JAVA).matched  # a prefix is not the whole value
    assert not match_client({"client_id": "producer-1"}, JAVA).matched
    assert match_client({"client_id": "checkout-.*"}, JAVA).matched
    # an alternation is anchored as a whole (a naive "^a|b$" would match "checkout-..." by its first branch)
    assert not match_client({"client_id": "checkout|x"}, JAVA).matched


def test_every_selector_must_match() -> None:
    selectors = {"client_software_name": "apache-kafka-java", "client_software_version": "3\\.7\\..*"}
    result = match_client(selectors, JAVA)
    assert not result.matched
    assert result.selectors == (
        SelectorOutcome("client_software_name", "apache-kafka-java", "apache-kafka-java", True),
        SelectorOutcome("client_software_version", "3\\.7\\..*", "3.9.0", False),
    )
    assert match_client({**selectors, "client_software_version": "3\\..*"}, JAVA).matched


def test_a_missing_value_matches_nothing_not_even_dot_star() -> None:
    result = match_client({"client_id": ".*"}, {"client_software_name": "librdkafka"})
    assert not result.matched
    assert result.selectors[0].value is None
    assert match_client({"client_id": ".*"}, {"client_id": ""}).matched  # an empty value is a value


def test_re2_syntax_is_used_and_a_pattern_re2_refuses_matches_nobody() -> None:
    assert match_client({"client_source_address": "10\\.1\\.0\\.\\d+"}, JAVA).matched
    assert not match_client({"client_id": "(?<=x)checkout.*"}, JAVA).matched  # look-behind: not RE2


def test_spec_keys_become_broker_keys() -> None:
    assert broker_selectors({"clientId": "a.*", "clientSoftwareName": "librdkafka"}) == {
        "client_id": "a.*", "client_software_name": "librdkafka"}
    assert broker_selectors(None) == {}
