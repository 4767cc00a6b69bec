"""The builder and the chain's wiring: which events wake which controller, through the sources
the ``*_wiring`` modules declare — the same informer events an informer would deliver, fed to
the declared sources. (The end-to-end count of reconciles per edit is
tests/e2e/test_event_paths.py.)"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from controllers.reconcilers import api, setup
from controllers.reconcilers.credentialsources.apikey import APIKeySource
from controllers.runtime import builder, objects, sources
from controllers.runtime.builder import Watch, Wiring
from controllers.runtime.informer import Informer
from controllers.runtime.manager import Manager, ManagerOptions
from controllers.runtime.metrics import Metrics
from controllers.runtime.reconcile import Request, Result
from tests.support.fake_api import FakeTransport

NS = "ns"


def manager() -> Manager:
    options = ManagerOptions(metrics_bind_address="0", health_probe_bind_address="0")
    return Manager(FakeTransport().client(), options, metrics=Metrics())


class Nothing:
    def reconcile(self, request: Request) -> Result:
        return Result()


def body(kind: str, name: str, **fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION if kind != "Secret" else "v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": NS, "generation": 1, "resourceVersion": "1"},
        **fields,
    }


def ready(status: str = "True", message: str = "m") -> dict[str, Any]:
    return {"conditions": [{"type": "Ready", "status": status, "reason": "R", "message": message}]}


def resolved(status: str = "True", reason: str = "ResolvedRefs", message: str = "m") -> Any:
    condition = {"type": "ResolvedRefs", "status": status, "reason": reason, "message": message}
    return {"conditions": [condition]}


def edited(obj: dict[str, Any], **changes: Any) -> dict[str, Any]:
    new = copy.deepcopy(obj)
    for path, value in changes.items():
        *parents, last = path.split("__")
        node = new
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return new


class Chain:
    """The chain wired in a manager that never runs: its stores filled by hand, its sources fed
    informer events, the requests they enqueue recorded per controller."""

    def __init__(self) -> None:
        self.wiring = setup.register(manager(), by_type={"APIKey": APIKeySource()})
        self.woken: dict[str, list[Request]] = {w.name: [] for w in self.wiring}
        for w in self.wiring:
            for watch in w.watches:
                watch.source.start(self.woken[w.name].append)
        self.policy = body(
            "BackendSecurityPolicy",
            "p",
            spec={
                "type": "APIKey",
                "targetRefs": [{"name": "b"}],
                "apiKey": {"secretRef": {"name": "key"}},
            },
            status=ready(),
        )
        self.backend = body("ServiceBackend", "b", spec={}, status=resolved())
        self.route = body("Route", "r", spec={"rules": [{"backendRefs": [{"name": "b"}]}]})
        owner = {
            "apiVersion": api.API_VERSION,
            "kind": "BackendSecurityPolicy",
            "name": "p",
            "controller": True,
        }
        self.derived = body("Secret", "rotator-bsp-p", data={"apiKey": "YQ=="})
        self.derived["metadata"]["ownerReferences"] = [owner]
        for informer, obj in (
            (self.informer("BackendSecurityPolicy"), self.policy),
            (self.informer("ServiceBackend"), self.backend),
            (self.informer("Route"), self.route),
        ):
            informer.store.upsert(obj)
        self.clear()

    def informer(self, kind: str, *, metadata_only: bool = False) -> Informer:
        for watch in self.watches():
            informer = watch.informer
            if informer.resource.kind == kind and informer.metadata_only == metadata_only:
                return informer
        raise LookupError(kind)

    def watches(self) -> Iterator[Watch]:
        for w in self.wiring:
            yield from w.watches

    def update(
        self, old: dict[str, Any], new: dict[str, Any], *, metadata_only: bool = False
    ) -> None:
        """``new`` replaces ``old`` in its informer, and every source of that informer hears."""
        informer = self.informer(str(new["kind"]), metadata_only=metadata_only)
        informer.store.upsert(new)
        for watch in self.watches():
            if watch.informer is informer:
                assert isinstance(watch.source, sources.Kind | sources.Owned | sources.Mapped)
                watch.source.on_update(old, new)

    def clear(self) -> None:
        for woken in self.woken.values():
            woken.clear()

    def woke(self) -> dict[str, list[str]]:
        """The keys each controller was handed (its queue holds a key once)."""
        return {name: sorted({r.key for r in rs}) for name, rs in self.woken.items() if rs}


@pytest.fixture
def chain() -> Chain:
    return Chain()


def key(name: str) -> str:
    return objects.make_key(NS, name)


def test_a_policy_status_write_wakes_neither_it_nor_the_routes_unless_ready_changes(
    chain: Chain,
) -> None:
    """Its own status (a rotation's new Ready message) wakes only the backend, which reports
    the message; a Ready status change wakes the backend and the routes."""
    chain.update(chain.policy, edited(chain.policy, status=ready(message="renewed")))
    assert chain.woke() == {"servicebackend": [key("b")]}
    chain.clear()
    chain.update(chain.policy, edited(chain.policy, status=ready("False")))
    assert chain.woke() == {"servicebackend": [key("b")], "route": [key("r")]}


def test_a_policy_spec_or_rotation_request_wakes_it_and_its_dependants(chain: Chain) -> None:
    chain.update(chain.policy, edited(chain.policy, metadata__generation=2))
    assert chain.woke() == {
        "backendsecuritypolicy": [key("p")],
        "servicebackend": [key("b")],
        "route": [key("r")],
    }
    chain.clear()
    annotations = {api.ROTATE_REQUESTED_ANNOTATION: "now"}
    chain.update(chain.policy, edited(chain.policy, metadata__annotations=annotations))
    assert chain.woke() == {"backendsecuritypolicy": [key("p")]}
    chain.clear()
    chain.update(chain.policy, edited(chain.policy, metadata__finalizers=["f"]))
    assert chain.woke() == {"backendsecuritypolicy": [key("p")]}


def test_a_backend_wakes_its_routes_on_spec_or_resolution_not_on_its_message(chain: Chain) -> None:
    """Mutation caught: the two backend watches of the route merged without the resolution."""
    chain.update(chain.backend, edited(chain.backend, status=resolved(message="other")))
    assert chain.woke() == {}
    chain.update(chain.backend, edited(chain.backend, status=resolved("False", "PolicyNotReady")))
    assert chain.woke() == {"route": [key("r")]}
    chain.clear()
    chain.update(chain.backend, edited(chain.backend, metadata__generation=2))
    assert chain.woke() == {"servicebackend": [key("b")], "route": [key("r")]}


def test_a_derived_secret_edit_wakes_its_policy_and_the_routes_it_reaches(chain: Chain) -> None:
    """(Its own write's echo is skipped by the policy: test_predicates, test_event_paths.)"""
    chain.update(chain.derived, edited(chain.derived, data={"apiKey": "Yg=="}))
    assert chain.woke() == {"backendsecuritypolicy": [key("p")], "route": [key("r")]}
    chain.clear()
    foreign = edited(chain.derived, metadata__ownerReferences=[])
    chain.update(foreign, edited(foreign, data={"apiKey": "Yw=="}))
    assert chain.woke() == {}


def test_a_referenced_secret_wakes_only_its_policy(chain: Chain) -> None:
    source = body("Secret", "key")
    chain.update(source, edited(source, metadata__resourceVersion="2"), metadata_only=True)
    assert chain.woke() == {"backendsecuritypolicy": [key("p")]}


def test_the_builder_names_the_controller_after_its_kind_and_keeps_the_declared_order() -> None:
    mgr = manager()
    widgets = mgr.cache.informer(objects.CONFIGMAPS)
    secrets = mgr.cache.informer(objects.SECRETS)
    wiring = (
        builder.controller_managed_by(mgr)
        .watches(secrets, lambda s: [Request.for_object(s)], wakes="the same name")
        .for_(widgets)
        .owns(secrets)
        .complete(Nothing())
    )
    assert isinstance(wiring, Wiring)
    assert wiring.name == "configmap"
    assert [(w.verb, w.of, w.says) for w in wiring.watches] == [
        ("For", "ConfigMap", "any change"),
        ("Watches", "Secret", "any change"),
        ("Owns", "Secret", "any change"),
    ]
    assert wiring.watches[2].wakes == "its controller, if a ConfigMap"
    named = builder.controller_managed_by(mgr).named("widgets").for_(widgets).complete(Nothing())
    assert named.name == "widgets"


def test_the_builder_refuses_a_second_for_and_owns_without_for() -> None:
    mgr = manager()
    widgets = mgr.cache.informer(objects.CONFIGMAPS)
    with pytest.raises(ValueError, match="once"):
        builder.controller_managed_by(mgr).for_(widgets).for_(widgets)
    with pytest.raises(ValueError, match="for_ comes first"):
        builder.controller_managed_by(mgr).owns(widgets)
    with pytest.raises(ValueError, match="for_ comes first"):
        builder.controller_managed_by(mgr).complete(Nothing())
