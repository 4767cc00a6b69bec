"""Telling a controller's own writes from everyone else's when their watch events come back.

A policy writes its derived Secret, a route its config Secret; the informer then reports that
change, and the owner would be reconciled again for nothing (an "echo"). Before writing, the
writer records what it is about to write (data, and the labels and annotations it sets); the
owner's event source skips the first event whose object holds exactly that. The record is made
before the write because the watch event may arrive before the write's response does. Any other
change (a user's edit, a deletion, different content from another replica) does not match and
reconciles as usual — so nothing is missed, and one edit costs one reconcile per affected
object.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from controllers.reconcilers import api
from controllers.reconcilers.cache import secretviews
from controllers.runtime import apiclient, apply, objects
from controllers.runtime.objects import Body

MAX_PENDING = 65536
"""Writes remembered until their event arrives. An event can be lost to a re-list (its version
is then never seen); the oldest records are dropped beyond this many. Defaults to 65536."""


class OwnWrites:
    """What this process is writing, by object key, until the write's watch event is seen."""

    def __init__(self, max_pending: int = MAX_PENDING) -> None:
        self._max = max_pending
        self._lock = threading.Lock()
        self._pending: OrderedDict[objects.ObjectKey, Mapping[str, Any]] = OrderedDict()
        self._bases: dict[objects.ObjectKey, str | None] = {}

    def expect(self, desired: Mapping[str, Any], *, over: str | None = None) -> None:
        """Records ``desired`` (the object about to be written) until its event is seen.
        ``over``: the resourceVersion the write is based on (the cached object's; None when
        creating), which tells :meth:`unseen` whether the cache has caught up."""
        key = objects.key_of(desired)
        with self._lock:
            self._pending[key] = desired
            self._bases[key] = over
            self._pending.move_to_end(key)
            while len(self._pending) > self._max:
                dropped, _ = self._pending.popitem(last=False)
                self._bases.pop(dropped, None)

    def forget(self, key: objects.ObjectKey) -> None:
        """Drops the record of a write that failed: it did not land (or, cut off, may have —
        then its event reconciles the owner once more, which is harmless)."""
        with self._lock:
            self._pending.pop(key, None)
            self._bases.pop(key, None)

    def unseen(
        self, key: objects.ObjectKey, cached: Mapping[str, Any] | None
    ) -> Mapping[str, Any] | None:
        """What this process last wrote to ``key``, while ``cached`` (the informer's copy) is
        still the version that write was based on: the cache is behind the server then, and a
        writer deciding "nothing to change" must compare with this write, not with the cache.
        Otherwise: write A; decide B against a cache still holding what preceded A, equal to B;
        write nothing; A's echo is then skipped as an echo, and the server keeps A for good.
        None once the cache shows any other version (the echo, or someone's later edit)."""
        cached_version = objects.meta(cached).get("resourceVersion") if cached else None
        with self._lock:
            desired = self._pending.get(key)
            if desired is None or self._bases.get(key) != cached_version:
                return None
            return desired

    def apply_secret(
        self, api_client: apiclient.Writer, desired: Body, cached: Mapping[str, Any] | None
    ) -> Body:
        """Server-side applies Secret ``desired``, decided on ``cached`` (the cache's copy, None
        when there was none): the write carries its resourceVersion as a precondition, is
        recorded (:meth:`expect`) before it is sent, and forgotten if it fails — not written,
        the cache is not behind it. Returns the written Secret."""
        base = objects.meta(cached).get("resourceVersion") if cached else None
        self.expect(desired, over=base)  # its event is no reason to reconcile again
        try:
            return apply.apply(
                api_client,
                objects.SECRETS,
                desired,
                field_manager=api.FIELD_MANAGER,
                resource_version=base,
            )
        except Exception:
            self.forget(objects.key_of(desired))
            raise

    def is_echo(self, obj: Body) -> bool:
        """Whether ``obj`` holds exactly what this process last wrote (consumed on a match)."""
        key = objects.key_of(obj)
        with self._lock:
            desired = self._pending.get(key)
            if desired is None or not _holds(obj, desired):
                return False
            del self._pending[key]
            self._bases.pop(key, None)
            return True

    def not_echo(self, old: Body | None, new: Body) -> bool:
        """An informer predicate: every change but the echo of an own write."""
        return not self.is_echo(new)


def _holds(obj: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    if not secretviews.holds_data(obj, desired.get("data") or {}):
        return False
    have: Mapping[str, Any] = obj.get("metadata") or {}
    want: Mapping[str, Any] = desired.get("metadata") or {}
    for field in ("labels", "annotations"):
        got: Mapping[str, str] = have.get(field) or {}
        if any(got.get(k) != v for k, v in (want.get(field) or {}).items()):
            return False
    return True
