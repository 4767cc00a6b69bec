"""Informers: list, then watch, into an indexed :class:`~.store.Store`, and tell handlers.

Why not ``kubernetes.informer.SharedInformer`` (kubernetes 37)? It decodes every object into the
client's generated model classes (slow, and heavy for thousands of Secrets), has no indexes, no
has-synced signal, no metadata-only mode, retries at a fixed 5 s instead of backing off, and does
not request watch bookmarks. This module keeps client-go's reflector semantics instead:

* List (paginated) then watch from the list's resourceVersion, with bookmarks, so a reconnect
  resumes where it left off instead of re-listing.
* ``410 Gone`` (resourceVersion compacted away) → re-list, diffing against the store so handlers
  see the deletions they missed. Any other failure → reconnect after a jittered exponential backoff.
* Periodic resync: every ``resync_period`` (± jitter) handlers get ``on_update(obj, obj)`` for every
  stored object, so a reconcile lost to a bug still happens eventually.
* Metadata-only mode asks for ``PartialObjectMetadata``: the store never holds the objects' bodies.
  Large, never-read fields are dropped on the way in (``managedFields`` and the
  ``last-applied-configuration`` annotation, which for a Secret holds its data), a caller's
  ``transform`` keeps only what its reconcilers read (controller-runtime's cache transforms), and
  a :class:`~.compaction.Compactor` makes what is kept share the keys, strings and key tables
  cached objects repeat.
* ``has_synced()`` is true once every namespace's first list is stored and handed to handlers.
* ``shard`` (namespaced kinds): only the objects of those shards' namespaces, asked of the
  server with a ``shardSelector`` and, whatever it answers, tested again here before anything is
  stored or handed on; :attr:`Informer.filtering` says whether the server said it filtered (its
  list echoed the selector in ``metadata.shardInfo``). A v1.36 server with the gate filters
  every list and watch but echoes only on the full lists of built-in kinds: a custom resource's
  list (unstructured) and a metadata-only one (``PartialObjectMetadataList``) come back
  filtered and silent, so one informer's answer cannot tell a silent filter from none; a
  replica's other informers can (``shards.Coordinator``).

Handlers run on the informer's threads and must be quick (they enqueue keys).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from controllers.runtime import backoff as backoffs
from controllers.runtime import client as clients
from controllers.runtime import errors, objects, sharding
from controllers.runtime.compaction import Compactor
from controllers.runtime.objects import Body, Resource
from controllers.runtime.store import IndexFunc, Store

log = structlog.get_logger(__name__)

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

Transform = Callable[[Body], Body]


class EventHandler(Protocol):
    """Receives what an informer learns; called on the informer's threads, must not block."""

    def on_add(self, obj: Body) -> None: ...

    def on_update(self, old: Body, new: Body) -> None: ...

    def on_delete(self, obj: Body) -> None: ...


@dataclass(frozen=True)
class InformerOptions:
    """Tuning for list and watch; the defaults follow client-go."""

    resync_period: float = 10 * 3600.0
    """Seconds between resyncs, ±``resync_jitter``; 0 disables. Defaults to 10 hours."""
    resync_jitter: float = 0.1
    page_size: int = 500
    """Objects per list page. Defaults to 500."""
    page_bytes: int | None = None
    """Bytes one list page may have; None: ``page_size`` objects of ``item_bytes``
    (:func:`page_bytes`), at most the client's ``BodyLimits.list_page_bytes``."""
    item_bytes: int | None = None
    """JSON bytes of one object of the kind listed, at most as usual (a larger one makes its
    page come again smaller); None: the view's (:data:`METADATA_ITEM_BYTES` metadata-only,
    else :data:`ITEM_BYTES`, the largest object the API server stores)."""
    watch_timeout: tuple[int, int] = (300, 600)
    """Server-side watch timeout, drawn from this range per request. Defaults to 5-10 minutes."""
    backoff_initial: float = 0.8
    backoff_cap: float = 30.0


