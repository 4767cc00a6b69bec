"""``spec.rolloutRestartTargets``: the pure decision (first configuration, up to date, debounce
window, retry backoff), and the Route reconciler acting on it against in-memory caches, an
in-memory API server (tests/support/memapi.py) and a fake clock — one rollout per configuration change, none for the first one or
on a no-op reconcile, a missing target or one that has not opted in reported and retried. The
patch is checked to be the JSON Patch whose ``remove`` makes the opt-in check (what the API server
answers is tests/e2e/test_rollout_restart.py's), and the RBAC that allows it to be exactly
``patch`` on the three workload kinds."""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml

from controllers.reconcilers import api, restarts
from controllers.reconcilers.restarts import Action, decide
from controllers.reconcilers.route import configsecret
from controllers.runtime import client as clients
from controllers.runtime import clock as clocks
from controllers.runtime import errors as api_errors
from controllers.runtime import objects
from controllers.runtime.reconcile import Request, Result
from tests.unit.test_route_reconciler import NOW, NS, World

CONFIG = Path(__file__).resolve().parents[2] / "config"
WINDOW = restarts.DEBOUNCE_SECONDS


# --- the decision ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("recorded", "current", "incomplete", "due", "now", "expected"),
    [
        (None, "a", False, 10.0, 0.0, Action.FIRST),
        ("a", "a", False, 10.0, 0.0, Action.UP_TO_DATE),
        ("a", "a", False, 10.0, 99.0, Action.UP_TO_DATE),
        ("a", "b", False, 10.0, 9.9, Action.WAIT),
        ("a", "b", False, 10.0, 10.0, Action.RESTART),
        # an incomplete attempt is finished, even when the config went back to the recorded one
        ("a", "a", True, 10.0, 10.0, Action.RESTART),
        ("a", "a", True, 10.0, 3.0, Action.WAIT),
    ],
)
def test_decide(
    recorded: str | None, current: str, incomplete: bool, due: float, now: float, expected: Action
) -> None:
    decision = decide(recorded=recorded, current=current, incomplete=incomplete, due=due, now=now)
    assert decision.action is expected
    if expected is Action.WAIT:
        assert decision.wait == pytest.approx(due - now)


def test_retry_delay_doubles_up_to_its_cap() -> None:
    delays = [restarts.retry_delay(n) for n in range(1, 14)]
    assert delays[:5] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert delays[-1] == restarts.RETRY_MAX_SECONDS
    assert all(a <= b for a, b in itertools.pairwise(delays))
    assert restarts.retry_delay(10_000) == restarts.RETRY_MAX_SECONDS


def test_the_template_annotation_names_the_route_and_always_fits() -> None:
    assert restarts.template_annotation("chat") == "config-hash.rotator.dev/chat"
    assert restarts.template_annotation("a.b-c") == "config-hash.rotator.dev/a.b-c"
    long_name = "r" * 64
    key = restarts.template_annotation(long_name)
    prefix, _, name = key.partition("/")
    assert prefix == "config-hash.rotator.dev"
    assert name.startswith("sha256-")
    assert len(name) <= 63
    assert key != restarts.template_annotation("r" * 65)


def test_the_patch_is_a_json_patch_that_removes_then_adds_the_one_annotation() -> None:
    path = "/spec/template/metadata/annotations/config-hash.rotator.dev~1chat"
    assert restarts.restart_patch("chat", "h") == [
        {"op": "remove", "path": path},
        {"op": "add", "path": path, "value": "h"},
    ]


@pytest.mark.parametrize(
    ("route", "token"),
    [
        ("chat", "config-hash.rotator.dev~1chat"),
        ("gw.prod", "config-hash.rotator.dev~1gw.prod"),  # "." is no JSON Pointer syntax
        (
            "r" * 64,  # over 63: the hashed key, its "/" escaped all the same
            "config-hash.rotator.dev~1sha256-" + hashlib.sha256(b"r" * 64).hexdigest()[:40],
        ),
    ],
)
def test_the_patch_points_at_the_routes_annotation_escaped_per_rfc_6901(
    route: str, token: str
) -> None:
    remove, add = restarts.restart_patch(route, "h")
    assert remove["path"] == add["path"] == f"/spec/template/metadata/annotations/{token}"
    assert unescape(token) == restarts.template_annotation(route)


