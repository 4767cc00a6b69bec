"""A Route whose inputs have not changed since its configuration was written is not rendered
again (``rotator.dev/config-inputs`` on the config Secret): a restart renders nothing. Anything
that makes the Secret differ from what was written — inputs, data, either hash annotation — and
the route is rendered and, when needed, repaired. Run against in-memory caches fed by an
in-memory API server, with the config Secret brought back as the informer would (managed view,
echo consumed)."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from controllers.reconcilers import api, routeconfig
from controllers.reconcilers.cache import ownwrites
from controllers.reconcilers.route import RouteReconciler
from controllers.reconcilers.route.formats import own
from controllers.runtime import errors as api_errors
from controllers.runtime import objects
from controllers.runtime.reconcile import Request
from tests.unit.test_route_reconciler import NS, World

KEY = objects.make_key(NS, api.route_config_secret_name("r"))


@pytest.fixture
def renders(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the calls of rotator's own format's render."""
    calls: list[int] = []
    real = own.render

    def counting(*args: Any) -> str:
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(own, "render", counting)
    return calls


def bring_back(world: World, own: ownwrites.OwnWrites) -> None:
    """The written config Secret as the informer delivers it: through the managed view, its
    echo consumed."""
    world.api.sync()
    stored = world.api.stored(objects.SECRETS, NS, api.route_config_secret_name("r"))
    assert stored is not None
    assert own.is_echo(stored)


def restarted(world: World) -> RouteReconciler:
    world.restart()
    return world.reconciler


@pytest.fixture
def written() -> World:
    """Route r over backend a, its configuration written and back in the cache."""
    world = World()
    world.chain("a", {"apiKey": b"sk-1"})
    world.route("a")
    world.reconcile()
    bring_back(world, world.own_writes)
    return world


def edit(world: World, change: Callable[[dict[str, Any]], None]) -> None:
    """Someone edits the config Secret: the server holds it changed, the cache sees it."""
    stored = world.api.stored(objects.SECRETS, NS, api.route_config_secret_name("r"))
    assert stored is not None
    change(stored)
    world.api.put(objects.SECRETS, stored)


def writes(world: World) -> int:
    return len(world.secrets())


def test_a_restart_renders_nothing_for_a_route_whose_inputs_are_unchanged(
    written: World, renders: list[int]
) -> None:
    """Mutation caught: the shortcut removed (one render per route at every start)."""
    before, statuses = writes(written), len(written.statuses())
    restarted(written).reconcile(Request(NS, "r"))
    assert renders == []
    assert writes(written) == before
    assert len(written.statuses()) == statuses  # Programmed as it was: nothing to write


def test_a_changed_input_renders_and_writes(written: World, renders: list[int]) -> None:
    written.chain("a", {"apiKey": b"sk-2"})
    restarted(written).reconcile(Request(NS, "r"))
    assert renders == [1]
    assert written.served() == {"a": {"apiKey": "sk-2"}}


def test_edited_data_is_rendered_and_repaired(written: World, renders: list[int]) -> None:
    """Mutation caught: the record not bound to the data (an edit of the data alone then kept
    for good)."""
    before = writes(written)
    edit(written, lambda s: s.update(data={"x": "eA=="}))
    restarted(written).reconcile(Request(NS, "r"))
    assert renders == [1]
    assert writes(written) == before + 1
    assert written.served() == {"a": {"apiKey": "sk-1"}}


def test_an_edited_config_hash_is_rendered_and_repaired(written: World, renders: list[int]) -> None:
    before = writes(written)
    annotations = objects.meta(written.managed.get(KEY) or {}).get("annotations") or {}
    original = annotations[api.CONFIG_HASH_ANNOTATION]
    edit(written, lambda s: s["metadata"]["annotations"].update({api.CONFIG_HASH_ANNOTATION: "0"}))
    restarted(written).reconcile(Request(NS, "r"))
    assert renders == [1]
    assert writes(written) == before + 1
    written_annotations = written.secrets()[-1]["metadata"]["annotations"]
    assert written_annotations[api.CONFIG_HASH_ANNOTATION] == original


def test_an_edited_record_is_rendered_and_not_rewritten_alone(
    written: World, renders: list[int]
) -> None:
    """The record is a shortcut, not content: a wrong one costs a render, never a write a gateway
    would reload for. Mutation caught: the record compared (one write per edited record)."""
    before = writes(written)
    edit(
        written,
        lambda s: s["metadata"]["annotations"].update({api.CONFIG_INPUTS_ANNOTATION: "0" * 64}),
    )
    restarted(written).reconcile(Request(NS, "r"))
    assert renders == [1]
    assert writes(written) == before


def test_a_config_written_before_the_record_existed_is_rendered_not_rewritten(
    written: World, renders: list[int]
) -> None:
    """An upgrade writes nothing. Mutation caught: comparing with the record required (every
    config Secret rewritten once by the upgrade's first start)."""
    before = writes(written)
    edit(written, lambda s: s["metadata"]["annotations"].pop(api.CONFIG_INPUTS_ANNOTATION))
    restarted(written).reconcile(Request(NS, "r"))
    assert renders == [1]
    assert writes(written) == before


