"""The counts the kind suite's "nothing minted again, nothing rewritten" claims rest on
(tests/kind/history.py), its "no object reconciled by two replicas at once" from the reconcile
logs (tests/support/reconcilelog.py), and the rule that turns a broken setup's skip into a failure
(tests/support/required.py): pure logic, checked here so that a blind spot shows without a
cluster. Each test names the deliberate break it fails on."""

from __future__ import annotations

import json
from typing import Any

import pytest

from controllers.reconcilers import api as rapi
from controllers.runtime import clock as clocks
from tests.kind.history import (
    POLICY_LABEL,
    ROUTE_LABEL,
    Credentials,
    RouteConfigs,
    balanced_end,
    quiet_start,
    written,
)
from tests.kind.watching import Seen
from tests.support import required
from tests.support.reconcilelog import last_done, object_overlaps, reconciles, started


def derived(version: str, credential: str, issued: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    annotations = {
        rapi.ISSUED_AT_ANNOTATION: issued,
        rapi.EXPIRATION_ANNOTATION: "2026-01-01T01:00:00Z",
        rapi.CREDENTIAL_HASH_ANNOTATION: credential,
    }
    return {
        "metadata": {
            "name": "rotator-bsp-p",
            "resourceVersion": version,
            "labels": {POLICY_LABEL: "p"},
            "annotations": annotations,
        }
    }


def config(version: str, digest: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "rotator-route-r",
            "resourceVersion": version,
            "labels": {ROUTE_LABEL: "r"},
            "annotations": {rapi.CONFIG_HASH_ANNOTATION: digest},
        }
    }


class Readings:
    """Exchanges and Secret versions as the stand-ins and the watch would answer a window's
    successive readings, each of which reads both once (in either order); the last step
    repeats."""

    def __init__(self, steps: list[tuple[int, list[Seen]]]) -> None:
        self.steps = steps
        self._calls = 0
        self._events = 0

    @property
    def at(self) -> int:
        """Readings taken so far."""
        return max(self._calls, self._events)

    def calls(self) -> int:
        self._calls = min(self._calls + 1, len(self.steps))
        return self.steps[self._calls - 1][0]

    def events(self) -> list[Seen]:
        self._events = min(self._events + 1, len(self.steps))
        return self.steps[self._events - 1][1]


def renewed(n: int) -> list[Seen]:
    """The derived Secret's first version, then ``n`` new credentials."""
    return [Seen(1.0, "ADDED", derived("1", "h0"))] + [
        Seen(2.0 + i, "MODIFIED", derived(str(2 + i), f"h{i + 1}", f"2026-01-01T00:0{i + 1}:00Z"))
        for i in range(n)
    ]


def test_a_window_ends_at_its_first_balanced_reading() -> None:
    """Break: ``balanced_end`` returning its first reading (the window ended at once: an
    exchange in flight read as a lost credential) or waiting past a balanced one."""
    readings = Readings([(2, renewed(0)), (2, renewed(1)), (2, renewed(2)), (3, renewed(3))])
    end = balanced_end(readings.calls, readings.events, since=0.0, settle=5.0)
    assert (end.calls, len(Credentials(end.events).new_credentials())) == (2, 0)  # |2 - 0| <= 2
    strict = Readings([(2, renewed(0)), (2, renewed(1)), (2, renewed(2)), (3, renewed(3))])
    end = balanced_end(
        strict.calls, strict.events, since=0.0, settle=5.0, fits=lambda made, new: made == new
    )
    assert (end.calls, len(Credentials(end.events).new_credentials())) == (2, 2)


def test_a_window_that_never_balances_ends_at_its_last_reading() -> None:
    """Break: ``balanced_end`` taking a lost credential for one in flight (an end that hides
    the imbalance from the caller's assertion)."""
    readings = Readings([(1, renewed(0)), (2, renewed(0))])
    end = balanced_end(
        readings.calls, readings.events, since=0.0, settle=1.0, fits=lambda m, n: m == n
    )
    assert (end.calls, len(end.events)) == (2, 1), "the last reading, unbalanced"


