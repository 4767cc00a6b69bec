"""A thread-safe, indexed store of objects by key (client-go's ``ThreadSafeStore`` + indexers).

An index maps every object to zero or more index values (say, the names of the Secrets a policy
references); :meth:`Store.by_index` then finds the objects for a value without scanning the store.
Objects are shared, read-only decoded JSON (see :mod:`controllers.runtime.objects`).

No index by namespace is kept (client-go's indexers have one): nothing reads a namespace's
objects but a namespaced informer's re-list, which finds them by a scan of the keys
(``namespace/name``), while a set entry per cached object cost ~40 bytes: 4 MB at 110,000.

Most index values name one object (the one Secret a policy uses, the one backend a route sends
to), so a value holds its key alone until a second key joins it, and only then a set: an empty
``set`` is 216 bytes, three times the key it would hold (client-go's indexers use a set always).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from controllers.runtime import objects
from controllers.runtime.objects import Body, ObjectKey

IndexFunc = Callable[[Mapping[str, Any]], Iterable[str]]

_Keys = ObjectKey | set[ObjectKey]
"""The keys under one index value: one key, or a set of two or more."""


class Store:
    """Objects by key, with named indexes kept in step on every change."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._items: dict[ObjectKey, Body] = {}
        self._index_funcs: dict[str, IndexFunc] = {}
        # index name → index value → its key, or a set of two or more keys. Invariant: for every
        # item and index, the item's key is under exactly the values the index function returns
        # for the stored item; a set is never empty nor of one key.
        self._indices: dict[str, dict[str, _Keys]] = {}

    def add_index(self, name: str, func: IndexFunc) -> None:
        """Adds an index and builds it over what is already stored."""
        with self._lock:
            if name in self._index_funcs:
                raise ValueError(f"index {name!r} already exists")
            self._index_funcs[name] = func
            self._indices[name] = {}
            for key, obj in self._items.items():
                self._index_one(name, key, obj)

    def get(self, key: ObjectKey) -> Body | None:
        with self._lock:
            return self._items.get(key)

    def keys(self) -> list[ObjectKey]:
        with self._lock:
            return list(self._items)

    def items(self, namespace: str | None = None) -> list[Body]:
        """Every object, or those in ``namespace``."""
        with self._lock:
            if namespace is None:
                return list(self._items.values())
            return [self._items[k] for k in self._in_namespace(namespace)]

    def by_index(self, index: str, value: str) -> list[Body]:
        with self._lock:
            keys = self._indices[index].get(value)
            if keys is None:
                return []
            if isinstance(keys, str):
                return [self._items[keys]]
            return [self._items[k] for k in keys]

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def upsert(self, obj: Body) -> Body | None:
        """Stores ``obj``; returns what it replaced."""
        key = objects.key_of(obj)
        with self._lock:
            # popped, not overwritten: a dict keeps the key string it was first given, and an
            # ``objects.Identity`` shares its own with the store only if the store takes it
            old = self._items.pop(key, None)
            if old is not None:
                self._unindex(key, old)
            self._items[key] = obj
            for name in self._index_funcs:
                self._index_one(name, key, obj)
            return old

    def delete(self, key: ObjectKey) -> Body | None:
        """Removes the object at ``key``; returns it."""
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._unindex(key, old)
            return old

    def replace(
        self, items: Iterable[Body], *, namespace: str | None = None
    ) -> tuple[list[tuple[Body | None, Body]], list[Body]]:
        """Makes the store hold exactly ``items`` within ``namespace`` (all when None).

        Returns ``(upserts, deletions)``: each upsert as ``(old or None, new)``, and every object
        that was stored in scope but is not in ``items``.
        """
        with self._lock:
            in_scope = set(self._items) if namespace is None else self._in_namespace(namespace)
            upserts = []
            for obj in items:
                in_scope.discard(objects.key_of(obj))
                upserts.append((self.upsert(obj), obj))
            deletions = [old for key in in_scope if (old := self.delete(key)) is not None]
            return upserts, deletions

    def _in_namespace(self, namespace: str) -> set[ObjectKey]:
        """The keys of the objects in ``namespace``, by a scan (see the module docstring)."""
        prefix = f"{namespace}/"
        return {k for k in self._items if k.startswith(prefix)}

    def _index_one(self, name: str, key: ObjectKey, obj: Body) -> None:
        index = self._indices[name]
        for value in self._index_funcs[name](obj):
            keys = index.get(value)
            if keys is None:
                index[value] = key
            elif isinstance(keys, str):
                if keys != key:
                    index[value] = {keys, key}
            else:
                keys.add(key)

    def _unindex(self, key: ObjectKey, obj: Body) -> None:
        for name, func in self._index_funcs.items():
            index = self._indices[name]
            for value in func(obj):
                keys = index.get(value)
                if keys is None:
                    continue
                if isinstance(keys, str):
                    if keys == key:
                        del index[value]
                    continue
                keys.discard(key)
                if len(keys) == 1:
                    index[value] = next(iter(keys))
