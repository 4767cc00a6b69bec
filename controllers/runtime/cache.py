"""The informer cache: one informer per (resource, view), started and synced together.

Reconcilers read the world from here, never from the API server, except for what the cache
deliberately does not hold (the data of Secrets watched metadata-only).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from controllers.runtime import client as clients
from controllers.runtime import errors, objects
from controllers.runtime.informer import Informer, InformerOptions
from controllers.runtime.objects import Body, ObjectKey, Resource


@dataclass(frozen=True)
class View:
    """Which objects of a resource an informer holds, and how much of each."""

    resource: Resource
    metadata_only: bool = False
    label_selector: str | None = None


class Cache:
    """Informers by :class:`View`; ``namespaces`` limits namespaced kinds (empty: all)."""

    def __init__(
        self,
        api: clients.Client,
        *,
        namespaces: Sequence[str] = (),
        options: InformerOptions | None = None,
    ) -> None:
        self._api = api
        self._namespaces = list(namespaces)
        self._options = options or InformerOptions()
        self._lock = threading.Lock()
        self._informers: dict[View, Informer] = {}
        self._started = False

    def informer(
        self, resource: Resource, *, metadata_only: bool = False, label_selector: str | None = None
    ) -> Informer:
        """The informer for this view, created on first use (and started if the cache is)."""
        view = View(resource, metadata_only, label_selector)
        with self._lock:
            informer = self._informers.get(view)
            if informer is None:
                informer = Informer(
                    self._api,
                    resource,
                    namespaces=self._namespaces or None,
                    label_selector=label_selector,
                    metadata_only=metadata_only,
                    options=self._options,
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
        end = time.monotonic() + timeout
        with self._lock:
            informers = list(self._informers.values())
        return all(i.wait_for_sync(max(0.0, end - time.monotonic())) for i in informers)

    def unsynced(self) -> list[str]:
        """Names of the views not yet synced, for ``/readyz`` and logs."""
        with self._lock:
            return [
                f"{view.resource}{' (metadata)' if view.metadata_only else ''}"
                for view, informer in self._informers.items()
                if not informer.has_synced()
            ]


class FullObjectReader:
    """Full bodies of the few objects of a kind watched metadata-only (Secrets a policy uses).

    The metadata informer says whether an object exists and which resourceVersion is current; the
    body is fetched once per resourceVersion and kept in a small LRU, so repeated reconciles of an
    unchanged object read nothing from the API server, and memory holds only the bodies that
    were asked for (at most ``max_entries``). Defaults to 1024 entries.
    """

    def __init__(self, api: clients.Client, informer: Informer, *, max_entries: int = 1024) -> None:
        if not informer.metadata_only:
            raise ValueError("a FullObjectReader sits over a metadata-only informer")
        self._api = api
        self._informer = informer
        self._max = max_entries
        self._lock = threading.Lock()
        self._bodies: OrderedDict[ObjectKey, Body] = OrderedDict()
        self.fetches = 0

    def get(self, namespace: str, name: str) -> Body | None:
        """The full object, or None when the cache says it does not exist."""
        key = objects.make_key(namespace, name)
        meta = self._informer.store.get(key)
        if meta is None:
            with self._lock:
                self._bodies.pop(key, None)
            return None
        version = objects.meta(meta).get("resourceVersion")
        with self._lock:
            body = self._bodies.get(key)
            if body is not None and objects.meta(body).get("resourceVersion") == version:
                self._bodies.move_to_end(key)
                return body
        try:
            body = self._api.get(self._informer.resource, name, namespace=namespace)
        except errors.NotFound:
            return None
        self.fetches += 1
        with self._lock:
            self._bodies[key] = body
            self._bodies.move_to_end(key)
            while len(self._bodies) > self._max:
                self._bodies.popitem(last=False)
        return body
