"""The conditions helper shared by the controllers."""

from __future__ import annotations

import datetime as dt

from kct.controller.conditions import Reason, find_condition, remove_condition, set_condition

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
T1 = T0 + dt.timedelta(minutes=5)


def test_transition_time_kept_when_status_unchanged() -> None:
    """Given Ready=True since T0, When set True again at T1 with a new message, Then the transition
    time stays T0 and the message changes."""
    first = set_condition([], "Ready", True, Reason.RECONCILED, "a", observed_generation=1, now=T0)
    second = set_condition(first, "Ready", True, Reason.RECONCILED, "b", observed_generation=2, now=T1)
    assert second == [{
        "type": "Ready", "status": "True", "reason": "Reconciled", "message": "b",
        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 2,
    }]


def test_transition_time_moves_when_status_changes() -> None:
    """Given Ready=True since T0, When set False at T1, Then the transition time is T1."""
    first = set_condition([], "Ready", True, Reason.RECONCILED, "", now=T0)
    second = set_condition(first, "Ready", False, Reason.KAFKA_UNREACHABLE, "down", now=T1)
    ready = find_condition(second, "Ready")
    assert ready is not None
    assert (ready["status"], ready["reason"], ready["lastTransitionTime"]) == (
        "False", "KafkaUnreachable", "2026-01-01T00:05:00Z"
    )


def test_other_conditions_untouched_and_removable() -> None:
    """Given two conditions, When one is set or removed, Then the other keeps its place and value."""
    conditions = set_condition([], "Ready", True, Reason.RECONCILED, "", now=T0)
    conditions = set_condition(conditions, "IntervalCapped", False, Reason.INTERVAL_WITHIN_BROKER_CAP, "", now=T0)
    updated = set_condition(conditions, "Ready", False, Reason.CONFLICT, "x", now=T1)
    assert [c["type"] for c in updated] == ["Ready", "IntervalCapped"]
    assert updated[1] == conditions[1]
    assert [c["type"] for c in remove_condition(updated, "Ready")] == ["IntervalCapped"]