METADATA_ITEM_BYTES = 16 << 10
"""JSON bytes of one object's metadata as a metadata-only list serves it (name, labels, a few
annotations, managedFields): 500 of them, 8 MB. An object with more (256 KiB of annotations)
makes its page come again smaller, not the list fail."""
ITEM_BYTES = 3 << 19
"""JSON bytes of one whole object, at most: a Secret of 1 MiB of data is 1.37 MiB as base64
(etcd stores at most 1.5 MiB). 50 managed Secrets: 75 MiB."""


def page_bytes(options: InformerOptions, *, metadata_only: bool) -> int:
    """The byte bound of a list page of this view: ``options.page_bytes``, else ``page_size``
    (the ``limit`` the informer asks for) objects of ``options.item_bytes``, or of
    :data:`METADATA_ITEM_BYTES` or :data:`ITEM_BYTES` (the client holds the page to its own
    ``list_page_bytes`` too). The same bound holds when a page too large is asked for again
    with a smaller ``limit``, so any one object the API server stores still fits."""
    if options.page_bytes is not None:
        return options.page_bytes
    if options.item_bytes is not None:
        return options.page_size * options.item_bytes
    return options.page_size * (METADATA_ITEM_BYTES if metadata_only else ITEM_BYTES)


def strip_never_read(obj: Body) -> Body:
    """Drops what no controller reads and that can be large: ``managedFields`` and kubectl's
    ``last-applied-configuration`` annotation (a copy of the whole object as applied — for a
    Secret, its data). controller-runtime's ``cache.TransformStripManagedFields`` and friends."""
    md = obj.get("metadata")
    if isinstance(md, dict):
        md.pop("managedFields", None)
        annotations = md.get("annotations")
        if isinstance(annotations, dict):
            annotations.pop(LAST_APPLIED, None)
    return obj


