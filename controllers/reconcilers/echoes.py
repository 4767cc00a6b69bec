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

from controllers.runtime import objects
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

    def expect(self, desired: Mapping[str, Any]) -> None:
        """Records ``desired`` (the object about to be written) until its event is seen."""
        key = objects.key_of(desired)
        with self._lock:
            self._pending[key] = desired
            self._pending.move_to_end(key)
            while len(self._pending) > self._max:
                self._pending.popitem(last=False)

    def is_echo(self, obj: Body) -> bool:
        """Whether ``obj`` holds exactly what this process last wrote (consumed on a match)."""
        key = objects.key_of(obj)
        with self._lock:
            desired = self._pending.get(key)
            if desired is None or not _holds(obj, desired):
                return False
            del self._pending[key]
            return True

    def not_echo(self, old: Body | None, new: Body) -> bool:
        """An informer predicate: every change but the echo of an own write."""
        return not self.is_echo(new)


def _holds(obj: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    if (obj.get("data") or {}) != (desired.get("data") or {}):
        return False
    have: Mapping[str, Any] = obj.get("metadata") or {}
    want: Mapping[str, Any] = desired.get("metadata") or {}
    for field in ("labels", "annotations"):
        got: Mapping[str, str] = have.get(field) or {}
        if any(got.get(k) != v for k, v in (want.get(field) or {}).items()):
            return False
    return True
