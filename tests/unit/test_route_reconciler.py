"""The Route reconciler never wedges on one bad input: a backend whose credentials are not text is
left out and named, the others are written; a configuration a Secret cannot hold is refused with
a condition and the previous one kept. Run against in-memory caches fed by an in-memory API
server (tests/support/memapi.py), which keeps what the reconciler writes."""

from __future__ import annotations

import base64
import json
from typing import Any, cast

import pytest
import yaml

from controllers.reconcilers import api, derived
from controllers.reconcilers.cache import ownwrites
from controllers.reconcilers.route import RouteReconciler, configsecret
from controllers.runtime import clock as clocks
from controllers.runtime import errors as api_errors
from controllers.runtime import objects
from controllers.runtime.reconcile import Request
from tests.support import gen, memapi
from tests.support.chainworld import ChainWorld

NS = "ns"
NOW = 1_700_000_000.0
BAD = b"\xff\xfe-not-text-secret-bytes"


class World(ChainWorld):
    """The chain's caches (:class:`ChainWorld`) and a Route reconciler over them;
    :meth:`reconcile` lets them catch up after."""

    def __init__(self) -> None:
        super().__init__(now=NOW)
        self.restart()

    def restart(self) -> None:
        """A new reconciler over the same caches and API: a process that just started."""
        self.own_writes = ownwrites.OwnWrites()
        self.reconciler = RouteReconciler(
            api_client=self.api,
            routes=self.routes,
            backends=self.backends,
            policies=self.policies,
            managed_secrets=self.managed,
            recorder=self.recorder,
            own_writes=self.own_writes,
            clock=self.clock,
        )

    def chain(
        self, backend: str, data: dict[str, bytes], annotations: dict[str, str] | None = None
    ) -> None:
        """A ServiceBackend, a Ready API-key policy targeting it and its derived Secret."""
        self.api.put(
            api.BACKENDS,
            {
                "metadata": {"name": backend, "namespace": NS},
                "spec": {
                    "schema": "OpenAI",
                    "endpoint": {"host": f"{backend}.example", "port": 443},
                },
            },
        )
        policy = self.api.put(
            api.POLICIES,
            gen.policy(f"p-{backend}", gen.targets(backend), gen.ready(), namespace=NS),
        )
        self.api.put(
            objects.SECRETS,
            {
                "metadata": {
                    "name": api.derived_secret_name(objects.name(policy)),
                    "namespace": NS,
                    "annotations": annotations or {},
                    "ownerReferences": [derived.owner_reference(policy, "BackendSecurityPolicy")],
                },
                "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
            },
        )

    def route(self, *backends: str) -> None:
        self.api.put(
            api.ROUTES,
            {
                "apiVersion": api.API_VERSION,
                "kind": "Route",
                "metadata": {"name": "r", "namespace": NS, "uid": "u", "generation": 1},
                "spec": {
                    "rules": [
                        {
                            "matches": [{"modelName": "m"}],
                            "backendRefs": [
                                {"name": b, "weight": 1, "priority": 0} for b in backends
                            ],
                        }
                    ]
                },
            },
        )

    def edit(self, resource: objects.Resource, name: str, **fields: Any) -> None:
        """Object ``name`` changed by someone else: ``fields`` replace its top-level fields
        (``metadata`` merged)."""
        was = self.api.stored(resource, NS, name)
        assert was is not None
        md = {**was["metadata"], **fields.pop("metadata", {})}
        self.api.put(resource, {**was, **fields, "metadata": md})

    def reconcile(self) -> None:
        self.reconciler.reconcile(Request(NS, "r"))
        self.api.sync()  # the informers bring back the written config Secret and status

    def secrets(self) -> list[dict[str, Any]]:
        """The config Secrets written (applied), in order."""
        return [w.body for w in self.api.writes_to(objects.SECRETS)]

    def statuses(self) -> list[dict[str, Any]]:
        """The Route statuses written, in order."""
        return [w.status for w in self.api.writes_to(api.ROUTES, subresource="status")]

    def condition(self, type_: str) -> dict[str, Any]:
        status = self.statuses()[-1]
        return next(c for c in status["conditions"] if c["type"] == type_)

    def config(self) -> dict[str, Any]:
        data = self.secrets()[-1]["data"][api.ROUTE_CONFIG_KEY]
        return cast(dict[str, Any], yaml.safe_load(base64.b64decode(data)))

    def served(self) -> dict[str, Any]:
        return {b["name"]: b["credentials"]["data"] for b in self.config()["rules"][0]["backends"]}

    def leaked(self) -> bool:
        text = json.dumps([self.statuses(), self.recorder.events])
        return any(v in text for v in (BAD.decode("latin-1"), base64.b64encode(BAD).decode()))