def test_a_pointer_token_escapes_the_tilde_before_the_slash() -> None:
    assert restarts.pointer_token("a/b~c") == "a~1b~0c"
    assert restarts.pointer_token("~1") == "~01", "a literal ~1 is not a slash"
    assert restarts.pointer_token("/~") == "~1~0"


def unescape(token: str) -> str:
    """RFC 6901's decoding of one reference token: ``~1`` first, then ``~0``."""
    assert "/" not in token
    return token.replace("~1", "/").replace("~0", "~")


# --- the Route reconciler with targets --------------------------------------------------------


KEY = restarts.template_annotation("r")
OTHER = {"example.com/team": "gateways"}
"""An annotation of the owner's on every pod template: a map that exists but lacks :data:`KEY`
is what a lone ``replace`` would wrongly accept."""
REFUSED = "the server rejected our request due to an error in our request"
"""What the API server says when a JSON Patch does not apply (422 Invalid, empty details)."""


class Targets(World):
    """A Route ``r`` with one API-key backend and ``rolloutRestartTargets``, and the workloads
    they name on the in-memory API server, whose JSON Patch is applied as the API server applies
    one (all operations or none; ``remove`` of an absent key is 422 ``Invalid``). Each workload's
    pod template carries an annotation of its owner's (:data:`OTHER`) and the opt-in for Route
    ``r``, unless named in ``not_opted_in``; those in ``missing`` do not exist."""

    def __init__(
        self,
        targets: list[dict[str, str]],
        *,
        missing: tuple[str, ...] = (),
        not_opted_in: tuple[str, ...] = (),
    ) -> None:
        super().__init__()
        for target in targets:
            if target["name"] not in missing:
                self.workload(target, opted_in=target["name"] not in not_opted_in)
        self.chain("b", {"apiKey": b"sk-one"})
        self.route("b")
        self.set_targets(targets)
        self.result = Result()

    def workload(self, target: dict[str, str], *, opted_in: bool = True) -> None:
        """Creates (or replaces) the workload ``target`` names, as its owner writes it."""
        annotations = {**OTHER, **({KEY: ""} if opted_in else {})}
        self.api.put(
            restarts.WORKLOADS[target["kind"]],
            {
                "metadata": {"name": target["name"], "namespace": NS},
                "spec": {"template": {"metadata": {"annotations": annotations}}},
            },
        )

    def template(self, target: dict[str, str]) -> dict[str, str]:
        """The pod template's annotations of workload ``target``, as the server holds them."""
        stored = self.api.stored(restarts.WORKLOADS[target["kind"]], NS, target["name"])
        assert stored is not None
        return dict(stored["spec"]["template"]["metadata"]["annotations"])

    def rollouts(self) -> list[tuple[str, str, str]]:
        """Every restart patch the server applied: (kind, name, the annotation value set)."""
        done = []
        for w in self.api.writes:
            if w.resource.group != "apps":
                continue
            assert (w.patch_type, w.namespace) == (clients.PatchType.JSON, NS)
            remove, add = w.body
            assert (remove["op"], add["op"]) == ("remove", "add")
            done.append((w.resource.kind, w.name, add["value"]))
        return done

    def set_targets(self, targets: list[dict[str, str]]) -> None:
        route = self.api.stored(api.ROUTES, NS, "r")
        assert route is not None
        spec = {**route["spec"]}
        if targets:
            spec["rolloutRestartTargets"] = targets
        else:
            spec.pop("rolloutRestartTargets", None)
        self.api.put(api.ROUTES, {**route, "spec": spec})

    def key(self, value: bytes) -> None:
        self.chain("b", {"apiKey": value})

    def reconcile(self) -> None:
        self.result = self.reconciler.reconcile(Request(NS, "r"))
        self.api.sync()

    def status(self) -> dict[str, Any]:
        route = self.api.stored(api.ROUTES, NS, "r") or {}
        return dict(route.get("status") or {})

    def rollout_condition(self) -> dict[str, Any] | None:
        conditions = self.status().get("conditions") or []
        return next((c for c in conditions if c["type"] == api.ROLLOUT_RESTARTED), None)

    def config_hash(self) -> str:
        secret = self.managed.get(objects.make_key(NS, api.route_config_secret_name("r")))
        assert secret is not None
        return str(secret["metadata"]["annotations"][api.CONFIG_HASH_ANNOTATION])

    def reasons(self) -> list[tuple[str, str]]:
        return [(t, r) for t, r, _ in self.recorder.events if r in ROLLOUT_REASONS]


