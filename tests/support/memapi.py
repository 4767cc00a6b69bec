"""An in-memory API server for reconciler unit tests, typed to the Protocols the reconcilers
depend on (:mod:`controllers.runtime.apiclient`, :mod:`controllers.runtime.eventsink`).

This is the fake at the *Protocol* level: the reconciler calls :class:`MemAPI` directly, no client
and no HTTP in between. ``tests/support/fake_api.py`` is the other one, at the *transport* level:
a real :class:`~controllers.runtime.client.Client` over a fake connection pool, for the tests of
the client itself (timeouts, error mapping, body handling).

What it does as the API server does, so a test does not write the server's part by hand:

* Objects are kept by ``(resource, namespace, name)``. Every change takes the next
  ``resourceVersion`` (one counter, as etcd's revision); a write that changes nothing keeps it.
  ``generation`` is 1 at creation and goes up only when ``spec`` changes.
* A write to the ``status`` subresource changes only ``status`` (never ``spec``, never
  ``generation``); a write to the object changes everything but ``status``.
* ``metadata.resourceVersion`` in a patch or an apply body is a precondition: a stale one is
  :class:`~controllers.runtime.errors.Conflict`. A patch of an absent object is ``NotFound``
  (an apply to the object itself creates it); a create of a present one ``AlreadyExists``.
* Patches of each type are applied as the API server applies them (``tests/support/patches.py``:
  merge, JSON Patch, the strategic merges rotator sends, server-side apply by one manager).
* No ``creationTimestamp`` or ``deletionTimestamp`` is set: this server has no clock; a test
  that needs one writes it with :meth:`MemAPI.put`.

For the test: :meth:`~MemAPI.put` and :meth:`~MemAPI.remove` change objects as another client
would (not recorded as writes); every write the code under test makes and the server accepts is
in :attr:`~MemAPI.writes` as a :class:`Write`; :meth:`~MemAPI.fail` makes chosen calls raise an
error once, N times or until :meth:`~MemAPI.heal`; :meth:`~MemAPI.intercept` runs a function
before every call (advance a clock, hold a thread); :meth:`~MemAPI.feed` connects an informer
cache (a :class:`~controllers.runtime.store.Store`), which :meth:`~MemAPI.sync` brings up to
date — the informer catching up, when the test says so.
"""

from __future__ import annotations

import copy
import enum
import itertools
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from controllers.runtime import errors, objects
from controllers.runtime.client import PatchType
from controllers.runtime.objects import Body, ObjectKey, Resource
from controllers.runtime.store import Store
from tests.support import patches


class Verb(enum.StrEnum):
    GET = "get"
    LIST = "list"
    CREATE = "create"
    PATCH = "patch"


@dataclass(frozen=True)
class Call:
    """One call as it arrives, before it is served: what :meth:`MemAPI.intercept` and
    :meth:`MemAPI.fail` see."""

    verb: Verb
    resource: Resource
    namespace: str
    name: str
    subresource: str = ""
    metadata_only: bool = False


@dataclass(frozen=True)
class Write:
    """A write the server accepted: ``body`` is the body or the patch as sent (a copy)."""

    verb: Verb
    resource: Resource
    key: ObjectKey
    subresource: str
    body: Any
    patch_type: PatchType | None = None
    field_manager: str | None = None
    force: bool = False

    @property
    def name(self) -> str:
        return objects.split_key(self.key)[1]

    @property
    def namespace(self) -> str:
        return objects.split_key(self.key)[0]

    @property
    def status(self) -> dict[str, Any]:
        """The status a status write sent."""
        assert self.subresource == "status", f"a write of {self.resource}, not of its status"
        return dict(self.body["status"])


@dataclass
class _Fault:
    verb: Verb | None
    resource: Resource | None
    subresource: str | None
    name: str | None
    error: errors.ApiError
    times: int | None

    def matches(self, call: Call) -> bool:
        return (
            (self.verb is None or self.verb is call.verb)
            and (self.resource is None or self.resource == call.resource)
            and (self.subresource is None or self.subresource == call.subresource)
            and (self.name is None or self.name == call.name)
        )


_Key = tuple[Resource, str, str]
_SYSTEM = ("uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp")
"""Metadata the server sets: no write of a client changes it."""


@dataclass(frozen=True)
class _Feed:
    store: Store
    view: Callable[[Body], Body] | None

    def seen(self, obj: Body) -> Body:
        """``obj`` as this informer caches it: a copy of its own, through the view."""
        body = copy.deepcopy(obj)
        return self.view(body) if self.view is not None else body