@pytest.fixture
def world() -> World:
    return World()


def test_a_backend_whose_credentials_are_not_text_is_left_out_and_the_others_written(
    world: World,
) -> None:
    world.chain("good", {"apiKey": b"sk-good-1"})
    world.chain("broken", {"apiKey": BAD})
    world.route("broken", "good")
    world.reconcile()
    assert world.served() == {"good": {"apiKey": "sk-good-1"}}
    refs = world.condition("ResolvedRefs")
    assert (refs["status"], refs["reason"]) == ("False", "InvalidCredentials")
    assert "ServiceBackend broken" in refs["message"]
    assert "key 'apiKey' is not UTF-8 text" in refs["message"]
    assert world.condition("Programmed")["status"] == "True"
    assert not world.leaked()

    world.chain("good", {"apiKey": b"sk-good-2"})  # the good one rotates: the config follows
    world.reconcile()
    assert world.served() == {"good": {"apiKey": "sk-good-2"}}


def test_an_unreadable_expiry_leaves_the_backend_out_instead_of_failing(world: World) -> None:
    world.chain("good", {"apiKey": b"sk-good-1"})
    world.chain("odd", {"apiKey": b"sk-odd"}, {api.EXPIRATION_ANNOTATION: "next tuesday"})
    world.route("odd", "good")
    world.reconcile()
    assert world.served() == {"good": {"apiKey": "sk-good-1"}}
    refs = world.condition("ResolvedRefs")
    assert refs["reason"] == "InvalidCredentials"
    assert api.EXPIRATION_ANNOTATION in refs["message"]


def key_length_for(size: int) -> int:
    """The API key length that makes route ``r`` with the one backend ``big`` render to a config
    Secret of ``size`` bytes (a plain YAML scalar: the text grows one byte per key byte)."""
    probe = World()
    probe.chain("big", {"apiKey": b"k" * 100})
    probe.route("big")
    probe.reconcile()
    overhead = configsecret.secret_size(
        base64.b64decode(probe.secrets()[-1]["data"][api.ROUTE_CONFIG_KEY]).decode()
    )
    return size - (overhead - 100)


def test_a_config_exactly_at_the_secret_limit_is_written(world: World) -> None:
    world.chain("big", {"apiKey": b"k" * key_length_for(configsecret.MAX_SECRET_BYTES)})
    world.route("big")
    world.reconcile()
    assert world.condition("Programmed")["status"] == "True"
    (written,) = world.secrets()
    text = base64.b64decode(written["data"][api.ROUTE_CONFIG_KEY]).decode()
    assert configsecret.secret_size(text) == configsecret.MAX_SECRET_BYTES


