"""A bounded cache whose entries expire, loading each missing key once however many ask for it.

The memory of answers that are costly to get and safe to reuse for a while, such as the API
server's TokenReview and SubjectAccessReview verdicts on metrics scrapes (apimachinery's
``LRUExpireCache``, which the delegating authenticator and authorizer use). Two properties matter
there: a flood of distinct keys (junk tokens) cannot grow memory past ``max_entries`` — the least
recently used entry goes first — and a burst of requests with the same key costs one load while
the others wait for it (kopf's ``Vault`` shape). A load that fails is not cached: every waiter
gets the error, and the next caller loads again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar, cast

from controllers.runtime.clock import Clock, RealClock

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

Load = Callable[[], tuple[V, float]]
"""Computes a value and how many seconds it stays valid (0 or less: use once, do not keep)."""


@dataclass
class _Flight(Generic[V]):
    """One load in progress; callers of the same key wait on ``done``."""

    done: threading.Event = field(default_factory=threading.Event)
    value: V | None = None
    error: BaseException | None = None


class ExpiringCache(Generic[K, V]):
    """At most ``max_entries`` values, each dropped ``ttl`` seconds (its load's) after loading."""

    def __init__(self, max_entries: int, *, clock: Clock | None = None) -> None:
        if max_entries < 1:
            raise ValueError("an expiring cache holds at least one entry")
        self._max = max_entries
        self._clock = clock or RealClock()
        self._lock = threading.Lock()
        # Invariants: every entry expires after now-at-insert; order is least recently used first;
        # a key is in _flights only while one thread runs its load.
        self._entries: OrderedDict[K, tuple[V, float]] = OrderedDict()
        self._flights: dict[K, _Flight[V]] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def get_or_load(self, key: K, load: Load[V]) -> V:
        """The live value for ``key``, or ``load()``'s; concurrent callers share one load."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                if entry[1] > self._clock.monotonic():
                    self._entries.move_to_end(key)
                    return entry[0]
                del self._entries[key]
            flight = self._flights.get(key)
            leading = flight is None
            if flight is None:
                flight = self._flights[key] = _Flight()
        if not leading:
            flight.done.wait()
            if flight.error is not None:
                raise flight.error
            return cast(V, flight.value)
        try:
            value, ttl = load()
        except BaseException as exc:
            flight.error = exc
            raise
        else:
            flight.value = value
            if ttl > 0:
                self._store(key, value, ttl)
            return value
        finally:
            with self._lock:
                del self._flights[key]
            flight.done.set()

    def _store(self, key: K, value: V, ttl: float) -> None:
        with self._lock:
            self._entries[key] = (value, self._clock.monotonic() + ttl)
            self._entries.move_to_end(key)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)