ROLLOUT_REASONS = {
    api.REASON_FIRST_CONFIGURATION,
    api.REASON_RESTARTED,
    api.REASON_TARGET_NOT_FOUND,
    api.REASON_RESTART_NOT_PERMITTED,
    api.REASON_RESTART_FAILED,
}
GW = {"kind": "Deployment", "name": "gw"}
DB = {"kind": "StatefulSet", "name": "db"}
DS = {"kind": "DaemonSet", "name": "agent"}


def test_the_first_configuration_restarts_nothing_and_a_no_op_reconcile_writes_nothing() -> None:
    world = Targets([GW])
    world.reconcile()
    assert world.rollouts() == []
    assert world.status()["rolloutRestart"] == {"configHash": world.config_hash()}
    condition = world.rollout_condition()
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("True", "FirstConfiguration")
    assert world.result == Result()

    writes = len(world.api.writes)
    world.clock.advance(3600)
    world.reconcile()  # a resync, a restarted controller: the same state
    assert len(world.api.writes) == writes, "zero writes on a no-op reconcile"
    assert world.rollouts() == []


def test_changes_within_the_window_cost_one_rollout_of_the_last_configuration() -> None:
    world = Targets([GW, DB, DS])
    world.reconcile()
    first = world.config_hash()

    world.key(b"sk-two")
    world.reconcile()
    assert world.config_hash() != first
    assert world.rollouts() == [], "debounced: not at once"
    assert world.result.requeue_after == pytest.approx(WINDOW)
    assert world.status()["rolloutRestart"]["configHash"] == first, "nothing written meanwhile"

    world.clock.advance(WINDOW / 2)
    world.key(b"sk-three")
    world.reconcile()
    assert world.rollouts() == []
    assert world.result.requeue_after == pytest.approx(WINDOW / 2), "the window does not move"

    world.clock.advance(WINDOW / 2)
    world.reconcile()  # the requeue
    last = world.config_hash()
    assert world.rollouts() == [
        ("Deployment", "gw", last),
        ("StatefulSet", "db", last),
        ("DaemonSet", "agent", last),
    ]
    record = world.status()["rolloutRestart"]
    assert record == {"configHash": last, "lastRestartTime": clocks.rfc3339(NOW + WINDOW)}
    condition = world.rollout_condition()
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("True", "Restarted")
    assert last[:12] in condition["message"]
    assert world.reasons() == [("Normal", "Restarted")]
    assert world.result == Result()

    writes = len(world.api.writes)
    world.clock.advance(600)
    world.reconcile()
    assert (len(world.api.writes), len(world.rollouts())) == (writes, 3), "no second rollout"


