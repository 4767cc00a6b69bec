"""A work queue with client-go's guarantees (``util/workqueue/queue.go``).

* Fair: items are processed in the order in which they are added.
* Stingy: an item added many times before it is processed is processed once.
* Exclusive: an item is never processed by two workers at once; an item added while it is being
  processed is processed again once the worker calls :meth:`Queue.done`.
* Draining shutdown: after :meth:`Queue.shut_down` no new item is accepted, :meth:`Queue.get`
  still hands out what is queued and then reports shutdown; :meth:`Queue.shut_down_with_drain`
  also waits until every item being processed is done.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

from controllers.runtime import clock as clocks

T = TypeVar("T", bound=Hashable)
T_contra = TypeVar("T_contra", bound=Hashable, contravariant=True)


class QueueMetrics(Protocol[T_contra]):
    """What a queue reports; :class:`controllers.runtime.metrics` implements it for Prometheus."""

    def added(self, item: T_contra) -> None: ...

    def taken(self, item: T_contra) -> None: ...

    def finished(self, item: T_contra) -> None: ...

    def retried(self) -> None: ...


class NoMetrics:
    """Discards every measurement."""

    def added(self, item: Hashable) -> None:
        pass

    def taken(self, item: Hashable) -> None:
        pass

    def finished(self, item: Hashable) -> None:
        pass

    def retried(self) -> None:
        pass


class Queue(Generic[T]):
    """A fair, stingy, exclusive FIFO of keys; safe for any number of producers and workers."""

    def __init__(
        self, *, metrics: QueueMetrics[T] | None = None, clock: clocks.Clock | None = None
    ) -> None:
        # One lock, two conditions on it: workers in get() wait for an item, a draining
        # shut_down_with_drain() for the last done(). With one condition for both, done()
        # had to wake every waiter (notify_all) whenever nothing was left processing, which in
        # an idle controller is after each item: its other workers woke, took the lock and the
        # GIL, found nothing and slept again, on the propagation path of every update.
        # An RLock, whose ``_is_owned`` (checked by every notify) is C, not Python.
        self._lock = threading.RLock()
        self._ready = threading.Condition(self._lock)
        self._idle = threading.Condition(self._lock)
        self.clock = clock or clocks.RealClock()
        self._metrics: QueueMetrics[T] = metrics or NoMetrics()
        # Items waiting to be handed out, in order. Invariant: every item here is also in _dirty,
        # and none is in _processing.
        self._queue: deque[T] = deque()
        # Items that need processing: queued, or re-added while being processed. Invariant: an
        # item in both _dirty and _processing is re-queued by done().
        self._dirty: set[T] = set()
        # Items handed out by get() and not yet done(). Invariant: no item is here twice, so no
        # item is processed by two workers at once.
        self._processing: set[T] = set()
        self._shutting_down = False
        # A set that empties is replaced by a new one. A set's table never shrinks
        # as items leave it, so a cold start that queued every object of a 10,000-chain cluster
        # kept a table for all of them while idle (~1 MiB per queue).

    def add(self, item: T) -> None:
        """Marks ``item`` as needing processing; a no-op if it already does or after shutdown."""
        with self._lock:
            if self._shutting_down or item in self._dirty:
                return
            self._metrics.added(item)
            self._dirty.add(item)
            if item in self._processing:
                return
            self._queue.append(item)
            self._ready.notify()

    def get(self) -> tuple[T | None, bool]:
        """Blocks until an item is available; returns ``(item, False)`` or ``(None, True)``.

        The caller owns the item until it calls :meth:`done` with it.
        """
        with self._lock:
            while not self._queue and not self._shutting_down:
                self._ready.wait()
            if not self._queue:
                return None, True
            item = self._queue.popleft()
            self._metrics.taken(item)
            self._processing.add(item)
            self._dirty.discard(item)
            if not self._dirty:
                self._dirty = set()  # a new table: see __init__
            return item, False

    def done(self, item: T) -> None:
        """Ends processing of ``item``; if it was re-added meanwhile, queues it again."""
        with self._lock:
            self._metrics.finished(item)
            self._processing.discard(item)
            if not self._processing:
                self._processing = set()  # a new table: see __init__
            if item in self._dirty:
                self._queue.append(item)
                self._ready.notify()
            if not self._processing:
                self._idle.notify_all()  # wakes shut_down_with_drain, never a worker

    def __len__(self) -> int:
        with self._lock:
            return len(self._queue)

    def processing(self) -> int:
        """How many items are handed out and not yet done."""
        with self._lock:
            return len(self._processing)

    def shut_down(self) -> None:
        """Stops accepting items; :meth:`get` reports shutdown once the queue is empty."""
        with self._lock:
            self._shutting_down = True
            self._ready.notify_all()

    def shut_down_with_drain(self, timeout: float | None = None) -> bool:
        """Shuts down, then waits until every handed-out item is done.

        Returns False if ``timeout`` seconds passed first.
        """
        with self._lock:
            self._shutting_down = True
            self._ready.notify_all()
            return self._idle.wait_for(lambda: not self._processing, timeout)

    @property
    def shutting_down(self) -> bool:
        with self._lock:
            return self._shutting_down
