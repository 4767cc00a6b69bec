"""A work queue that can also add an item later (client-go's ``delaying_queue.go``).

``add_after(item, d)`` adds ``item`` after ``d`` seconds. Of several pending delays for one item,
the earliest wins; a later request never postpones an earlier one. The delay is carried by a timer
job per item (:mod:`controllers.runtime.timers`), so pending delays can be listed with
:meth:`DelayingQueue.waiting`. Delays pending at shutdown are dropped.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import TypeVar

from controllers.runtime import clock as clocks
from controllers.runtime import queue, timers

T = TypeVar("T", bound=Hashable)


class DelayingQueue(queue.Queue[T]):
    """:class:`~.queue.Queue` plus :meth:`add_after`."""

    def __init__(
        self,
        *,
        name: str,
        timers: timers.Timers,
        metrics: queue.QueueMetrics[T] | None = None,
        clock: clocks.Clock | None = None,
    ) -> None:
        super().__init__(metrics=metrics, clock=clock)
        self.name = name
        self._timers = timers
        self._wait_lock = threading.Lock()
        # Due time (epoch seconds) of the pending delayed add per item. Invariant: exactly one
        # timer job per entry, with the id from _job_id(item) and this due time.
        self._waiting: dict[T, float] = {}

    def add_after(self, item: T, delay: float) -> None:
        """Adds ``item`` after ``delay`` seconds (now if ``delay <= 0``); the earliest time wins."""
        if self.shutting_down:
            return
        if delay <= 0:
            self.add(item)
            return
        due = self.clock.now() + delay
        with self._wait_lock:
            current = self._waiting.get(item)
            if current is not None and current <= due:
                return
            self._waiting[item] = due
            self._timers.call_at(self._job_id(item), due, lambda: self._fire(item, due))

    def cancel(self, item: T) -> None:
        """Drops ``item``'s pending delayed add, if any (its timer job is removed)."""
        with self._wait_lock:
            if self._waiting.pop(item, None) is not None:
                self._timers.cancel(self._job_id(item))

    def waiting(self) -> dict[T, float]:
        """Every item with a pending delayed add, and when (epoch seconds) it will be added."""
        with self._wait_lock:
            return dict(self._waiting)

    def shut_down(self) -> None:
        self._cancel_waiting()
        super().shut_down()

    def shut_down_with_drain(self, timeout: float | None = None) -> bool:
        self._cancel_waiting()
        return super().shut_down_with_drain(timeout)

    def _fire(self, item: T, due: float) -> None:
        with self._wait_lock:
            if self._waiting.get(item) != due:
                return  # superseded by an earlier delay, which adds the item itself
            del self._waiting[item]
        self.add(item)

    def _cancel_waiting(self) -> None:
        with self._wait_lock:
            for item in self._waiting:
                self._timers.cancel(self._job_id(item))
            self._waiting.clear()

    def _job_id(self, item: T) -> str:
        return f"{self.name}:{item}"