def test_a_window_starts_at_a_reading_followed_by_a_quiet_second() -> None:
    """Break: ``quiet_start`` starting at once (a renewal's exchange counted before the window,
    its credential inside it), or looking at the exchanges only (a Secret written after its
    exchange was counted: the first two readings have the same exchanges)."""
    readings = Readings([(2, renewed(0)), (2, renewed(1)), (2, renewed(1)), (3, renewed(2))])
    start = quiet_start(readings.calls, readings.events, quiet=0.01, settle=5.0)
    assert start.calls == 2
    assert readings.at == 3, "the window starts at the second reading, quiet until the third"


def test_a_window_never_quiet_starts_at_its_last_reading() -> None:
    """Break: a start taken from a reading that a renewal followed (the first)."""
    readings = Readings([(n, renewed(n)) for n in range(1, 400)])
    start = quiet_start(readings.calls, readings.events, quiet=0.01, settle=0.5)
    assert start.calls == readings.steps[readings.at - 1][0] > 1


def test_a_relist_at_a_new_version_is_a_write_and_at_the_same_version_is_not() -> None:
    """Break: ``written`` counting only MODIFIED (the relist's hidden write is lost)."""
    assert written("MODIFIED", "5", "4")
    assert written("RELISTED", "9", "4")
    assert not written("RELISTED", "4", "4")
    assert not written("MODIFIED", "4", "4")
    assert not written("ADDED", "4", "1")
    assert not written("DELETED", "9", "4")


def test_an_unchanged_rewrite_hidden_behind_a_relist_is_counted() -> None:
    """Break: ``Credentials.unchanged_rewrites`` skipping RELISTED entries (it did): the watch
    broke, the Secret was rewritten with the same credential, the relist shows version 7."""
    events = [
        Seen(1.0, "ADDED", derived("3", "h1")),
        Seen(2.0, "RELISTED", derived("3", "h1")),  # nothing happened meanwhile
        Seen(3.0, "RELISTED", derived("7", "h1")),  # a rewrite happened meanwhile
    ]
    history = Credentials(events)
    assert history.unchanged_rewrites() == ["rotator-bsp-p@7"]
    assert history.writes() == 1


def test_a_route_config_rewritten_unchanged_behind_a_relist_is_counted() -> None:
    """Break: ``RouteConfigs`` counting only MODIFIED entries."""
    events = [
        Seen(1.0, "ADDED", config("3", "a")),
        Seen(2.0, "RELISTED", config("8", "a")),
        Seen(3.0, "MODIFIED", config("9", "b")),
        Seen(4.0, "RELISTED", config("9", "b")),
    ]
    configs = RouteConfigs(events)
    assert configs.unchanged_rewrites() == ["rotator-route-r@8"]
    assert configs.writes() == 2
    assert configs.changed() == {"rotator-route-r"}
    assert configs.changed(since=3.5) == set(), "no write with a new config-hash after 3.5"


def test_changed_names_only_route_configs_written_with_a_new_config_hash() -> None:
    """Break: ``RouteConfigs.changed`` counting any write (an unchanged rewrite would then pass
    for B's renewal of the route config)."""
    events = [Seen(1.0, "ADDED", config("3", "a")), Seen(2.0, "MODIFIED", config("4", "a"))]
    assert RouteConfigs(events).changed() == set()


