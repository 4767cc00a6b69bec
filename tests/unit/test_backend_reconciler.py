"""The ServiceBackend reconciler against an in-memory API server and real stores with the
controller's policy index: each ``ResolvedRefs`` reason, and no write when nothing changed.

Also here: the check that every condition reason docs/api.md documents for the three kinds is
asserted by a reconciler unit test of that kind.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from controllers.reconcilers import api
from controllers.reconcilers import backend as backend_mod
from controllers.reconcilers.backend import BackendReconciler
from controllers.runtime import clock as clocks
from controllers.runtime.reconcile import Request
from tests.support import gen
from tests.support.chainworld import ChainWorld

NS = "ns"
NOW = 1_700_000_000.0
ROOT = Path(__file__).resolve().parents[2]


class World(ChainWorld):
    def __init__(self) -> None:
        super().__init__(now=NOW)
        self.reconciler = BackendReconciler(
            api_client=self.api,
            backends=self.backends,
            policies=self.policies,
            recorder=self.recorder,
            clock=self.clock,
        )
        self.api.put(api.BACKENDS, {"metadata": {"name": "b", "namespace": NS}, "spec": {}})

    def created(self, at: float | str, *, status: dict[str, Any] | None = None) -> None:
        """Backend ``b`` was created at ``at`` (a time, or any text), with ``status``."""
        md = {"name": "b", "namespace": NS}
        stamp = clocks.rfc3339(at) if isinstance(at, float) else at
        backend: dict[str, Any] = {"metadata": {**md, "creationTimestamp": stamp}, "spec": {}}
        if status is not None:
            backend["status"] = status
        self.api.put(api.BACKENDS, backend)

    def policy(self, name: str, ready: dict[str, Any] | None, **metadata: Any) -> None:
        """A policy targeting backend ``b``, with ``ready`` as its Ready condition."""
        conditions = gen.conditions(*([ready] if ready else []))
        body = gen.policy(
            name, gen.targets("b"), gen.metadata(**metadata), conditions, namespace=NS
        )
        self.api.put(api.POLICIES, body)

    def reconcile(self) -> None:
        self.reconciler.reconcile(Request(NS, "b"))
        self.api.sync()  # the informer brings the written status back

    def statuses(self) -> list[dict[str, Any]]:
        """The statuses written, in order."""
        return [w.status for w in self.api.writes_to(api.BACKENDS, subresource="status")]

    def resolved(self) -> dict[str, Any]:
        conditions = self.statuses()[-1]["conditions"]
        return next(c for c in conditions if c["type"] == api.RESOLVED_REFS)


READY = {"type": "Ready", "status": "True", "reason": "CredentialsReady", "message": "ok"}


@pytest.fixture
def world() -> World:
    return World()


def test_a_backend_no_policy_targets_is_resolved_without_credentials(world: World) -> None:
    world.reconcile()
    assert (world.resolved()["status"], world.resolved()["reason"]) == ("True", "NoPolicy")
    accepted = world.statuses()[-1]["conditions"][0]
    assert (accepted["type"], accepted["reason"]) == ("Accepted", "Accepted")
    assert world.recorder.events == [], "a first status that finds it valid is no transition"


def test_one_ready_policy_resolves(world: World) -> None:
    world.policy("p", READY)
    world.reconcile()
    assert (world.resolved()["status"], world.resolved()["reason"]) == ("True", "ResolvedRefs")
    assert "BackendSecurityPolicy p" in world.resolved()["message"]


def test_two_policies_conflict_and_a_deleted_one_does_not_count(world: World) -> None:
    world.policy("p2", READY)
    world.policy("p1", READY)
    world.reconcile()
    assert (world.resolved()["status"], world.resolved()["reason"]) == ("False", "PolicyConflict")
    assert "p1, p2" in world.resolved()["message"]
    assert ("Warning", "PolicyConflict") in {(t, r) for t, r, _ in world.recorder.events}

    world.policy("p2", READY, deletionTimestamp="2023-11-14T22:13:20Z")
    world.reconcile()
    assert world.resolved()["reason"] == "ResolvedRefs"


def test_a_policy_that_is_not_ready_passes_its_message_on(world: World) -> None:
    world.policy("p", {"type": "Ready", "status": "False", "reason": "X", "message": "STS down"})
    world.reconcile()
    assert (world.resolved()["status"], world.resolved()["reason"]) == ("False", "PolicyNotReady")
    assert world.resolved()["message"] == "BackendSecurityPolicy p is not ready: STS down"


def test_a_policy_never_reconciled_is_waited_for_then_written_once(world: World) -> None:
    """Its first status wakes the backend (setup). Mutation caught: the old ``PolicyNotReady``
    ("not reconciled yet") write, then a second write — two patches and two Events."""
    world.policy("p", None)
    world.reconcile()
    assert world.statuses() == []
    assert world.recorder.events == []
    world.policy("p", READY)
    world.reconcile()
    assert len(world.statuses()) == 1
    assert world.resolved()["reason"] == "ResolvedRefs"
    assert world.recorder.events == [], "resolved from the start: no Event"


def test_a_new_backend_no_policy_targets_waits_out_the_settle_time(world: World) -> None:
    """Mutation caught: no settle time (``NoPolicy`` written at once, then the policy applied
    with the backend arrives: a second write)."""
    world.created(NOW)
    world.clock.advance(0.5)
    result = world.reconciler.reconcile(Request(NS, "b"))
    assert world.statuses() == []
    assert result.requeue_after == pytest.approx(backend_mod.SETTLE_SECONDS - 0.5)
    world.clock.advance(backend_mod.SETTLE_SECONDS - 0.5)
    world.reconcile()
    assert world.resolved()["reason"] == "NoPolicy"


def test_a_new_backend_whose_policy_is_there_does_not_wait(world: World) -> None:
    world.created(NOW)
    world.policy("p", READY)
    world.reconcile()
    assert world.resolved()["reason"] == "ResolvedRefs"


@pytest.mark.parametrize(
    ("created", "status"),
    [
        (NOW + 30, None),  # the controller's clock behind the API server's: no wait on a skew
        ("not a time", None),
        (NOW, {"conditions": []}),  # written before: a change is reported at once
    ],
)
def test_no_settle_time_without_a_readable_past_creation_or_with_a_status(
    world: World, created: float | str, status: dict[str, Any] | None
) -> None:
    world.created(created, status=status)
    world.reconcile()
    assert world.resolved()["reason"] == "NoPolicy"


def test_an_unchanged_status_is_not_written_again(world: World) -> None:
    world.reconcile()
    world.reconcile()
    assert len(world.statuses()) == 1
    stored = world.api.stored(api.BACKENDS, NS, "b")
    assert stored is not None
    assert stored["status"] == world.statuses()[-1], "the server holds the one status written"


def test_a_missing_or_deleted_backend_writes_nothing(world: World) -> None:
    world.api.put(
        api.BACKENDS,
        {"metadata": {"name": "b", "namespace": NS, "deletionTimestamp": "x"}, "spec": {}},
    )
    world.reconcile()
    world.reconciler.reconcile(Request(NS, "gone"))
    assert world.api.writes == []


# --- every documented reason is asserted by a reconciler unit test ---------------------------

TESTS_OF = {
    "BackendSecurityPolicy": ("test_policy_reconciler.py", "test_policy_faults.py"),
    "ServiceBackend": ("test_backend_reconciler.py",),
    "Route": ("test_route_reconciler.py", "test_rollout_restarts.py", "test_litellmconfig.py"),
}
"""The unit tests of each kind's reconciler."""