def test_a_missing_target_is_reported_retried_with_backoff_and_rolled_out_once_it_exists() -> None:
    world = Targets([GW, DB])
    world.reconcile()
    world.api.remove(restarts.WORKLOADS["StatefulSet"], NS, "db")
    world.key(b"sk-two")
    world.reconcile()
    world.clock.advance(WINDOW)
    world.reconcile()
    current = world.config_hash()
    assert world.rollouts() == [("Deployment", "gw", current)], "the others are rolled out"
    condition = world.rollout_condition()
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("False", "TargetNotFound")
    assert "StatefulSet db not found" in condition["message"]
    assert world.reasons() == [("Warning", "TargetNotFound")]
    assert world.result.requeue_after == 1.0
    assert world.status()["rolloutRestart"]["configHash"] != current, "not recorded as done"

    world.reconcile()  # before the backoff ends (another event): nothing sent
    assert len(world.rollouts()) == 1
    assert world.result.requeue_after == pytest.approx(1.0)
    world.clock.advance(1.0)
    world.reconcile()  # still missing: retried, backoff doubles, no second Event
    assert world.result.requeue_after == 2.0
    assert world.reasons() == [("Warning", "TargetNotFound")]

    world.workload(DB)  # it appears
    world.clock.advance(2.0)
    world.reconcile()
    assert world.rollouts()[-1] == ("StatefulSet", "db", current)
    condition = world.rollout_condition()
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("True", "Restarted")
    assert world.status()["rolloutRestart"]["configHash"] == current
    assert world.reasons()[-1] == ("Normal", "Restarted")


def test_a_target_that_has_not_opted_in_is_left_alone_reported_and_rolled_out_once_it_does() -> (
    None
):
    world = Targets([GW, DB], not_opted_in=("gw",))
    world.reconcile()
    world.key(b"sk-two")
    world.reconcile()
    world.clock.advance(WINDOW)
    world.reconcile()
    current = world.config_hash()
    assert world.rollouts() == [("StatefulSet", "db", current)], "the others are rolled out"
    assert world.template(GW) == OTHER, "not touched: no opt-in"
    condition = world.rollout_condition()
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("False", api.REASON_RESTART_NOT_PERMITTED)
    assert (
        "Deployment gw has not opted in: its owner adds the annotation config-hash.rotator.dev/r "
        "(any value) to its pod template, spec.template.metadata.annotations"
        in condition["message"]
    )
    assert REFUSED in condition["message"], "the API server's words, should it be another 422"
    assert "StatefulSet db" not in condition["message"]
    assert world.reasons() == [("Warning", "RestartNotPermitted")]
    assert world.result.requeue_after == 1.0
    assert world.status()["rolloutRestart"]["configHash"] != current, "not recorded as done"

    world.clock.advance(1.0)
    world.reconcile()  # still not opted in: retried, backoff doubles, no second Event
    assert world.result.requeue_after == 2.0
    assert world.reasons() == [("Warning", "RestartNotPermitted")]
    assert world.template(GW) == OTHER

    world.workload(GW)  # the owner opts in
    world.clock.advance(2.0)
    world.reconcile()
    assert world.rollouts()[-2:] == [
        ("Deployment", "gw", current),
        ("StatefulSet", "db", current),
    ]
    assert world.template(GW) == {**OTHER, KEY: current}
    condition = world.rollout_condition()
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("True", "Restarted")
    assert world.status()["rolloutRestart"]["configHash"] == current
    assert world.reasons()[-1] == ("Normal", "Restarted")


def test_one_reason_when_several_apply_every_target_in_the_message_an_event_per_change() -> None:
    world = Targets([GW, DB, DS], missing=("db",), not_opted_in=("agent",))
    world.reconcile()
    world.key(b"sk-two")
    world.reconcile()
    world.clock.advance(WINDOW)
    world.reconcile()
    condition = world.rollout_condition()
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("False", "TargetNotFound")
    assert "StatefulSet db not found" in condition["message"]
    assert "DaemonSet agent has not opted in" in condition["message"]

    world.workload(DB)  # db appears; agent still has not opted in
    world.clock.advance(1.0)
    world.reconcile()
    condition = world.rollout_condition()
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("False", "RestartNotPermitted")
    assert world.reasons() == [("Warning", "TargetNotFound"), ("Warning", "RestartNotPermitted")]
    assert [(kind, value) for kind, _, value in world.rollouts()] == [
        ("Deployment", world.config_hash()),
        ("Deployment", world.config_hash()),  # the same patch again: changes nothing
        ("StatefulSet", world.config_hash()),
    ]