def test_a_missing_part_skips_by_hand_and_fails_where_the_setup_is_complete(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Break: ``required.missing`` skipping whatever the environment says."""
    monkeypatch.delenv(required.COMPLETE, raising=False)
    with pytest.raises(pytest.skip.Exception, match="no image A"):
        required.missing("no image A")
    monkeypatch.setenv(required.COMPLETE, "1")
    with pytest.raises(pytest.fail.Exception, match="no image A"):
        required.missing("no image A")


def log(*lines: tuple[float, str, str, str, str]) -> str:
    """Reconcile log lines: (seconds, event, reconcile id, namespace, name) of the policy
    controller."""
    return "\n".join(
        json.dumps(
            {
                "timestamp": f"2026-01-01T00:00:{at:06.3f}Z",
                "event": event,
                "reconcile_id": rid,
                "controller": "backendsecuritypolicy",
                "namespace": namespace,
                "name": name,
            }
        )
        for at, event, rid, namespace, name in lines
    )


def test_an_object_reconciled_by_two_replicas_at_once_is_an_overlap_and_two_objects_are_not() -> (
    None
):
    """Break: ``object_overlaps`` keying objects without their namespace (the shards' replicas
    reconcile ``p`` in ns-1 and ``p`` in ns-2 at once by design), or comparing a replica with
    itself (what one container logged is one process's; the work queue is the rule there)."""
    a = log(
        (1.0, "reconcile.started", "a1", "ns-1", "p"),
        (3.0, "reconcile.done", "a1", "ns-1", "p"),
        (2.5, "reconcile.started", "a2", "ns-1", "p"),
        (4.0, "reconcile.done", "a2", "ns-1", "p"),
    )
    b = log(
        (1.0, "reconcile.started", "b1", "ns-2", "p"),
        (3.0, "reconcile.done", "b1", "ns-2", "p"),
        (3.5, "reconcile.started", "b2", "ns-1", "p"),
        (5.0, "reconcile.done", "b2", "ns-1", "p"),
    )
    found = object_overlaps({"a": reconciles(a, ended_at=10.0), "b": reconciles(b, ended_at=10.0)})
    assert [(o.object, o.replicas) for o in found] == [("backendsecuritypolicy:ns-1/p", ("a", "b"))]
    assert found[0].seconds == pytest.approx(0.5)


def test_a_reconcile_without_an_end_runs_until_the_log_ended() -> None:
    """Break: a reconcile abandoned at a kill (no end line) left out, so that one running on
    while the next holder starts would not count."""
    a = log((1.0, "reconcile.started", "a1", "ns", "p"))
    b = log((5.0, "reconcile.started", "b1", "ns", "p"), (6.0, "reconcile.done", "b1", "ns", "p"))
    first = reconciles(a, ended_at=clocks.parse_rfc3339("2026-01-01T00:00:05.5Z"))
    assert not first[0].finished
    found = object_overlaps({"a": first, "b": reconciles(b, ended_at=0.0)})
    assert len(found) == 1
    assert found[0].seconds == pytest.approx(0.5)


def test_started_names_each_controllers_objects_of_one_namespace_only() -> None:
    """Break: ``started`` keeping the objects of another namespace (a test of a restart that
    reconciles nothing would then fail on an earlier test's reconcile), or counting only the
    reconciles that ended (a start still reconciling is a start)."""
    text = log(
        (1.0, "reconcile.started", "a1", "ns-1", "p"),
        (2.0, "reconcile.done", "a1", "ns-1", "p"),
        (3.0, "reconcile.started", "a2", "ns-1", "q"),
        (3.0, "reconcile.started", "a3", "ns-2", "r"),
    )
    assert started(text + "\nnot json", "ns-1") == {"backendsecuritypolicy": {"p", "q"}}
    assert started(text, "ns-3") == {}


def test_last_done_is_the_last_finished_reconcile_of_that_object() -> None:
    """Break: ``last_done`` taking the first end line, a failed reconcile, or the same name in
    another namespace."""
    text = log(
        (1.0, "reconcile.started", "a1", "ns-1", "p"),
        (2.0, "reconcile.done", "a1", "ns-1", "p"),
        (3.0, "reconcile.done", "a2", "ns-1", "p"),
        (4.0, "reconcile.failed", "a3", "ns-1", "p"),
        (5.0, "reconcile.done", "b1", "ns-2", "p"),
    )
    assert last_done(text, "ns-1", "backendsecuritypolicy", "p") == clocks.parse_rfc3339(
        "2026-01-01T00:00:03Z"
    )
    assert last_done(text, "ns-1", "route", "p") is None