@dataclass
class MemAPI:
    """The API server, in memory (see the module docstring). Safe to call from several threads;
    an :meth:`intercept` hook runs outside the lock, so it may block."""

    writes: list[Write] = field(default_factory=list)
    refused: list[tuple[Call, errors.ApiError]] = field(default_factory=list)
    """Every call that raised, with what it raised (a fault, a conflict, a missing object)."""
    calls: list[Call] = field(default_factory=list)
    """Every call, reads included, in the order they arrived."""

    def __post_init__(self) -> None:
        self._lock = threading.RLock()
        self._objects: dict[_Key, Body] = {}
        self._applied: dict[tuple[_Key, str, str], Any] = {}  # (key, manager, subresource)
        self._revision = itertools.count(1)
        self._uids = itertools.count(1)
        self._faults: list[_Fault] = []
        self._hooks: list[Callable[[Call], None]] = []
        self._feeds: dict[Resource, list[_Feed]] = {}

    # --- the test's side ---------------------------------------------------------------------

    def put(
        self,
        resource: Resource,
        body: Mapping[str, Any],
        *,
        field_manager: str | None = None,
        cached: bool = True,
    ) -> Body:
        """Stores ``body`` whole, status included, as another client left it (a user, the
        controller's previous run); cached at once in every fed store. Its ``generation`` is
        kept when given, else 1 or one more on a spec change; a ``resourceVersion`` given is
        replaced by the next one. Not a :class:`Write`. With ``field_manager``, everything but
        the status counts as applied by that manager (the previous run's apply): its next apply
        removes what it no longer sends. ``cached=False``: the informers have not seen it yet
        (until :meth:`sync`)."""
        obj = copy.deepcopy(dict(body))
        md = obj.setdefault("metadata", {})
        key = self._key(resource, md.get("namespace", ""), md["name"])
        with self._lock:
            if field_manager is not None:
                applied = copy.deepcopy({k: v for k, v in obj.items() if k != "status"})
                for system in _SYSTEM:
                    applied["metadata"].pop(system, None)
                self._applied[(key, field_manager, "")] = applied
            old = self._objects.get(key)
            if "generation" not in md:
                md["generation"] = _generation(old, obj)
            md.setdefault("uid", (old or {}).get("metadata", {}).get("uid") or self._uid())
            md["resourceVersion"] = self._next()
            self._objects[key] = obj
        for feed in self._feeds.get(resource, []) if cached else []:
            feed.store.upsert(feed.seen(obj))
        return copy.deepcopy(obj)

    def remove(self, resource: Resource, namespace: str, name: str) -> None:
        """Deletes an object as another client would; gone from every fed store at once."""
        with self._lock:
            self._objects.pop(self._key(resource, namespace, name), None)
        for feed in self._feeds.get(resource, []):
            feed.store.delete(objects.make_key(namespace, name))

    def stored(self, resource: Resource, namespace: str, name: str) -> Body | None:
        """What the server holds now (a copy)."""
        with self._lock:
            obj = self._objects.get(self._key(resource, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def feed(
        self, resource: Resource, store: Store, *, view: Callable[[Body], Body] | None = None
    ) -> None:
        """Makes ``store`` the informer cache of ``resource`` (each object through ``view``, an
        informer's transform, when given): :meth:`put` and :meth:`remove` reach it at once,
        writes of the code under test at the next :meth:`sync`."""
        self._feeds.setdefault(resource, []).append(_Feed(store, view))

    def sync(self) -> None:
        """Brings every fed store up to date with the server: the informers catch up."""
        with self._lock:
            held = {k: copy.deepcopy(v) for k, v in self._objects.items()}
        for resource, feeds in self._feeds.items():
            current = [obj for (r, _, _), obj in held.items() if r == resource]
            for feed in feeds:
                feed.store.replace([feed.seen(obj) for obj in current])

    def fail(
        self,
        error: errors.ApiError,
        *,
        verb: Verb | None = None,
        resource: Resource | None = None,
        subresource: str | None = None,
        name: str | None = None,
        times: int | None = 1,
    ) -> None:
        """Makes the next ``times`` calls that match (every one while ``times`` is None) raise
        ``error`` before they are served. None matches anything."""
        with self._lock:
            self._faults.append(_Fault(verb, resource, subresource, name, error, times))

    def heal(self) -> None:
        """Forgets every :meth:`fail` not yet used up."""
        with self._lock:
            self._faults.clear()

    def intercept(self, hook: Callable[[Call], None]) -> None:
        """Runs ``hook`` before every call, outside the lock; it may raise or block."""
        self._hooks.append(hook)

    def writes_to(self, resource: Resource, *, subresource: str = "") -> list[Write]:
        """The accepted writes of ``resource`` (its ``subresource``), in order."""
        with self._lock:
            return [
                w for w in self.writes if w.resource == resource and w.subresource == subresource
            ]

    # --- the Protocols -----------------------------------------------------------------------

    def get(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        subresource: str = "",
        metadata_only: bool = False,
    ) -> Body:
        call = self._arrive(Verb.GET, resource, namespace, name, subresource, metadata_only)
        with self._lock:
            obj = self._found(call)
            if metadata_only:
                return {
                    "apiVersion": "meta.k8s.io/v1",
                    "kind": "PartialObjectMetadata",
                    "metadata": copy.deepcopy(obj["metadata"]),
                }
            return copy.deepcopy(obj)

    def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
        metadata_only: bool = False,
    ) -> Body:
        """Every object of ``resource`` (in ``namespace``); no selectors, no pages."""
        if label_selector or field_selector or continue_token:
            raise NotImplementedError("MemAPI.list has no selectors and no pages")
        self._arrive(Verb.LIST, resource, namespace, "", "", metadata_only)
        with self._lock:
            items = [
                copy.deepcopy(obj)
                for (r, ns, _), obj in sorted(self._objects.items(), key=lambda kv: kv[0][1:])
                if r == resource and (namespace is None or ns == namespace)
            ]
            return {"kind": f"{resource.kind}List", "items": items}

    def create(
        self,
        resource: Resource,
        body: Mapping[str, Any],
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str = "",
        field_manager: str | None = None,
    ) -> Body:
        """A create; with ``name`` and ``subresource`` (a TokenRequest) the body is answered as
        sent, once the parent object is found."""
        target = name if subresource else str(objects.meta(body).get("name", ""))
        call = self._arrive(Verb.CREATE, resource, namespace, target, subresource, False)
        with self._lock:
            if subresource:
                self._found(call)
                answer = copy.deepcopy(dict(body))
            else:
                key = self._key(resource, call.namespace, call.name)
                if key in self._objects:
                    raise self._refuse(
                        call, errors.AlreadyExists(f'{resource} "{call.name}" already exists')
                    )
                answer = copy.deepcopy(dict(body))
                md = answer.setdefault("metadata", {})
                if call.namespace:
                    md["namespace"] = call.namespace
                md.update(uid=self._uid(), generation=1, resourceVersion=self._next())
                self._objects[key] = answer
            self._record(call, Verb.CREATE, body, None, field_manager, False)
            return copy.deepcopy(answer)

    def patch(
        self,
        resource: Resource,
        name: str,
        patch: Mapping[str, Any] | Sequence[Any],
        *,
        namespace: str | None = None,
        patch_type: PatchType = PatchType.MERGE,
        subresource: str = "",
        field_manager: str | None = None,
        force: bool = False,
    ) -> Body:
        call = self._arrive(Verb.PATCH, resource, namespace, name, subresource, False)
        with self._lock:
            key = self._key(resource, call.namespace, name)
            old = self._objects.get(key)
            creating = old is None and patch_type is PatchType.APPLY and not subresource
            if old is None and not creating:
                self._found(call)  # raises NotFound
            if isinstance(patch, Mapping):
                wanted = (patch.get("metadata") or {}).get("resourceVersion")
                have = objects.meta(old or {}).get("resourceVersion")
                if wanted and wanted != have:
                    raise self._refuse(
                        call,
                        errors.Conflict(
                            f"Operation cannot be fulfilled on {resource} {name!r}: the object "
                            "has been modified; please apply your changes to the latest version "
                            "and try again",
                            status=409,
                            reason="Conflict",
                        ),
                    )
            base = old or {
                "apiVersion": resource.api_version,
                "kind": resource.kind,
                "metadata": {"name": name, "namespace": call.namespace} if call.namespace else {},
            }
            try:
                patched = self._patched(key, base, patch, patch_type, subresource, field_manager)
            except errors.ApiError as exc:
                raise self._refuse(call, exc) from None
            # a subresource write changes only that part; a write of the object, all but status
            new = copy.deepcopy(base)
            if subresource == "status":
                new["status"] = patched.get("status")
                if new["status"] is None:
                    del new["status"]
            else:
                new = {k: v for k, v in patched.items() if k != "status"}
                if "status" in base:
                    new["status"] = copy.deepcopy(base["status"])
            md = new.setdefault("metadata", {})
            for kept in ("name", "namespace", *_SYSTEM):
                if kept in (base.get("metadata") or {}):
                    md[kept] = base["metadata"][kept]
            if new != base or creating:
                md["generation"] = _generation(old, new)
                md.setdefault("uid", self._uid())
                md["resourceVersion"] = self._next()
                self._objects[key] = new
            self._record(call, Verb.PATCH, patch, patch_type, field_manager, force)
            return copy.deepcopy(new)

    # --- inside ------------------------------------------------------------------------------

    def _arrive(
        self,
        verb: Verb,
        resource: Resource,
        namespace: str | None,
        name: str | None,
        subresource: str,
        metadata_only: bool,
    ) -> Call:
        for value, what in ((namespace, "namespace"), (name, "name")):
            if value:
                objects.path_segment(value, what)  # InvalidName, as the client refuses it
        call = Call(verb, resource, namespace or "", name or "", subresource, metadata_only)
        with self._lock:
            self.calls.append(call)
        for hook in list(self._hooks):
            hook(call)
        with self._lock:
            for fault in self._faults:
                if fault.matches(call):
                    if fault.times is not None:
                        fault.times -= 1
                        if fault.times <= 0:
                            self._faults.remove(fault)
                    raise self._refuse(call, fault.error)
        return call

    def _refuse(self, call: Call, error: errors.ApiError) -> errors.ApiError:
        self.refused.append((call, error))
        return error

    def _found(self, call: Call) -> Body:
        obj = self._objects.get(self._key(call.resource, call.namespace, call.name))
        if obj is None:
            raise self._refuse(
                call,
                errors.NotFound(
                    f'{call.resource} "{call.name}" not found', status=404, reason="NotFound"
                ),
            )
        return obj

    def _patched(
        self,
        key: _Key,
        base: Body,
        patch: Mapping[str, Any] | Sequence[Any],
        patch_type: PatchType,
        subresource: str,
        field_manager: str | None,
    ) -> Body:
        if patch_type is PatchType.JSON:
            return patches.json_patch(base, patch)
        if not isinstance(patch, Mapping):
            raise errors.BadRequest("a merge patch is a JSON object", status=400)
        body = _without_version(patch)
        if patch_type is PatchType.MERGE:
            return dict(patches.merge(base, body))
        if patch_type is PatchType.STRATEGIC:
            return dict(patches.strategic(base, body))
        managed = (key, field_manager or "", subresource)
        before = self._applied.get(managed, {})
        self._applied[managed] = copy.deepcopy(body)
        return dict(patches.apply(base, body, before))

    def _record(
        self,
        call: Call,
        verb: Verb,
        body: Any,
        patch_type: PatchType | None,
        field_manager: str | None,
        force: bool,
    ) -> None:
        self.writes.append(
            Write(
                verb,
                call.resource,
                objects.make_key(call.namespace, call.name),
                call.subresource,
                copy.deepcopy(body),
                patch_type,
                field_manager,
                force,
            )
        )

    def _key(self, resource: Resource, namespace: str | None, name: str) -> _Key:
        return (resource, (namespace or "") if resource.namespaced else "", name)

    def _next(self) -> str:
        return str(next(self._revision))

    def _uid(self) -> str:
        return f"uid-{next(self._uids)}"


def _generation(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> int:
    if old is None:
        return 1
    was = int(objects.meta(old).get("generation") or 1)
    return was + 1 if old.get("spec") != new.get("spec") else was


def _without_version(patch: Mapping[str, Any]) -> dict[str, Any]:
    body = copy.deepcopy(dict(patch))
    if isinstance(body.get("metadata"), dict):
        body["metadata"].pop("resourceVersion", None)
    return body


class RecordedEvents:
    """An :class:`~controllers.runtime.eventsink.EventSink` that keeps ``(type, reason,
    message)`` of every Event, in order, and the object each was about."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []
        self.about: list[Mapping[str, Any]] = []

    def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))
        self.about.append(obj)


class FullBodies:
    """A :class:`~controllers.runtime.cache.FullObjects` over :class:`MemAPI`: each ``get`` reads
    the server's current body (through :meth:`MemAPI.get`, so faults apply), as the real reader
    does when its metadata cache is current; None for an absent object. ``forget`` calls are
    kept in :attr:`forgotten`."""

    def __init__(self, api: MemAPI, resource: Resource = objects.SECRETS) -> None:
        self._api = api
        self._resource = resource
        self.forgotten: list[tuple[str, str]] = []

    def get(self, namespace: str, name: str) -> Body | None:
        try:
            return self._api.get(self._resource, name, namespace=namespace)
        except errors.NotFound:
            return None

    def forget(self, namespace: str, name: str) -> None:
        self.forgotten.append((namespace, name))