def documented_reasons() -> dict[str, set[str]]:
    """Kind → the condition reasons docs/api.md's "Conditions and reasons" tables list for it."""
    doc = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    section = doc.split("\n## Conditions and reasons\n", 1)[1].split("\n## ", 1)[0]
    found: dict[str, set[str]] = {}
    for part in section.split("\n### ")[1:]:
        kind, _, body = part.partition("\n")
        rows = re.findall(r"^\| `\w+` \| \w+ \| `(\w+)` \|", body, flags=re.MULTILINE)
        found[kind.strip()] = set(rows)
    return found


def asserted_strings(path: Path) -> set[str]:
    """String constants a test module uses as expectations: inside ``assert`` statements and
    in ``pytest.mark.parametrize`` cases (whose values the test asserts), and ``api.REASON_*``
    constants named there."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        is_parametrize = (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "parametrize"
        )
        if not (isinstance(node, ast.Assert) or is_parametrize):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                found.add(sub.value)
            elif isinstance(sub, ast.Attribute) and sub.attr.startswith("REASON_"):
                found.add(getattr(api, sub.attr))
    return found


def test_every_documented_reason_is_asserted_by_a_reconciler_unit_test() -> None:
    documented = documented_reasons()
    assert set(documented) == set(TESTS_OF)
    assert {"Expired", "ReleaseFailed", "NoPolicy", "ConfigRejected"} <= set().union(
        *documented.values()
    ), "the tables were found"
    missing = {}
    for kind, files in TESTS_OF.items():
        asserted = set().union(*(asserted_strings(ROOT / "tests" / "unit" / f) for f in files))
        if gaps := sorted(documented[kind] - asserted):
            missing[kind] = gaps
    assert missing == {}
