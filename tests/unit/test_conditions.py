"""Condition conventions: lastTransitionTime moves only on a status change."""

from __future__ import annotations

from controllers.reconcilers import api, conditions
from controllers.reconcilers.conditions import false, true


def test_transition_time_moves_only_when_status_changes() -> None:
    first = conditions.merge(None, [true("Ready", "A", "a")], generation=1, now=1000)
    assert first[0]["lastTransitionTime"] == "1970-01-01T00:16:40Z"
    same_status = conditions.merge(first, [true("Ready", "B", "b")], generation=2, now=2000)
    assert same_status[0]["lastTransitionTime"] == first[0]["lastTransitionTime"]
    assert (same_status[0]["reason"], same_status[0]["observedGeneration"]) == ("B", 2)
    flipped = conditions.merge(same_status, [false("Ready", "C", "c")], generation=2, now=3000)
    assert flipped[0]["lastTransitionTime"] == "1970-01-01T00:50:00Z"


def test_conditions_set_by_others_are_kept() -> None:
    theirs = [
        {
            "type": "Theirs",
            "status": "True",
            "reason": "X",
            "message": "",
            "lastTransitionTime": "t",
            "observedGeneration": 1,
        }
    ]
    merged = conditions.merge(theirs, [true("Ready", "A", "a")], generation=1, now=0)
    assert [c["type"] for c in merged] == ["Ready", "Theirs"]


def test_transitions_are_status_or_reason_changes() -> None:
    before = conditions.merge(
        None, [true("Ready", "A", "a"), true("Accepted", "A", "a")], generation=1, now=0
    )
    after = conditions.merge(
        before,
        [true("Ready", "A", "new message"), false("Accepted", "B", "b")],
        generation=1,
        now=1,
    )
    assert [c["type"] for c in conditions.transitions(before, after)] == ["Accepted"]


def test_one_constructor_per_condition_type() -> None:
    """``Accepted`` reads the same wherever it is built; ``Ready`` and ``RenewBeforeHonored``
    carry the caller's reason and polarity."""
    assert conditions.accepted() == true(api.ACCEPTED, api.REASON_ACCEPTED, "the spec is valid")
    assert conditions.accepted("Unsupported", "no", ok=False) == false(
        api.ACCEPTED, "Unsupported", "no"
    )
    assert conditions.ready("R", "m", ok=True) == true(api.READY, "R", "m")
    assert conditions.ready("R", "m", ok=False) == false(api.READY, "R", "m")
    assert conditions.renew_before_honored("R", "m", ok=False) == false(
        api.RENEW_BEFORE_HONORED, "R", "m"
    )
