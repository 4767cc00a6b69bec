"""Events only on transitions (issue 13): what a cold start records per chain, and the rules
behind it. A condition that first appears True is no Event (the first reconcile found things as
they should be); one that first appears False is a new failure; a change of status or reason is
an Event; the policy announces the credentials it created; a first failed refresh while the
credentials are still valid is one Warning, not also a Normal Event of the same reason.

Each test names the mutation it catches."""

from __future__ import annotations

from typing import Any

from controllers.reconcilers import api, status
from controllers.reconcilers.conditions import Cond, false, true
from controllers.runtime import objects
from tests.support import memapi
from tests.unit import test_policy_reconciler as policies
from tests.unit import test_route_reconciler as routes
from tests.unit.test_policy_faults import session

NOW = policies.NOW


def write(
    obj: dict[str, Any], *updates: Cond, announce: tuple[str, ...] = ()
) -> list[tuple[str, str, str]]:
    """The Events one status write records about ``obj``, whose status becomes the one the
    server holds after it."""
    recorder = memapi.RecordedEvents()
    server = memapi.MemAPI()
    stored = server.put(api.BACKENDS, obj)
    status.write(
        server,
        recorder,
        stored,
        api.BACKENDS,
        fields={},
        updates=list(updates),
        now=NOW,
        event_types=("Ready",),
        announce=announce,
    )
    after = server.stored(api.BACKENDS, objects.namespace(obj), objects.name(obj))
    assert after is not None
    if "status" in after:
        obj["status"] = after["status"]
    return recorder.events


def backend() -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": "ServiceBackend",
        "metadata": {"name": "b", "namespace": "ns", "uid": "u", "generation": 1},
    }


def test_a_condition_that_first_appears_true_is_no_event() -> None:
    """Mutation caught: every first appearance an Event (the old rule: 4 Events per chain on a
    cold start, 3 of them saying all is well)."""
    assert write(backend(), true("Ready", "Fine", "all good")) == []


def test_a_condition_that_first_appears_false_is_a_warning() -> None:
    """Mutation caught: skipping every first appearance (a new failure unreported)."""
    assert write(backend(), false("Ready", "Broken", "it broke")) == [
        ("Warning", "Broken", "it broke")
    ]


def test_a_change_of_status_or_reason_is_an_event_and_a_message_change_is_not() -> None:
    """Mutation caught: treating a reason change, or a known condition, like a first one."""
    obj = backend()
    write(obj, true("Ready", "A", "a"))
    assert write(obj, true("Ready", "A", "another message")) == []
    assert write(obj, true("Ready", "B", "b")) == [("Normal", "B", "b")]
    assert write(obj, false("Ready", "C", "c")) == [("Warning", "C", "c")]
    assert write(obj, true("Ready", "B", "b")) == [("Normal", "B", "b")]


def test_an_announced_first_appearance_is_an_event() -> None:
    """Mutation caught: ``announce`` ignored."""
    assert write(backend(), true("Ready", "Fine", "made"), announce=("Ready",)) == [
        ("Normal", "Fine", "made")
    ]


# --- the policy ------------------------------------------------------------------------------


def test_a_policy_that_creates_its_credentials_records_one_event() -> None:
    """The one Event a new chain records: ``CredentialsReady`` when the policy created the
    derived Secret. Mutation caught: the policy not announcing what it created (no Event)."""
    world = policies.World()
    world.source.outcome = session(NOW, NOW + 3600, b"k2")
    world.reconcile()
    assert world.secret_writes(), "the derived Secret was created"
    (event,) = world.events.events
    assert event[:2] == ("Normal", "CredentialsReady")
    assert "rotator-bsp-p" in event[2]


def test_a_first_reconcile_that_finds_the_credentials_served_records_no_event() -> None:
    """A policy without a status whose derived Secret is in place and fresh (the status was
    lost, or written by another version): nothing was done, nothing to say. Mutation caught:
    announcing every first ``Ready`` (an Event though nothing was created)."""
    world = policies.World()
    world.serve(policies.FRESH)
    world.reconcile()
    assert world.secret_writes() == [], "nothing created"
    assert world.reason(api.READY) == ("True", "CredentialsReady")
    assert world.events.events == []


def test_a_restart_with_nothing_changed_records_no_event() -> None:
    """Mutation caught: an Event per reconcile rather than per transition."""
    world = policies.World()
    world.serve(policies.FRESH)
    world.reconcile()  # the status is cached from here on (World.reconcile)
    world.reconcile()
    assert world.events.events == []


def test_a_first_failed_refresh_while_valid_is_one_warning() -> None:
    """``Ready`` True/CredentialsReady → True/RotationFailed. Mutation caught: the status write
    also recording the transition (a Normal ``RotationFailed`` beside the Warning)."""
    world = policies.World()
    world.serve(policies.FRESH)
    world.reconcile()
    world.serve(policies.DUE)  # source outcome: "STS down"
    world.reconcile()
    assert world.reason(api.READY) == ("True", "RotationFailed")
    assert world.event_reasons() == [("Warning", "RotationFailed")]


def test_a_first_failed_refresh_with_nothing_served_keeps_its_reason_event() -> None:
    """``Ready`` first appears False with the provider's reason: that Warning is kept (users
    look for it) beside the first ``RotationFailed``. Mutation caught: suppressing the status
    Event for every first failure rather than only the RotationFailed one."""
    world = policies.World()
    world.reconcile()  # nothing served, source outcome: "STS down"
    reasons = world.event_reasons()
    assert ("Warning", "RotationFailed") in reasons
    assert ("Warning", world.condition(api.READY)["reason"]) in reasons
    assert len(reasons) == 2


# --- the route -------------------------------------------------------------------------------


def test_a_route_first_programmed_and_resolved_records_no_event() -> None:
    """Mutation caught: first ``ResolvedRefs`` and ``Programmed`` as Events (2 per route)."""
    world = routes.World()
    world.chain("good", {"apiKey": b"sk-good-1"})
    world.route("good")
    world.reconcile()
    assert world.condition(api.PROGRAMMED)["status"] == "True"
    assert world.recorder.events == []


def test_a_route_first_written_without_a_backend_warns() -> None:
    """Mutation caught: skipping first appearances whatever their status."""
    world = routes.World()
    world.route("missing")
    world.reconcile()
    assert [(t, r) for t, r, _ in world.recorder.events] == [("Warning", "BackendNotFound")]
