"""The informer cache: one informer per (resource, view), started and synced together.

Reconcilers read the world from here, never from the API server, except for what the cache
deliberately does not hold (the data of Secrets watched metadata-only).
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from controllers.runtime import apiclient, errors, objects, sharding
from controllers.runtime import client as clients
from controllers.runtime import clock as clocks
from controllers.runtime.informer import Informer, InformerOptions, Transform
from controllers.runtime.objects import Body, ObjectKey, Resource


@dataclass(frozen=True)
class View:
    """Which objects of a resource an informer holds, and how much of each."""

    resource: Resource
    metadata_only: bool = False
    label_selector: str | None = None


class Cache:
    """Informers by :class:`View`; ``namespaces`` limits namespaced kinds (empty: all), and
    ``shard`` to the namespaces of some shards (:mod:`.sharding`; None: every namespace)."""

    def __init__(
        self,
        api: clients.Client,
        *,
        namespaces: Sequence[str] = (),
        options: InformerOptions | None = None,
        clock: clocks.Clock | None = None,
        shard: sharding.ShardFilter | None = None,
    ) -> None:
        self._api = api
        self._shard = shard
        self._clock = clock or clocks.RealClock()
        self._namespaces = list(namespaces)
        self._options = options or InformerOptions()
        self._lock = threading.Lock()
        self._informers: dict[View, Informer] = {}
        self._started = False

    def informer(
        self,
        resource: Resource,
        *,
        metadata_only: bool = False,
        label_selector: str | None = None,
        transform: Transform | None = None,
        page_size: int | None = None,
        page_bytes: int | None = None,
        item_bytes: int | None = None,
        own_keys: frozenset[str] = frozenset(),
    ) -> Informer:
        """The informer for this view, created on first use (and started if the cache is).

        ``transform`` trims each object before it is stored (controller-runtime's
        ``cache.Options.ByObject[...].Transform``): keep only what reconcilers read.
        ``page_size`` overrides the list page size for views whose objects may be large (a
        page is held whole while it is decoded); ``page_bytes`` the byte bound of a page, or
        ``item_bytes`` the bytes of one object of the kind that bound is made of (default:
        :func:`~.informer.page_bytes` of the page size and view); ``own_keys`` the label and
        annotation keys whose maps may share key tables (:class:`~.compaction.Compactor`).
        They apply when the view is first created.
        """
        view = View(resource, metadata_only, label_selector)
        with self._lock:
            informer = self._informers.get(view)
            if informer is None:
                options = self._options
                if page_size is not None:
                    options = dataclasses.replace(options, page_size=page_size)
                if page_bytes is not None:
                    options = dataclasses.replace(options, page_bytes=page_bytes)
                if item_bytes is not None:
                    options = dataclasses.replace(options, item_bytes=item_bytes)
                informer = Informer(
                    self._api,
                    resource,
                    namespaces=self._namespaces or None,
                    label_selector=label_selector,
                    metadata_only=metadata_only,
                    transform=transform,
                    options=options,
                    shard=self._shard,
                    own_keys=own_keys,
                )
                self._informers[view] = informer
                if self._started:
                    informer.start()
            return informer

    def start(self) -> None:
        with self._lock:
            self._started = True
            informers = list(self._informers.values())
        for informer in informers:
            informer.start()

    def stop(self) -> None:
        with self._lock:
            informers = list(self._informers.values())
        for informer in informers:
            informer.stop()

    def has_synced(self) -> bool:
        with self._lock:
            return self._started and all(i.has_synced() for i in self._informers.values())

    def wait_for_sync(self, timeout: float) -> bool:
        end = self._clock.monotonic() + timeout
        with self._lock:
            informers = list(self._informers.values())
        return all(i.wait_for_sync(max(0.0, end - self._clock.monotonic())) for i in informers)

    def filtering(self) -> set[str]:
        """How the informers' shards were filtered (``server-side``, ``client-side``), as their
        lists were answered; empty without a shard or before the first list."""
        with self._lock:
            return {i.filtering for i in self._informers.values() if i.filtering is not None}

    def unsynced(self) -> list[str]:
        """Names of the views not yet synced, for ``/readyz`` and logs."""
        with self._lock:
            return [
                f"{view.resource}{' (metadata)' if view.metadata_only else ''}"
                for view, informer in self._informers.items()
                if not informer.has_synced()
            ]


class FullObjects(Protocol):
    """What a reconciler calls on a :class:`FullObjectReader`; a test hands it a stand-in
    reading the in-memory API server (``tests/support/memapi.py``) without a ``cast``."""

    def get(self, namespace: str, name: str) -> Body | None: ...

    def forget(self, namespace: str, name: str) -> None: ...


class FullObjectReader:
    """Full bodies of the few objects of a kind watched metadata-only (Secrets a policy uses).

    The metadata informer says whether an object exists and which resourceVersion is current; the
    body is fetched once per resourceVersion and kept in a small LRU, so repeated reconciles of an
    unchanged object read nothing from the API server. The LRU is bounded in bytes (the size of
    each body as JSON), not in entries: anyone who can create a Secret decides how large it is,
    and a count bound would let a few hundred 1 MiB Secrets fill the controller's memory. A body
    larger than a quarter of the budget is returned but not kept. Only ``metadata`` (name,
    namespace, uid, resourceVersion) and ``data`` of a kept body are retained, and as the JSON
    they are measured by: the budget is then the memory held (decoded, a small Secret's body
    takes six times its JSON: 1,140 bytes for the 177 of an API-key source), and each ``get``
    returns a body of its own, decoded again (microseconds), that the caller may change.
    Defaults to 16 MiB.
    """

    def __init__(
        self, api: apiclient.Reader, informer: Informer, *, max_bytes: int = 16 * 1024 * 1024
    ) -> None:
        if not informer.metadata_only:
            raise ValueError("a FullObjectReader sits over a metadata-only informer")
        self._api = api
        self._informer = informer
        self._max_bytes = max_bytes
        self._lock = threading.Lock()
        # key → (resourceVersion, the trimmed body as JSON); bytes counts the JSON's lengths
        self._bodies: OrderedDict[ObjectKey, tuple[str | None, bytes]] = OrderedDict()
        self._bytes = 0

    @property
    def cached_bytes(self) -> int:
        """Bytes of the bodies kept (as JSON), at most ``max_bytes``."""
        with self._lock:
            return self._bytes

    def get(self, namespace: str, name: str) -> Body | None:
        """The full object, or None when the cache says it does not exist."""
        key = objects.make_key(namespace, name)
        meta = self._informer.store.get(key)
        if meta is None:
            with self._lock:
                self._forget(key)
            return None
        version = objects.meta(meta).get("resourceVersion")
        with self._lock:
            kept = self._bodies.get(key)
            if kept is not None and kept[0] == version:
                self._bodies.move_to_end(key)
                encoded = kept[1]
            else:
                encoded = None
        if encoded is not None:
            body: Body = json.loads(encoded)
            return body
        try:
            body = self._api.get(self._informer.resource, name, namespace=namespace)
        except errors.NotFound:
            return None
        body = _trimmed(body)
        encoded = json.dumps(body, separators=(",", ":")).encode()
        with self._lock:
            self._forget(key)
            if len(encoded) <= self._max_bytes // 4:
                self._bodies[key] = (objects.meta(body).get("resourceVersion"), encoded)
                self._bytes += len(encoded)
                while self._bytes > self._max_bytes:
                    _, (_, dropped) = self._bodies.popitem(last=False)
                    self._bytes -= len(dropped)
        return body

    def forget(self, namespace: str, name: str) -> None:
        """Drops the kept body of an object its reader will not read again at this version (a
        copy, whose derived Secret records the version it was made from: 10,000 API-key sources
        kept ~3.4 MB for reads that never came)."""
        with self._lock:
            self._forget(objects.make_key(namespace, name))

    def _forget(self, key: ObjectKey) -> None:
        kept = self._bodies.pop(key, None)
        if kept is not None:
            self._bytes -= len(kept[1])


def _trimmed(body: Body) -> Body:
    md = objects.meta(body)
    kept_meta = {k: md[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in md}
    return {"metadata": kept_meta, "data": body.get("data") or {}}