@pytest.fixture
def small_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 64 KiB Secret limit: the refusal logic is the same, and rendering (pure-Python YAML)
    a 1 MiB configuration costs seconds. The real limit is checked above and in
    test_routeconfig."""
    monkeypatch.setattr(configsecret, "MAX_SECRET_BYTES", 64 * 1024)


@pytest.mark.usefixtures("small_limit")
def test_a_config_over_the_secret_limit_is_refused_and_the_previous_one_kept(
    world: World,
) -> None:
    world.chain("big", {"apiKey": b"sk-small"})
    world.route("big")
    world.reconcile()
    assert len(world.secrets()) == 1
    too_long = key_length_for(configsecret.MAX_SECRET_BYTES + 1)
    world.chain("big", {"apiKey": b"k" * too_long})
    world.reconcile()  # no exception: nothing to retry until an input changes
    assert len(world.secrets()) == 1, "nothing written"
    programmed = world.condition("Programmed")
    assert (programmed["status"], programmed["reason"]) == ("False", "ConfigTooLarge")
    assert f"{configsecret.MAX_SECRET_BYTES + 1} bytes" in programmed["message"]
    assert "keeps the previous configuration, which is stale" in programmed["message"]
    assert ("Warning", "ConfigTooLarge") in {(t, r) for t, r, _ in world.recorder.events}
    assert world.served() == {"big": {"apiKey": "sk-small"}}

    world.chain("big", {"apiKey": b"sk-small-again"})
    world.reconcile()
    assert world.condition("Programmed")["status"] == "True"
    assert world.served() == {"big": {"apiKey": "sk-small-again"}}


@pytest.mark.usefixtures("small_limit")
def test_a_first_config_over_the_limit_says_none_was_written(world: World) -> None:
    world.chain("big", {"apiKey": b"k" * key_length_for(configsecret.MAX_SECRET_BYTES + 1)})
    world.route("big")
    world.reconcile()
    assert world.secrets() == []
    assert "was not written" in world.condition("Programmed")["message"]


def test_a_config_the_api_server_refuses_is_reported_not_retried(world: World) -> None:
    world.chain("good", {"apiKey": b"sk-good-1"})
    world.route("good")
    world.api.fail(
        api_errors.Invalid("Secret is invalid: metadata.labels: Invalid value"),
        resource=objects.SECRETS,
        times=None,
    )
    world.reconcile()
    programmed = world.condition("Programmed")
    assert (programmed["status"], programmed["reason"]) == ("False", "ConfigRejected")
    assert "was not written" in programmed["message"]


def test_the_message_stays_bounded_however_many_backends_fail(world: World) -> None:
    names = [f"broken-{i:03d}-" + "x" * 200 for i in range(300)]
    for name in names:
        world.chain(name, {"apiKey": BAD})
    world.route(*names)
    world.reconcile()
    refs = world.condition("ResolvedRefs")
    assert refs["reason"] == "InvalidCredentials"
    assert len(refs["message"]) < 5000, "far under the CRD's 32768"
    assert f"ServiceBackend {names[0]}" in refs["message"]
    shown = refs["message"].count("ServiceBackend ")
    assert refs["message"].endswith(f"; and {300 - shown} more")


# --- each ResolvedRefs reason, and the expiry timer ------------------------------------------


def reason(world: World, type_: str) -> tuple[str, str]:
    c = world.condition(type_)
    return c["status"], c["reason"]


def test_every_backend_resolved_is_resolved_refs_and_programmed(world: World) -> None:
    world.chain("good", {"apiKey": b"sk-good-1"})
    world.route("good")
    world.reconcile()
    assert reason(world, "ResolvedRefs") == ("True", "ResolvedRefs")
    assert reason(world, "Programmed") == ("True", "Programmed")
    assert reason(world, "Accepted") == ("True", "Accepted")
    assert "rotator-route-r" in world.condition("Programmed")["message"]
    written = len(world.secrets())
    world.reconcile()
    assert len(world.secrets()) == written, "an unchanged configuration is not rewritten"


def test_a_missing_or_deleted_backend_is_backend_not_found(world: World) -> None:
    world.chain("good", {"apiKey": b"sk-good-1"})
    world.route("absent", "good")
    world.reconcile()
    assert reason(world, "ResolvedRefs") == ("False", "BackendNotFound")
    assert "ServiceBackend absent not found" in world.condition("ResolvedRefs")["message"]
    assert world.served() == {"good": {"apiKey": "sk-good-1"}}

    world.chain("absent", {"apiKey": b"sk-2"})
    world.edit(api.BACKENDS, "absent", metadata={"deletionTimestamp": "t"})
    world.reconcile()
    assert reason(world, "ResolvedRefs") == ("False", "BackendNotFound")


def test_a_backend_no_policy_targets_is_called_without_credentials(world: World) -> None:
    world.chain("plain", {"apiKey": b"unused"})
    world.api.remove(api.POLICIES, NS, "p-plain")
    world.route("plain")
    world.reconcile()
    assert reason(world, "ResolvedRefs") == ("True", "ResolvedRefs")
    (backend,) = world.config()["rules"][0]["backends"]
    assert backend["name"] == "plain"
    assert not backend.get("credentials")


def test_a_backend_two_policies_target_is_a_policy_conflict(world: World) -> None:
    world.chain("b", {"apiKey": b"sk-1"})
    world.api.put(api.POLICIES, gen.policy("p-other", gen.targets("b"), gen.ready(), namespace=NS))
    world.route("b")
    world.reconcile()
    assert reason(world, "ResolvedRefs") == ("False", "PolicyConflict")
    assert world.config()["rules"][0]["backends"] == [], "left out"


def test_a_policy_not_ready_or_not_written_yet_is_policy_not_ready(world: World) -> None:
    world.chain("b", {"apiKey": b"sk-1"})
    ready = world.api.stored(api.POLICIES, NS, "p-b")
    world.edit(api.POLICIES, "p-b", status={"conditions": [{"type": "Ready", "status": "False"}]})
    world.route("b")
    world.reconcile()
    assert reason(world, "ResolvedRefs") == ("False", "PolicyNotReady")
    assert "BackendSecurityPolicy p-b is not ready" in world.condition("ResolvedRefs")["message"]

    assert ready is not None
    world.edit(api.POLICIES, "p-b", status=ready["status"])  # Ready again, but its derived
    world.api.remove(objects.SECRETS, NS, api.derived_secret_name("p-b"))  # Secret not there yet
    world.reconcile()
    assert reason(world, "ResolvedRefs") == ("False", "PolicyNotReady")
    assert "not written yet" in world.condition("ResolvedRefs")["message"]


def test_expired_credentials_are_left_out_and_valid_ones_set_the_timer(world: World) -> None:
    world.chain("old", {"apiKey": b"sk-old"}, {api.EXPIRATION_ANNOTATION: clocks.rfc3339(NOW)})
    later, soon = clocks.rfc3339(NOW + 600), clocks.rfc3339(NOW + 60)
    world.chain("late", {"apiKey": b"sk-late"}, {api.EXPIRATION_ANNOTATION: later})
    world.chain("soon", {"apiKey": b"sk-soon"}, {api.EXPIRATION_ANNOTATION: soon})
    world.route("old", "late", "soon")
    result = world.reconciler.reconcile(Request(NS, "r"))
    assert reason(world, "ResolvedRefs") == ("False", "CredentialsExpired")
    assert "p-old expired at" in world.condition("ResolvedRefs")["message"]
    assert world.served() == {"late": {"apiKey": "sk-late"}, "soon": {"apiKey": "sk-soon"}}
    assert result.requeue_after == pytest.approx(60.001), "run again when the first one expires"


def test_the_expiry_timer_counts_from_the_end_of_the_reconcile(world: World) -> None:
    """The queue counts ``requeue_after`` from the return: writes that took 2 s leave 58 s to
    the expiry, not 60. Mutation caught: the delay computed from the reconcile's start (the
    expired credential then stayed in the configuration for as long as the writes took)."""
    world.chain(
        "soon", {"apiKey": b"sk-soon"}, {api.EXPIRATION_ANNOTATION: clocks.rfc3339(NOW + 60)}
    )
    world.route("soon")

    def slow_write(call: memapi.Call) -> None:
        if call.verb is memapi.Verb.PATCH:
            world.clock.advance(1)

    world.api.intercept(slow_write)
    result = world.reconciler.reconcile(Request(NS, "r"))
    assert result.requeue_after == pytest.approx(60.001 - (world.clock.now() - NOW))
    assert world.clock.now() > NOW, "the writes took time"


def test_with_several_problems_the_first_backend_by_name_gives_the_reason(world: World) -> None:
    world.chain("b-broken", {"apiKey": BAD})
    world.route("c-absent", "b-broken")
    world.reconcile()
    assert reason(world, "ResolvedRefs") == ("False", "InvalidCredentials")
    message = world.condition("ResolvedRefs")["message"]
    assert message.index("b-broken") < message.index("ServiceBackend c-absent not found")


def test_a_route_missing_or_being_deleted_writes_nothing(world: World) -> None:
    world.reconciler.reconcile(Request(NS, "r"))
    world.route("b")
    world.edit(api.ROUTES, "r", metadata={"deletionTimestamp": "t"})
    world.reconciler.reconcile(Request(NS, "r"))
    assert world.api.writes == []


# --- a new route waits for what was applied with it (backend.SETTLE_SECONDS) -----------------


def new_route(world: World, *backends: str) -> None:
    """Route ``r``, created now (``NOW``) and never written; the clock half a second on."""
    world.route(*backends)
    world.edit(api.ROUTES, "r", metadata={"creationTimestamp": clocks.rfc3339(NOW)})
    world.clock.advance(0.5)


def unreconciled(world: World, policy: str) -> None:
    """Takes ``policy``'s status away: never reconciled."""
    was = world.api.stored(api.POLICIES, NS, policy)
    assert was is not None
    world.api.put(api.POLICIES, {k: v for k, v in was.items() if k != "status"})