def test_a_write_not_back_in_the_cache_is_rendered(written: World, renders: list[int]) -> None:
    """While the cache lags an own write, the cached Secret says nothing about what the server
    holds: rendered and compared with that write (and sent from the cache's version, which the
    server refuses until the cache caught up)."""
    written.chain("a", {"apiKey": b"sk-2"})
    written.reconciler.reconcile(Request(NS, "r"))  # written; its event not back
    written.chain("a", {"apiKey": b"sk-1"})  # undone at once: the cache matches the inputs
    with pytest.raises(api_errors.Conflict):
        written.reconciler.reconcile(Request(NS, "r"))
    assert len(renders) == 2
    written.api.sync()
    written.reconcile()  # the retry
    assert written.served() == {"a": {"apiKey": "sk-1"}}


# --- the digest ---------------------------------------------------------------------------------


def base() -> tuple[Any, dict[str, routeconfig.ResolvedBackend]]:
    """A route with every field render reads set, over two resolved backends."""
    route: Any = {
        "metadata": {"name": "r", "namespace": NS},
        "spec": {
            "rules": [
                {
                    "matches": [{"modelName": "m", "pathPrefix": "/v1"}],
                    "backendRefs": [
                        {"name": "a", "weight": 1, "priority": 0},
                        {"name": "b", "weight": 2, "priority": 1},
                    ],
                }
            ]
        },
    }
    spec: Any = {
        "schema": "OpenAI",
        "endpoint": {"host": "h", "port": 443, "tls": {"enabled": True, "sni": "s"}},
    }
    creds = routeconfig.ResolvedCredentials(
        "p",
        "APIKey",
        {"apiKey": "k1"},
        "2030-01-01T00:00:00Z",
        routeconfig.CredentialHeader("x-api-key", routeconfig.RAW),
    )
    return route, {
        "a": routeconfig.ResolvedBackend("a", spec, creds),
        "b": routeconfig.ResolvedBackend("b", spec, None),
    }


def _creds(**change: Any) -> Callable[[Any, Any], None]:
    def mutate(_: Any, resolved: Any) -> None:
        resolved["a"] = dataclasses.replace(
            resolved["a"], credentials=dataclasses.replace(resolved["a"].credentials, **change)
        )

    return mutate


def _endpoint(**change: Any) -> Callable[[Any, Any], None]:
    def mutate(_: Any, resolved: Any) -> None:
        spec = copy.deepcopy(resolved["a"].spec)
        for path, value in change.items():
            where = spec["endpoint"]
            *parents, last = path.split("__")
            for p in parents:
                where = where[p]
            where[last] = value
        resolved["a"] = dataclasses.replace(resolved["a"], spec=spec)

    return mutate


def _ref(field: str, value: Any) -> Callable[[Any, Any], None]:
    return lambda route, _: route["spec"]["rules"][0]["backendRefs"][0].update({field: value})


MUTATIONS: dict[str, Callable[[Any, Any], None]] = {
    "route name": lambda route, _: route["metadata"].update(name="s"),
    "namespace": lambda route, _: route["metadata"].update(namespace="other"),
    "match": lambda route, _: route["spec"]["rules"][0]["matches"][0].update(modelName="n"),
    "weight": _ref("weight", 5),
    "priority": _ref("priority", 3),
    "backend left out": lambda _, resolved: resolved.pop("b"),
    "schema": lambda _, r: r.update(
        a=dataclasses.replace(r["a"], spec={**r["a"].spec, "schema": "AWSBedrock"})
    ),
    "host": _endpoint(host="h2"),
    "port": _endpoint(port=8443),
    "tls": _endpoint(tls__enabled=False),
    "sni": _endpoint(tls__sni="t"),
    "policy": _creds(policy="q"),
    "type": _creds(type="AWSCredentials"),
    "key value": _creds(data={"apiKey": "k2"}),
    "key name": _creds(data={"other": "k1"}),
    "expiry": _creds(expires_at="2031-01-01T00:00:00Z"),
    "no expiry": _creds(expires_at=None),
    "header": _creds(header=routeconfig.CredentialHeader("api-key", routeconfig.RAW)),
    "no header": _creds(header=None),
    "no credentials": lambda _, r: r.update(a=dataclasses.replace(r["a"], credentials=None)),
}


@pytest.mark.parametrize("what", sorted(MUTATIONS))
def test_each_input_render_reads_changes_the_digest(what: str) -> None:
    """Mutation caught: any field render reads left out of the digest (that case fails)."""
    route, resolved = base()
    before = routeconfig.render(route, resolved), routeconfig.inputs_digest(route, resolved)
    MUTATIONS[what](route, resolved)
    after = routeconfig.render(route, resolved), routeconfig.inputs_digest(route, resolved)
    assert after[0] != before[0], "the case must change the configuration"
    assert after[1] != before[1]


def test_equal_inputs_have_equal_digests() -> None:
    assert routeconfig.inputs_digest(*base()) == routeconfig.inputs_digest(*base())
