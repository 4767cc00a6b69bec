"""A bounded cache whose entries expire, loading each missing key once however many ask for it,
and — when asked to — remembering a failed load for a backoff.

The one memory of answers that are costly to get and safe to reuse for a while, for both layers
that need it:

* the metrics endpoint's TokenReview and SubjectAccessReview verdicts
  (``controllers.runtime.metricsauth``; apimachinery's ``LRUExpireCache``, which the delegating
  authenticator and authorizer use);
* OIDC tokens and discovery documents (``rotator.oidc.cache``; kopf's credential ``Vault``).

Why it lives here: the credential engine (``rotator``) may not import the controllers, and the
generic runtime (``controllers.runtime``) may import nothing of the engine — but for this
module, which holds no credential logic and imports only the standard library (the one
exception in the import-linter contract, kept a leaf by ``tests/unit/test_expiring.py``). Two
copies of the single-flight pattern had drifted (one bounded, one not; one with a wait, one
without); a third package for one module would be a third thing to install and ship.

What holds, for every use:

* a flood of distinct keys (junk tokens, every tenant's issuer) cannot grow memory past
  ``max_entries``: the least recently used entry goes first;
* a burst of callers of one key costs one load while the others wait for it — at most ``wait``
  seconds, if they say so (:class:`WaitTimedOut`) — and take its value or its error;
* without ``failures`` a failed load is not kept: the next caller loads again. With
  ``failures`` (:class:`FailureBackoff`) it is remembered: until its backoff passes, callers get
  :class:`StillFailing` at once instead of loading again one after another, and while a retry
  of a failed key is in flight, callers fail at once rather than queue behind it;
* a load that fails because another key's failure is remembered (a token fetch on a discovery
  still failing) is remembered as that key's failure — given as the :class:`StillFailing`
  itself, or as the caller's own error for it made with :func:`translated` — so a note a
  caller adds to a remembered failure ("not retried before…") is never stored and added again.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar, cast

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
E = TypeVar("E", bound=BaseException)

Load = Callable[[], tuple[V, float]]
"""Computes a value and how many seconds it stays valid (0 or less: use once, do not keep)."""


@dataclass(frozen=True)
class FailureBackoff:
    """How long a failed load is remembered: ``first`` seconds, doubling per failure in a row,
    at most ``cap``; only failures of the types in ``remember`` (others are not kept)."""

    first: float
    cap: float
    remember: tuple[type[Exception], ...] = (Exception,)

    def delay(self, count: int) -> float:
        return float(min(self.cap, self.first * 2 ** min(count - 1, 16)))


class StillFailing(Exception):
    """The key's last load failed with ``error``; raised instead of loading again, ``retry_in``
    seconds before the next attempt (0 with ``retrying``: another caller is retrying it now)."""

    def __init__(self, error: Exception, *, retry_in: float, retrying: bool) -> None:
        super().__init__(str(error))
        self.error = error
        self.retry_in = retry_in
        self.retrying = retrying


_ORIGINAL = "_expiring_remembered"
"""The attribute :func:`translated` keeps a remembered failure under."""


def translated(error: E, still: StillFailing) -> E:
    """``error`` — a caller's own exception standing for ``still`` (its message annotated, its
    type the caller's) — carrying ``still.error``, so that a cache whose load fails with
    ``error`` remembers that original failure, not the annotated translation."""
    setattr(error, _ORIGINAL, still.error)
    return error


def _original(exc: BaseException) -> BaseException:
    """The failure to remember for a load that raised ``exc`` (see :func:`translated`)."""
    if isinstance(exc, StillFailing):
        return exc.error
    original = getattr(exc, _ORIGINAL, None)
    return original if isinstance(original, Exception) else exc


class WaitTimedOut(Exception):
    """Another caller's load of the key did not end within the ``wait`` asked for."""


@dataclass
class _Flight(Generic[V]):
    """One load in progress; callers of the same key wait on ``done``."""

    done: threading.Event = field(default_factory=threading.Event)
    value: V | None = None
    error: BaseException | None = None


@dataclass(frozen=True)
class _Failed:
    error: Exception
    count: int
    retry_at: float
    """Monotonic time before which the failure is raised instead of loading again."""


class ExpiringCache(Generic[K, V]):
    """At most ``max_entries`` keys, each holding a value until ``ttl`` seconds (its load's)
    after loading, or (with ``failures``) its last failure. See the module docstring."""

    def __init__(
        self,
        max_entries: int,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        failures: FailureBackoff | None = None,
    ) -> None:
        if max_entries < 1:
            raise ValueError("an expiring cache holds at least one entry")
        self._max = max_entries
        self._monotonic = monotonic
        self._failures = failures
        self._lock = threading.Lock()
        # Invariants: a value entry expires after now-at-insert; a failure entry only with
        # ``failures``, replaced by the key's next value; order is least recently used first; a
        # key is in _flights only while one thread runs its load.
        self._entries: OrderedDict[K, tuple[V, float] | _Failed] = OrderedDict()
        self._flights: dict[K, _Flight[V]] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def get_or_load(self, key: K, load: Load[V], *, wait: float | None = None) -> V:
        """The live value for ``key``, or ``load()``'s; concurrent callers share one load,
        waiting for it at most ``wait`` seconds (None: until it ends)."""
        with self._lock:
            live = self._live(key)
            if isinstance(live, tuple):
                return live[0]
            failed = live
            flight = self._flights.get(key)
            leading = flight is None
            if flight is None:
                flight = self._flights[key] = _Flight()
            elif failed is not None:  # do not queue behind the retry of a failing key
                raise StillFailing(failed.error, retry_in=0.0, retrying=True)
        if not leading:
            if not flight.done.wait(wait):
                raise WaitTimedOut(f"another load of this key is still running after {wait} s")
            if flight.error is not None:
                raise flight.error
            return cast(V, flight.value)
        try:
            value, ttl = load()
        except BaseException as exc:
            flight.error = exc
            self._failed(key, exc)
            raise
        else:
            flight.value = value
            self._store(key, value, ttl)
            return value
        finally:
            with self._lock:
                del self._flights[key]
            flight.done.set()

    def _live(self, key: K) -> tuple[V, float] | _Failed | None:
        """The key's live value entry, its remembered failure (None when there is neither), or
        raises :class:`StillFailing` while the failure's backoff lasts. Under the lock."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        now = self._monotonic()
        if isinstance(entry, _Failed):
            if now < entry.retry_at:
                raise StillFailing(entry.error, retry_in=entry.retry_at - now, retrying=False)
            return entry
        if entry[1] > now:
            self._entries.move_to_end(key)
            return entry
        del self._entries[key]
        return None

    def _failed(self, key: K, exc: BaseException) -> None:
        # A load that failed because another key is still failing (discovery's, in a token
        # fetch) is remembered as that failure, so notes do not pile up.
        error = _original(exc)
        if self._failures is None or not isinstance(error, self._failures.remember):
            return
        with self._lock:
            previous = self._entries.get(key)
            count = previous.count + 1 if isinstance(previous, _Failed) else 1
            retry_at = self._monotonic() + self._failures.delay(count)
            self._put(key, _Failed(error, count, retry_at))

    def _store(self, key: K, value: V, ttl: float) -> None:
        with self._lock:
            if ttl > 0:
                self._put(key, (value, self._monotonic() + ttl))
            else:
                self._entries.pop(key, None)  # used once; a failure it ends is forgotten

    def _put(self, key: K, entry: tuple[V, float] | _Failed) -> None:
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)