@pytest.mark.parametrize("arriving", ["backend", "policy", "Ready", "derived Secret"])
def test_a_new_route_waits_for_what_is_on_its_way_then_writes_once(
    world: World, arriving: str
) -> None:
    """Mutation caught: no settle time (the route is written without the backend, then again
    with it: two config Secrets, two statuses)."""
    world.chain("b", {"apiKey": b"sk-1"})  # then taken apart down to what is arriving
    world.api.remove(objects.SECRETS, NS, api.derived_secret_name("p-b"))
    if arriving == "Ready":
        unreconciled(world, "p-b")
    if arriving in ("backend", "policy"):
        world.api.remove(api.POLICIES, NS, "p-b")
    if arriving == "backend":
        world.api.remove(api.BACKENDS, NS, "b")
    new_route(world, "b")
    result = world.reconciler.reconcile(Request(NS, "r"))
    assert world.api.writes == []
    assert result.requeue_after == pytest.approx(1.5)

    world.chain("b", {"apiKey": b"sk-1"})  # it arrives
    world.reconcile()
    assert world.served() == {"b": {"apiKey": "sk-1"}}
    assert len(world.statuses()) == 1
    assert len(world.secrets()) == 1


def test_a_new_route_writes_what_is_missing_once_the_settle_time_is_up(world: World) -> None:
    new_route(world, "absent")
    world.reconcile()
    assert world.api.writes == []
    world.clock.advance(1.5)
    world.reconcile()
    assert reason(world, "ResolvedRefs") == ("False", "BackendNotFound")


