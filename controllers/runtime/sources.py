"""Sources: where a controller's requests come from (controller-runtime's ``source`` + ``handler``).

* :class:`Kind` — changes to the primary kind (``for_``): the object's own key.
* :class:`Owned` — changes to objects a kind controls: the controlling owner's key.
* :class:`Mapped` — changes to anything: keys computed by a function (usually an index lookup).

Controllers declare them through :mod:`.builder` (``for_`` / ``owns`` / ``watches``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from controllers.runtime import objects
from controllers.runtime.informer import Informer
from controllers.runtime.objects import Body, Resource
from controllers.runtime.reconcile import Request

Enqueue = Callable[[Request], None]
Predicate = Callable[[Body | None, Body], bool]
"""``(old or None, new) → whether the change matters``; deletions always pass."""


class Source(Protocol):
    """Feeds requests to a controller once started."""

    def start(self, enqueue: Enqueue) -> None: ...

    def stop(self) -> None: ...


class _InformerSource:
    """Maps every informer event to requests through ``_requests``.

    Only the primary kind's source (:class:`Kind`) is given the objects its informer holds
    already when the controller starts (controller-runtime gives them to every source). Every
    request another source makes names an object of the primary kind: one that exists, which
    :class:`Kind`'s own delivery requests already (a queue holds a key once), or one that does
    not, whose reconcile finds nothing to do in a controller that has just started (each of
    rotator's reconcilers, on an object it cannot find, forgets what it held of it). Giving them
    anyway cost 150,000 mapper calls and enqueues for 30,000 keys on a no-op restart of the
    scale benchmark's 10,000 chains (``python -m tests.bench.scale``). Changes after the start
    reach every source, as before."""

    replays = False
    """Whether the objects already cached at the start are delivered (as adds)."""

    def __init__(self, informer: Informer, predicate: Predicate | None = None) -> None:
        self._informer = informer
        self._predicate = predicate
        self._enqueue: Enqueue | None = None

    def _requests(self, obj: Body) -> Iterable[Request]:
        raise NotImplementedError

    def start(self, enqueue: Enqueue) -> None:
        self._enqueue = enqueue
        self._informer.add_handler(self, replay=self.replays)

    def stop(self) -> None:
        self._enqueue = None

    def on_add(self, obj: Body) -> None:
        if self._predicate is None or self._predicate(None, obj):
            self._emit(obj)

    def on_update(self, old: Body, new: Body) -> None:
        if self._predicate is None or old is new or self._predicate(old, new):
            self._emit(old, new)

    def on_delete(self, obj: Body) -> None:
        self._emit(obj)

    def _emit(self, *objs: Body) -> None:
        enqueue = self._enqueue
        if enqueue is None:
            return
        for obj in objs:
            for request in self._requests(obj):
                enqueue(request)


class Kind(_InformerSource):
    """Requests the changed object itself; at the start, every object cached already."""

    replays = True

    def _requests(self, obj: Body) -> Iterable[Request]:
        return (Request.for_object(obj),)

    def _emit(self, *objs: Body) -> None:
        super()._emit(objs[-1])  # on update, old and new share a key


class Owned(_InformerSource):
    """Requests the controlling owner of the changed object, if it is of kind ``owner``."""

    def __init__(
        self, informer: Informer, owner: Resource, predicate: Predicate | None = None
    ) -> None:
        super().__init__(informer, predicate)
        self._owner = owner

    def _requests(self, obj: Body) -> Iterable[Request]:
        ref = objects.controller_of(obj)
        if ref is None or ref.get("kind") != self._owner.kind:
            return ()
        if ref.get("apiVersion", "").rpartition("/")[0] != self._owner.group:
            return ()
        return (Request(objects.namespace(obj), ref.get("name", "")),)


class Mapped(_InformerSource):
    """Requests whatever ``mapper`` returns for the changed object (old and new, on update)."""

    def __init__(
        self,
        informer: Informer,
        mapper: Callable[[Mapping[str, Any]], Iterable[Request]],
        predicate: Predicate | None = None,
    ) -> None:
        super().__init__(informer, predicate)
        self._mapper = mapper

    def _requests(self, obj: Body) -> Iterable[Request]:
        return self._mapper(obj)
