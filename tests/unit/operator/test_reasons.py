"""The one error-to-Reason map both controllers read (`kct.controller.reasons`)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kct.api.subscription import ClientMetricsSubscriptionSpec
from kct.controller.children import ApplyRefused, KindNotInstalled
from kct.controller.conditions import ConditionType, Reason
from kct.controller.kernel import ConnectionProblem, SecretMissing
from kct.controller.reasons import (
    KAFKA_SLOWDOWN,
    apply_stop,
    invalid_spec_stop,
    kafka_stop,
    reason_for,
)
from kct.kafka.errors import (
    InvalidClientMetricsConfigError,
    KafkaAdminError,
    KafkaNotAuthorizedError,
    KafkaUnreachableError,
)

SERVERS = "kafka:9092"
REFUSED = "spec.topic: the broker refused topic 'telemetry'"


def validation_error() -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        ClientMetricsSubscriptionSpec.model_validate({"metrics": ["org.apache.kafka."], "intervalMs": "often"})
    return caught.value


@pytest.mark.parametrize(
    ("error", "reason", "retry_scale", "warn", "message"),
    [
        (SecretMissing("secretRef: Secret ns/kafka not found"), Reason.KAFKA_CONNECTION_INVALID, KAFKA_SLOWDOWN,
         True, "spec.kafka: secretRef: Secret ns/kafka not found"),
        (ConnectionProblem("not set and the operator has no default cluster"), Reason.KAFKA_CONNECTION_INVALID,
         KAFKA_SLOWDOWN, True, "spec.kafka: not set and the operator has no default cluster"),
        (InvalidClientMetricsConfigError("[Error 40] InvalidConfigurationError: retention.ms"), Reason.KAFKA_REJECTED,
         None, True, f"{REFUSED}: [Error 40] InvalidConfigurationError: retention.ms"),
        (KafkaNotAuthorizedError("TopicAuthorizationFailedError"), Reason.KAFKA_NOT_AUTHORIZED, KAFKA_SLOWDOWN,
         False, f"KafkaNotAuthorized: {SERVERS}: TopicAuthorizationFailedError"),
        (KafkaUnreachableError("NoBrokersAvailable"), Reason.KAFKA_UNREACHABLE, 1.0, False,
         f"KafkaUnreachable: {SERVERS}: NoBrokersAvailable"),
        (KafkaAdminError("UnknownServerError"), Reason.KAFKA_ERROR, 1.0, False,
         f"KafkaError: {SERVERS}: UnknownServerError"),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else None,
)
def test_each_kafka_problem_has_its_reason_retry_warning_and_message(
    error: KafkaAdminError | ConnectionProblem, reason: Reason, retry_scale: float | None, warn: bool, message: str
) -> None:
    """Given an error talking to Kafka, When mapped, Then the stop carries its reason, how slowly it is retried
    (None: not at all), whether it is announced, and a message naming the cluster or what was refused."""
    stop = kafka_stop(error, servers=SERVERS, refused=REFUSED, also=ConditionType.TOPIC_READY)
    assert (stop.reason, stop.retry_scale, stop.warn, stop.message) == (reason, retry_scale, warn, message)
    assert stop.also is ConditionType.TOPIC_READY
    assert kafka_stop(error, servers=SERVERS, refused=REFUSED).also is None


def test_an_invalid_spec_names_the_field_and_what_was_left_alone() -> None:
    """Given the spec model's error, or a ValueError from a config model, Then InvalidSpec, never retried,
    announced, with the field and what was untouched in the message."""
    stop = invalid_spec_stop(validation_error(), untouched="nothing was sent to Kafka")
    assert (stop.reason, stop.retry_scale, stop.warn) == (Reason.INVALID_SPEC, None, True)
    assert stop.message == "spec.intervalMs: Input should be a valid integer (got 'often'); nothing was sent to Kafka"
    refused = invalid_spec_stop(ValueError("spec.receiver.limits: too small"), untouched="nothing was applied")
    assert (refused.reason, refused.retry_scale, refused.message) == (
        Reason.INVALID_SPEC, None, "spec.receiver.limits: too small; nothing was applied")


@pytest.mark.parametrize("error", [ApplyRefused("Service s: port 4318 is taken"), KindNotInstalled("PDB not served")])
def test_an_api_server_refusal_is_retried_and_announced_with_its_message(error: Exception) -> None:
    assert isinstance(error, ApplyRefused | KindNotInstalled)
    stop = apply_stop(error)
    assert (stop.reason, stop.retry_scale, stop.warn, stop.message) == (Reason.APPLY_FAILED, 1.0, True, str(error))


def test_a_subclass_reads_as_its_nearest_mapped_class_and_an_unmapped_error_is_refused() -> None:
    """Given errors the table does not list by name, Then the nearest listed class decides (the ValueErrors
    that have their own entry are not read as InvalidSpec), and an error outside the map is a TypeError."""

    class BrokerGone(KafkaUnreachableError):
        pass

    assert reason_for(BrokerGone("gone")).reason is Reason.KAFKA_UNREACHABLE
    assert reason_for(SecretMissing("gone")).reason is Reason.KAFKA_CONNECTION_INVALID
    for value_error in (ConnectionProblem("x"), ApplyRefused("x"), InvalidClientMetricsConfigError("x")):
        assert reason_for(value_error).reason is not Reason.INVALID_SPEC, type(value_error).__name__
    with pytest.raises(TypeError, match="RuntimeError"):
        reason_for(RuntimeError("bug"))