def test_a_new_route_with_a_verdict_does_not_wait(world: World) -> None:
    """A policy that said not Ready, a conflict: nothing more is on its way."""
    world.chain("b", {"apiKey": b"sk-1"})
    not_ready = {"conditions": [{"type": "Ready", "status": "False", "message": "no"}]}
    world.edit(api.POLICIES, "p-b", status=not_ready)
    new_route(world, "b")
    world.reconcile()
    assert reason(world, "ResolvedRefs") == ("False", "PolicyNotReady")


def test_a_route_written_before_does_not_wait(world: World) -> None:
    """A change to a programmed route is reported at once: the settle time is for creation."""
    world.chain("b", {"apiKey": b"sk-1"})
    new_route(world, "b")
    world.reconcile()
    assert len(world.statuses()) == 1
    world.api.remove(api.BACKENDS, NS, "b")
    world.reconcile()
    assert reason(world, "ResolvedRefs") == ("False", "BackendNotFound")


def test_a_change_undone_before_the_cache_caught_up_is_still_written(world: World) -> None:
    """The config Secret is compared with rotator's own last write while the cache still holds
    the version that write was based on. That write is then sent from the cache's version, which
    the server refuses (Conflict: a retry once the cache caught up writes it). Mutation caught:
    comparing with the cache alone (the third reconcile then finds the cache — still the first
    config — equal to what it wants, sends nothing, and the server keeps the second config for
    good: its echo is skipped)."""
    world.chain("a", {"apiKey": b"sk-1"})
    world.route("a")
    world.reconcile()  # config 1, and the informer brings it back

    world.chain("a", {"apiKey": b"sk-2"})
    world.reconciler.reconcile(Request(NS, "r"))  # config 2 written; its event not back yet
    assert world.served() == {"a": {"apiKey": "sk-2"}}
    world.chain("a", {"apiKey": b"sk-1"})  # undone at once
    with pytest.raises(api_errors.Conflict):
        world.reconciler.reconcile(Request(NS, "r"))
    (refused, _), *_ = world.api.refused
    assert (refused.verb, refused.resource) == (memapi.Verb.PATCH, objects.SECRETS), "sent"
    world.api.sync()  # the informer catches up (config 2, the echo)
    world.reconcile()  # the retry
    assert world.served() == {"a": {"apiKey": "sk-1"}}, "the server must not keep config 2"
    assert len(world.secrets()) == 3
    stored = world.api.stored(objects.SECRETS, NS, api.route_config_secret_name("r"))
    assert stored is not None
    assert stored["data"] == world.secrets()[-1]["data"]


def test_a_failed_write_is_not_taken_for_what_the_server_holds(world: World) -> None:
    """A write that failed is forgotten: the next reconcile compares with the cache again and
    writes. Mutation caught: keeping the record of a failed write (the retry then believes the
    server holds it and writes nothing)."""
    world.chain("a", {"apiKey": b"sk-1"})
    world.route("a")
    world.reconcile()
    world.chain("a", {"apiKey": b"sk-2"})
    world.api.fail(api_errors.Conflict("the object has been modified"), resource=objects.SECRETS)
    with pytest.raises(api_errors.Conflict):
        world.reconciler.reconcile(Request(NS, "r"))
    world.reconcile()
    assert world.served() == {"a": {"apiKey": "sk-2"}}
