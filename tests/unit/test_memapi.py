"""The in-memory API server the reconciler tests run on (tests/support/memapi.py) behaves as the
API server does where those tests rely on it: versions and generations, the status subresource,
preconditions, each patch type, faults, and informer caches that lag until told to catch up."""

from __future__ import annotations

from typing import Any

import pytest

from controllers.reconcilers import api
from controllers.runtime import errors, objects
from controllers.runtime.client import PatchType
from controllers.runtime.store import Store
from tests.support import memapi

NS = "ns"
MANAGER = "rotator"


def route(server: memapi.MemAPI, **spec: Any) -> dict[str, Any]:
    return server.put(api.ROUTES, {"metadata": {"name": "r", "namespace": NS}, "spec": spec})


def apply_status(server: memapi.MemAPI, status: dict[str, Any], **md: Any) -> dict[str, Any]:
    body = {"metadata": {"name": "r", "namespace": NS, **md}, "status": status}
    return server.patch(
        api.ROUTES,
        "r",
        body,
        namespace=NS,
        patch_type=PatchType.APPLY,
        subresource="status",
        field_manager=MANAGER,
        force=True,
    )


def test_a_status_write_changes_only_the_status_and_not_the_generation() -> None:
    server = memapi.MemAPI()
    before = route(server, rules=[])
    after = apply_status(server, {"ready": True}, generation=9)
    assert after["spec"] == before["spec"]
    assert after["metadata"]["generation"] == before["metadata"]["generation"] == 1
    assert int(after["metadata"]["resourceVersion"]) > int(before["metadata"]["resourceVersion"])
    (write,) = server.writes
    assert (write.verb, write.key, write.subresource) == (memapi.Verb.PATCH, f"{NS}/r", "status")
    assert write.status == {"ready": True}


def test_a_write_of_the_object_keeps_the_status_and_bumps_the_generation_on_a_spec_change() -> None:
    server = memapi.MemAPI()
    route(server, rules=[])
    apply_status(server, {"ready": True})
    patch = {"spec": {"rules": [1]}, "status": {"ready": False}}
    after = server.patch(api.ROUTES, "r", patch, namespace=NS)
    assert (after["status"], after["metadata"]["generation"]) == ({"ready": True}, 2)
    unchanged = server.patch(api.ROUTES, "r", {"metadata": {"labels": {"a": "b"}}}, namespace=NS)
    assert unchanged["metadata"]["generation"] == 2, "metadata is not spec"


def test_a_write_that_changes_nothing_keeps_the_version_but_is_recorded() -> None:
    server = memapi.MemAPI()
    route(server)
    first = apply_status(server, {"ready": True})
    again = apply_status(server, {"ready": True})
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert len(server.writes) == 2


def test_a_stale_resource_version_is_a_conflict_and_nothing_is_written() -> None:
    server = memapi.MemAPI()
    stale = route(server)["metadata"]["resourceVersion"]
    apply_status(server, {"ready": True})
    with pytest.raises(errors.Conflict):
        apply_status(server, {"ready": False}, resourceVersion=stale)
    assert len(server.writes) == 1
    ((call, error),) = server.refused
    assert (call.verb, isinstance(error, errors.Conflict)) == (memapi.Verb.PATCH, True)


def test_an_apply_removes_what_its_manager_no_longer_sends_and_keeps_what_others_set() -> None:
    server = memapi.MemAPI()
    secret = {"metadata": {"name": "s", "namespace": NS}}

    def apply(data: dict[str, str]) -> dict[str, Any]:
        body = {**secret, "data": data}
        return server.patch(
            objects.SECRETS,
            "s",
            body,
            namespace=NS,
            patch_type=PatchType.APPLY,
            field_manager=MANAGER,
            force=True,
        )

    apply({"a": "1", "b": "2"})
    stored = server.stored(objects.SECRETS, NS, "s")
    assert stored is not None
    server.put(objects.SECRETS, {**stored, "data": {**stored["data"], "theirs": "3"}})
    assert apply({"a": "1"})["data"] == {"a": "1", "theirs": "3"}


def test_a_json_patch_applies_whole_or_is_invalid() -> None:
    server = memapi.MemAPI()
    route(server, template={"annotations": {"keep": "x"}})
    bad = [
        {"op": "add", "path": "/spec/template/annotations/new", "value": "y"},
        {"op": "remove", "path": "/spec/template/annotations/absent"},
    ]
    with pytest.raises(errors.Invalid):
        server.patch(api.ROUTES, "r", bad, namespace=NS, patch_type=PatchType.JSON)
    stored = server.stored(api.ROUTES, NS, "r")
    assert stored is not None
    assert stored["spec"]["template"]["annotations"] == {"keep": "x"}, "none of it applied"
    assert server.writes == []


def test_a_strategic_patch_merges_and_deletes_finalizers() -> None:
    server = memapi.MemAPI()
    server.put(objects.SECRETS, {"metadata": {"name": "s", "namespace": NS, "finalizers": ["a"]}})

    def finalizers(md: dict[str, Any]) -> list[str] | None:
        written = server.patch(
            objects.SECRETS, "s", {"metadata": md}, namespace=NS, patch_type=PatchType.STRATEGIC
        )
        found = written["metadata"].get("finalizers")
        return None if found is None else list(found)

    assert finalizers({"finalizers": ["b"]}) == ["a", "b"]
    assert finalizers({"$deleteFromPrimitiveList/finalizers": ["a", "b"]}) is None


def test_missing_and_present_objects_are_refused_as_the_server_refuses_them() -> None:
    server = memapi.MemAPI()
    with pytest.raises(errors.NotFound):
        server.get(api.ROUTES, "r", namespace=NS)
    with pytest.raises(errors.NotFound):
        apply_status(server, {"ready": True})
    event = {"metadata": {"name": "e", "namespace": NS}}
    server.create(objects.EVENTS, event, namespace=NS)
    with pytest.raises(errors.AlreadyExists):
        server.create(objects.EVENTS, event, namespace=NS)


def test_a_fault_raises_as_often_as_told_then_the_call_is_served() -> None:
    server = memapi.MemAPI()
    route(server)
    server.fail(errors.ServerError("etcd is away"), verb=memapi.Verb.GET, times=2)
    for _ in range(2):
        with pytest.raises(errors.ServerError):
            server.get(api.ROUTES, "r", namespace=NS)
    assert objects.name(server.get(api.ROUTES, "r", namespace=NS)) == "r"
    server.fail(errors.Forbidden("no"), resource=api.ROUTES, times=None)
    for _ in range(3):
        with pytest.raises(errors.Forbidden):
            server.get(api.ROUTES, "r", namespace=NS)
    server.heal()
    server.get(api.ROUTES, "r", namespace=NS)


def test_a_cache_sees_puts_at_once_and_writes_only_when_it_catches_up() -> None:
    server, cache = memapi.MemAPI(), Store()
    server.feed(api.ROUTES, cache)
    route(server)
    key = objects.make_key(NS, "r")
    assert cache.get(key) is not None
    apply_status(server, {"ready": True})
    assert "status" not in (cache.get(key) or {}), "the informer has not caught up"
    server.sync()
    assert (cache.get(key) or {})["status"] == {"ready": True}
    server.remove(api.ROUTES, NS, "r")
    assert cache.get(key) is None
