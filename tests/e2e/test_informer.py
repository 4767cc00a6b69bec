"""Informers against the real API server: events, indexes, metadata-only, and convergence after
the watch expires (etcd compacted while the API server was down) and after a restart."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from controllers.runtime import objects, restconfig, sources
from controllers.runtime.informer import LAST_APPLIED, Informer
from controllers.runtime.objects import Body
from controllers.runtime.reconcile import Request
from tests.support import etcd
from tests.support.informer_probe import ProbedClient
from tests.support.polling import wait_for


class Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, str]] = []

    def on_add(self, obj: Body) -> None:
        self._record("add", obj)

    def on_update(self, old: Body, new: Body) -> None:
        self._record("update", new)

    def on_delete(self, obj: Body) -> None:
        self._record("delete", obj)

    def _record(self, kind: str, obj: Body) -> None:
        with self.lock:
            self.events.append((kind, objects.name(obj)))

    def saw(self, kind: str, name: str) -> bool:
        with self.lock:
            return (kind, name) in self.events


@pytest.fixture
def probe(control_plane) -> ProbedClient:
    """The informers' API client, which counts their lists and watches and can break them."""
    return ProbedClient(restconfig.load(str(control_plane.kubeconfig)))


@pytest.fixture
def start_informer(probe: ProbedClient) -> Iterator[Any]:
    started: list[Informer] = []

    def start(resource: objects.Resource, namespace: str, **kwargs) -> tuple[Informer, Recorder]:
        informer = Informer(probe, resource, namespaces=[namespace], **kwargs)
        recorder = Recorder()
        informer.add_handler(recorder)
        informer.start()
        started.append(informer)
        assert informer.wait_for_sync(30), "informer synced"
        return informer, recorder

    yield start
    for informer in started:
        informer.stop()


def configmap(name: str, **data: str) -> Body:
    return {"metadata": {"name": name}, "data": data}


def test_sees_create_update_delete(api, namespace, start_informer) -> None:
    api.create(objects.CONFIGMAPS, configmap("before"), namespace=namespace)
    informer, rec = start_informer(objects.CONFIGMAPS, namespace)
    assert rec.saw("add", "before"), "the initial list is delivered as adds"
    api.create(objects.CONFIGMAPS, configmap("c", k="1"), namespace=namespace)
    wait_for(lambda: rec.saw("add", "c"), what="add")
    api.patch(objects.CONFIGMAPS, "c", {"data": {"k": "2"}}, namespace=namespace)
    wait_for(lambda: rec.saw("update", "c"), what="update")
    stored = informer.store.get(objects.make_key(namespace, "c"))
    assert stored is not None
    assert stored["data"] == {"k": "2"}
    assert "managedFields" not in stored["metadata"], "dropped on the way in"
    api.delete(objects.CONFIGMAPS, "c", namespace=namespace)
    wait_for(lambda: rec.saw("delete", "c"), what="delete")
    assert informer.store.get(objects.make_key(namespace, "c")) is None


def test_index_finds_objects_by_value(api, namespace, start_informer) -> None:
    informer, _ = start_informer(objects.CONFIGMAPS, namespace)
    informer.add_index(
        "by-secret",
        lambda o: [f"{objects.namespace(o)}/{(o.get('data') or {}).get('secret', '')}"],
    )
    for name, secret in (("a", "s1"), ("b", "s1"), ("c", "s2")):
        api.create(objects.CONFIGMAPS, configmap(name, secret=secret), namespace=namespace)
    wait_for(
        lambda: len(informer.store.by_index("by-secret", f"{namespace}/s1")) == 2, what="index"
    )
    api.patch(objects.CONFIGMAPS, "b", {"data": {"secret": "s2"}}, namespace=namespace)
    wait_for(
        lambda: (
            sorted(objects.name(o) for o in informer.store.by_index("by-secret", f"{namespace}/s2"))
            == ["b", "c"]
        ),
        what="index follows an update",
    )
    assert [objects.name(o) for o in informer.store.by_index("by-secret", f"{namespace}/s1")] == [
        "a"
    ]