class Informer:
    """Keeps a :class:`~.store.Store` in step with one resource type (in some namespaces)."""

    def __init__(
        self,
        api: clients.Client,
        resource: Resource,
        *,
        namespaces: Sequence[str] | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        metadata_only: bool = False,
        transform: Transform | None = None,
        options: InformerOptions | None = None,
        shard: sharding.ShardFilter | None = None,
        own_keys: frozenset[str] = frozenset(),
    ) -> None:
        """``own_keys``: the label and annotation keys the controller writes itself, whose maps
        may share key tables (:class:`~.compaction.Compactor`)."""
        self.resource = resource
        self._shard = shard if resource.namespaced else None
        self._shard_selector = self._shard.selector if self._shard is not None else None
        # passed only with a shard: the API stand-ins of the unit tests know no such parameter
        self._shard_query: dict[str, str] = (
            {"shard_selector": self._shard_selector} if self._shard_selector else {}
        )
        self.filtering: str | None = None
        """With a shard: ``server-side`` (the last list echoed the selector) or
        ``client-side`` (it did not: no gate, or a list the server filters without saying so,
        see the module's docstring); None without one, or before the first list."""
        self.metadata_only = metadata_only
        self.store = Store()
        self._api = api
        # One reflector per distinct namespace (a repeated --namespace must not wait for ever
        # on a second sync of the same scope); None is every namespace.
        self._scopes: list[str | None] = (
            list(dict.fromkeys(namespaces)) if namespaces and resource.namespaced else [None]
        )
        self._label_selector = label_selector
        self._field_selector = field_selector
        compact = Compactor(own_keys=own_keys)
        self._transform: Transform = (
            (lambda obj: compact(strip_never_read(obj)))
            if transform is None
            else (lambda obj: compact(transform(strip_never_read(obj))))
        )
        self._options = options or InformerOptions()
        self._handlers: list[EventHandler] = []
        self._handlers_lock = threading.Lock()
        self._stop = threading.Event()
        self._synced_scopes: set[str | None] = set()
        self._synced = threading.Event()
        self._threads: list[threading.Thread] = []
        self._streams: dict[str | None, clients.WatchStream] = {}
        self._streams_lock = threading.Lock()
        self._log = log.bind(resource=str(resource))

    # --- configuration -----------------------------------------------------------------------

    @property
    def page_bytes(self) -> int:
        """The byte bound of each list page this informer asks for (:func:`page_bytes`)."""
        return page_bytes(self._options, metadata_only=self.metadata_only)

    @property
    def label_selector(self) -> str | None:
        """The label selector of its lists and watches (None: every object)."""
        return self._label_selector

    @property
    def page_size(self) -> int:
        """Objects per list page it asks for (:attr:`InformerOptions.page_size`)."""
        return self._options.page_size

    def add_index(self, name: str, func: IndexFunc) -> None:
        self.store.add_index(name, func)

    def add_handler(self, handler: EventHandler, *, replay: bool = True) -> None:
        """Registers ``handler``; objects already stored are delivered to it as adds, unless
        ``replay`` is False (it then sees changes from now on only)."""
        with self._handlers_lock:
            self._handlers.append(handler)
            existing = self.store.items() if replay else []
        for obj in existing:
            _call(handler.on_add, obj)

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        for scope in self._scopes:
            thread = threading.Thread(
                target=self._reflect, args=(scope,), name=f"informer-{self.resource}", daemon=True
            )
            self._threads.append(thread)
            thread.start()
        if self._options.resync_period > 0:
            thread = threading.Thread(
                target=self._resync_loop, name=f"resync-{self.resource}", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self._streams_lock:
            streams = list(self._streams.values())
        for stream in streams:
            stream.close()
        for thread in self._threads:
            thread.join(timeout)

    def has_synced(self) -> bool:
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    # --- reflector ---------------------------------------------------------------------------

    def _reflect(self, namespace: str | None) -> None:
        backoff = backoffs.Backoff(self._options.backoff_initial, self._options.backoff_cap)
        resource_version: str | None = None
        rng = random.Random()  # noqa: S311 - spreading timeouts, not cryptography
        while not self._stop.is_set():
            try:
                if resource_version is None:
                    resource_version = self._list(namespace)
                    backoff.reset()
                low, high = self._options.watch_timeout
                stream = self._api.watch(
                    self.resource,
                    namespace=namespace,
                    resource_version=resource_version,
                    timeout_seconds=rng.randint(low, high),
                    label_selector=self._label_selector,
                    field_selector=self._field_selector,
                    metadata_only=self.metadata_only,
                    **self._shard_query,
                )
                with self._streams_lock:
                    self._streams[namespace] = stream
                if self._stop.is_set():
                    stream.close()
                for event in stream:
                    resource_version = self._apply(event, resource_version)
                    backoff.reset()
            except errors.Gone:
                self._log.info("informer.relist", namespace=namespace, why="resource version gone")
                resource_version = None
            except Exception as exc:  # any failure: back off and reconnect, never die
                if self._stop.is_set():
                    break
                delay = backoff.next()
                self._log.warning(
                    "informer.reconnect",
                    namespace=namespace,
                    error=str(exc),
                    error_type=type(exc).__name__,
                    retry_in=round(delay, 2),
                )
                self._stop.wait(delay)
            finally:
                with self._streams_lock:
                    self._streams.pop(namespace, None)

    def _list(self, namespace: str | None) -> str:
        items: list[Body] = []
        continue_token: str | None = None
        limit = self._options.page_size
        max_bytes = self.page_bytes
        while True:
            try:
                page = self._api.list(
                    self.resource,
                    namespace=namespace,
                    label_selector=self._label_selector,
                    field_selector=self._field_selector,
                    limit=limit,
                    continue_token=continue_token,
                    metadata_only=self.metadata_only,
                    max_bytes=max_bytes,
                    **self._shard_query,
                )
            except clients.BodyTooLarge:
                if limit == 1:
                    raise
                # Objects larger than the view's usual size: the same page in halves, and the
                # rest of this list so (a continue token may be sent with any limit), not a
                # list that never syncs.
                limit = max(1, limit // 2)
                self._log.info("informer.page_halved", namespace=namespace, limit=limit)
                continue
            raw: list[Body | None] = page.pop("items", None) or []
            meta = page.get("metadata") or {}
            del page
            self._note_filtering(meta, first_page=continue_token is None)
            for i, item in enumerate(raw):
                raw[i] = None  # drop each raw item once transformed: peak memory is one page
                assert item is not None
                if not self._in_shard(item):
                    continue
                # list items omit apiVersion/kind; watch events carry them
                item.setdefault("apiVersion", self.resource.api_version)
                item.setdefault("kind", self.resource.kind)
                items.append(self._transform(item))
            del raw
            continue_token = meta.get("continue")
            if not continue_token:
                resource_version = str(meta.get("resourceVersion") or "")
                break
        upserts, deletions = self.store.replace(items, namespace=namespace)
        handlers = self._current_handlers()
        for old in deletions:
            for h in handlers:
                _call(h.on_delete, old)
        for previous, new in upserts:
            for h in handlers:
                if previous is None:
                    _call(h.on_add, new)
                else:
                    _call(h.on_update, previous, new)
        self._mark_synced(namespace)
        self._log.debug("informer.listed", namespace=namespace, count=len(items))
        return resource_version

    def _apply(self, event: Mapping[str, Any], resource_version: str) -> str:
        kind = str(event.get("type"))
        obj = event.get("object") or {}
        if kind == "ERROR":
            code = int(obj.get("code") or 0)
            message = str(obj.get("message") or "watch error")
            raise errors.from_status(code, reason=str(obj.get("reason") or ""), message=message)
        new_version = str(objects.meta(obj).get("resourceVersion") or resource_version)
        if kind == "BOOKMARK" or not self._in_shard(obj):
            return new_version
        obj = self._transform(dict(obj))
        if kind in ("ADDED", "MODIFIED"):
            old = self.store.upsert(obj)
            for h in self._current_handlers():
                if old is None:
                    _call(h.on_add, obj)
                else:
                    _call(h.on_update, old, obj)
        elif kind == "DELETED":
            removed = self.store.delete(objects.key_of(obj))
            for h in self._current_handlers():
                _call(h.on_delete, removed if removed is not None else obj)
        return new_version

    def _note_filtering(self, meta: Mapping[str, Any], *, first_page: bool) -> None:
        """From a list's first page: did the server filter by the shard (it echoes the
        selector in ``shardInfo``), or does this side (a server without the feature gate)?"""
        if self._shard_selector is not None and first_page:
            echoed = (meta.get("shardInfo") or {}).get("selector")
            self.filtering = "server-side" if echoed == self._shard_selector else "client-side"

    def _in_shard(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` is in this informer's shards (always, without any)."""
        if self._shard is None:
            return True
        return self._shard.holds(str((obj.get("metadata") or {}).get("namespace") or ""))

    def _mark_synced(self, namespace: str | None) -> None:
        self._synced_scopes.add(namespace)
        if len(self._synced_scopes) == len(self._scopes):
            self._synced.set()

    def _resync_loop(self) -> None:
        rng = random.Random()  # noqa: S311 - spreading resyncs, not cryptography
        period, jitter = self._options.resync_period, self._options.resync_jitter
        while not self._stop.wait(period * (1.0 + rng.uniform(-jitter, jitter))):
            if not self.has_synced():
                continue
            handlers = self._current_handlers()
            for obj in self.store.items():
                for h in handlers:
                    _call(h.on_update, obj, obj)

    def _current_handlers(self) -> list[EventHandler]:
        with self._handlers_lock:
            return list(self._handlers)


def _call(fn: Callable[..., None], *args: Body) -> None:
    try:
        fn(*args)
    except Exception:
        log.exception("informer.handler_failed")