def test_an_edited_target_list_is_tried_at_once_after_a_failure() -> None:
    world = Targets([GW, {"kind": "Deployment", "name": "typo"}], missing=("typo",))
    world.reconcile()
    world.key(b"sk-two")
    world.reconcile()
    world.clock.advance(WINDOW)
    world.reconcile()
    assert world.rollout_condition()["status"] == "False"  # type: ignore[index]
    world.set_targets([GW])
    world.reconcile()  # no wait for the backoff: the list changed
    condition = world.rollout_condition()
    assert condition is not None
    assert condition["reason"] == "Restarted"


def test_an_incomplete_rollout_is_finished_even_when_the_configuration_went_back() -> None:
    world = Targets([GW, DB])
    world.reconcile()
    first = world.config_hash()
    world.api.remove(restarts.WORKLOADS["StatefulSet"], NS, "db")
    world.key(b"sk-two")
    world.reconcile()
    world.clock.advance(WINDOW)
    world.reconcile()  # gw now runs sk-two; db is missing
    world.key(b"sk-one")  # back to the recorded configuration
    world.workload(DB)
    world.clock.advance(1.0)
    world.reconcile()
    assert world.config_hash() == first
    assert world.rollouts()[-2:] == [("Deployment", "gw", first), ("StatefulSet", "db", first)]


def test_a_refused_patch_is_restart_failed_and_a_transient_error_raises() -> None:
    world = Targets([GW])
    world.reconcile()
    deployments = restarts.WORKLOADS["Deployment"]
    forbidden = api_errors.Forbidden("cannot patch", status=403, reason="Forbidden")
    world.api.fail(forbidden, resource=deployments, name="gw", times=None)
    world.key(b"sk-two")
    world.reconcile()
    world.clock.advance(WINDOW)
    world.reconcile()
    condition = world.rollout_condition()
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("False", "RestartFailed")
    assert "Deployment gw: cannot patch" in condition["message"]

    world.api.heal()
    world.api.fail(api_errors.ServerError("etcd is away", status=503), resource=deployments)
    world.clock.advance(restarts.RETRY_MAX_SECONDS)
    with pytest.raises(api_errors.ServerError):
        world.reconcile()


def test_removing_the_targets_removes_the_condition_and_the_record() -> None:
    world = Targets([GW])
    world.reconcile()
    assert world.rollout_condition() is not None
    world.set_targets([])
    world.reconcile()
    assert world.rollout_condition() is None
    assert "rolloutRestart" not in world.status()
    assert {c["type"] for c in world.status()["conditions"]} == {
        "Accepted",
        "ResolvedRefs",
        "Programmed",
    }


def test_a_configuration_that_could_not_be_written_rolls_nothing_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(configsecret, "MAX_SECRET_BYTES", 2000)
    world = Targets([GW])
    world.reconcile()
    record = world.status()["rolloutRestart"]
    world.key(b"k" * 3000)
    world.reconcile()
    world.clock.advance(WINDOW)
    world.reconcile()
    assert world.rollout_condition()["reason"] == "FirstConfiguration"  # type: ignore[index]
    assert world.rollouts() == []
    assert world.status()["rolloutRestart"] == record, "kept, not dropped"


# --- the RBAC that allows it -------------------------------------------------------------------


@pytest.mark.parametrize("path", ["rbac/role.yaml", "namespaced/role/role.yaml"])
def test_rbac_allows_patching_the_three_workload_kinds_and_nothing_more(path: str) -> None:
    role = yaml.safe_load((CONFIG / path).read_text())
    apps = [r for r in role["rules"] if "apps" in r["apiGroups"]]
    assert apps == [
        {
            "apiGroups": ["apps"],
            "resources": sorted(r.plural for r in restarts.WORKLOADS.values()),
            "verbs": ["patch"],
        }
    ]
    for rule in role["rules"]:
        assert (
            not {"deployments", "statefulsets", "daemonsets", "replicasets", "pods"}
            & set(rule["resources"])
            or rule in apps
        )