def test_only_the_primary_kinds_source_is_given_what_was_cached_before_it_started(
    api, namespace, start_informer
) -> None:
    """A controller's sources start on a synced informer: :class:`sources.Kind` requests every
    object cached already, an owned or mapped source only what changes after (the requests it
    would make of cached objects name primary objects, which Kind requests already)."""
    made = api.create(objects.CONFIGMAPS, configmap("a"), namespace=namespace)
    owner = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "a",
        "uid": made["metadata"]["uid"],
        "controller": True,
    }
    owned = {**configmap("b", k="1"), "metadata": {"name": "b", "ownerReferences": [owner]}}
    api.create(objects.CONFIGMAPS, owned, namespace=namespace)
    informer, _ = start_informer(objects.CONFIGMAPS, namespace)
    wait_for(lambda: len(informer.store) == 2, what="both cached")
    requested: dict[str, list[str]] = {"kind": [], "owned": [], "mapped": []}
    started = [
        (sources.Kind(informer), "kind"),
        (sources.Owned(informer, objects.CONFIGMAPS), "owned"),
        (
            sources.Mapped(informer, lambda o: [Request(namespace, "mapped-" + objects.name(o))]),
            "mapped",
        ),
    ]

    def recording(what: str) -> sources.Enqueue:
        return lambda request: requested[what].append(request.name)

    for source, what in started:
        source.start(recording(what))
    assert sorted(requested["kind"]) == ["a", "b"]
    assert requested["owned"] == []
    assert requested["mapped"] == []
    api.patch(objects.CONFIGMAPS, "b", {"data": {"k": "2"}}, namespace=namespace)
    wait_for(lambda: "a" in requested["owned"], what="the owned source: the change's owner")
    wait_for(lambda: "mapped-b" in requested["mapped"], what="the mapped source: the change")
    assert requested["kind"][2:] == ["b"], "and the primary kind's: the change itself"
    for source, _ in started:
        source.stop()


def test_metadata_only_mode_holds_no_secret_data(api, namespace, start_informer) -> None:
    value = "c2VjcmV0LXZhbHVlLXRoYXQtbXVzdC1ub3QtYmUtY2FjaGVk"
    api.create(
        objects.SECRETS,
        {
            "metadata": {
                "name": "s",
                "labels": {"team": "a"},
                "annotations": {LAST_APPLIED: '{"data":{"k":"' + value + '"}}'},
            },
            "data": {"k": value},
        },
        namespace=namespace,
    )
    informer, _ = start_informer(objects.SECRETS, namespace, metadata_only=True)
    api.patch(objects.SECRETS, "s", {"data": {"k2": value}}, namespace=namespace)
    wait_for(
        lambda: (
            (informer.store.get(objects.make_key(namespace, "s")) or {})
            .get("metadata", {})
            .get("resourceVersion")
            == api.get(objects.SECRETS, "s", namespace=namespace)["metadata"]["resourceVersion"]
        ),
        what="the watch delivered the update",
    )
    stored = informer.store.get(objects.make_key(namespace, "s"))
    assert stored is not None
    assert stored["kind"] == "PartialObjectMetadata"
    assert "data" not in stored
    assert stored["metadata"]["labels"] == {"team": "a"}
    assert value not in repr(informer.store.items()), "no secret value anywhere in the cache"


def test_converges_after_watch_expiry_across_an_apiserver_restart(private_control_plane) -> None:
    """While the API server is down, an object is deleted behind its back and etcd's history is
    compacted: the informer's resume fails with 410 Gone and it must re-list to see the delete."""
    control_plane = private_control_plane
    api = ProbedClient(restconfig.load(str(control_plane.kubeconfig)))
    namespace = "informer"
    api.create(objects.NAMESPACES, {"metadata": {"name": namespace}})
    template = {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}
    for name in ("keep", "doomed"):
        api.create(
            objects.PODTEMPLATES, {"metadata": {"name": name}, **template}, namespace=namespace
        )
    informer = Informer(api, objects.PODTEMPLATES, namespaces=[namespace])
    rec = Recorder()
    informer.add_handler(rec)
    informer.start()
    assert informer.wait_for_sync(30)
    wait_for(lambda: len(informer.store) == 2, what="both listed")
    control_plane.stop_apiserver()
    try:
        assert (
            etcd.delete(control_plane.etcd_url, f"/registry/podtemplates/{namespace}/doomed") == 1
        )
        etcd.put(control_plane.etcd_url, "/rotator-test/advance", "1")
        etcd.compact(control_plane.etcd_url, etcd.revision(control_plane.etcd_url))
    finally:
        control_plane.start_apiserver()
    wait_for(lambda: rec.saw("delete", "doomed"), timeout=60, what="the missed delete")
    assert api.gone >= 1, "the resume was refused with 410 Gone"
    assert api.lists >= 2, "and the informer re-listed"
    assert api.failures >= 1, "the outage was seen (and backed off from)"
    api.create(
        objects.PODTEMPLATES, {"metadata": {"name": "after"}, **template}, namespace=namespace
    )
    wait_for(lambda: rec.saw("add", "after"), what="watching again after the restart")
    assert sorted(objects.name(o) for o in informer.store.items()) == ["after", "keep"]
    informer.stop()


def test_interrupted_watch_resumes_without_relisting(
    api, namespace, start_informer, probe: ProbedClient
) -> None:
    _, rec = start_informer(objects.CONFIGMAPS, namespace)
    lists = probe.lists
    wait_for(lambda: probe.watches == 1, what="watching")
    probe.interrupt_watches()
    wait_for(lambda: probe.watches == 2, what="watching again")
    api.create(objects.CONFIGMAPS, configmap("x"), namespace=namespace)
    wait_for(lambda: rec.saw("add", "x"), what="the event after the reconnect")
    assert probe.lists == lists, "resumed from its resourceVersion"
