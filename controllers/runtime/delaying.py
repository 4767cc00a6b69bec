"""A work queue that can also add an item later (client-go's ``delaying_queue.go``).

``add_after(item, d)`` adds ``item`` after ``d`` seconds. Of several pending delays for one item,
the earliest wins; a later request never postpones an earlier one. The delay is carried by a timer
job per item (:mod:`controllers.runtime.timers`), so pending delays can be listed with
:meth:`DelayingQueue.waiting`. Delays pending at shutdown are dropped.

A pending delay is never lost, because "earliest wins" turns a lost one into a lost item: every
later ``add_after`` for it would defer to the stale record, for good. So:

* The record and its timer change together, under one lock. If arming the timer fails, the
  record is rolled back to *unarmed*: it no longer claims a timer, and :meth:`sweep` adds the
  item when it is due.
* A timer fire is matched to its record by a token, so a late, duplicate or superseded fire is a
  no-op, and the record is dropped only once the item is in the queue (a fire that fails leaves
  it for the sweep).
* :meth:`sweep` (the controller's watchdog calls it every second) adds every item whose timer
  should have fired more than ``grace`` seconds ago and did not — skipped by the scheduler,
  failed, or never armed — so a lost fire costs at most ``grace`` plus one sweep period.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TypeVar

import structlog

from controllers.runtime import clock as clocks
from controllers.runtime import queue, timers

T = TypeVar("T", bound=Hashable)

log = structlog.get_logger(__name__)

SWEEP_GRACE = 1.0
"""Seconds past its due time after which an armed timer that has not fired counts as lost."""


@dataclass
class _Pending:
    due: float
    """When (epoch seconds) the item is to be added."""
    token: int
    """Which timer job delivers this record; a fire with another token is stale."""
    armed: bool
    """Whether a timer job was scheduled for it; unarmed records are added by the sweep."""


class DelayingQueue(queue.Queue[T]):
    """:class:`~.queue.Queue` plus :meth:`add_after`."""

    def __init__(
        self,
        *,
        name: str,
        timers: timers.Timers,
        metrics: queue.QueueMetrics[T] | None = None,
        clock: clocks.Clock | None = None,
        grace: float = SWEEP_GRACE,
    ) -> None:
        super().__init__(metrics=metrics, clock=clock)
        self.name = name
        self._timers = timers
        self._grace = grace
        self._wait_lock = threading.Lock()
        self._tokens = itertools.count(1)
        # The pending delayed add per item. Invariant: an armed entry had a timer job scheduled
        # with id _job_id(item), its due time and its token; no entry outlives the add of its item.
        self._waiting: dict[T, _Pending] = {}

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
            if current is not None and current.due <= due:
                return
            token = next(self._tokens)
            pending = _Pending(due, token, armed=True)
            self._waiting[item] = pending
            try:
                self._timers.call_at(self._job_id(item), due, self._fire_callback(item, token))
            except Exception as exc:
                pending.armed = False  # rolled back: no timer claimed; the sweep delivers it
                log.warning(
                    "delaying.timer_failed",
                    queue=self.name,
                    item=str(item),
                    error_type=type(exc).__name__,
                )

    def cancel(self, item: T) -> None:
        """Drops ``item``'s pending delayed add, if any (its timer job is removed)."""
        with self._wait_lock:
            if self._waiting.pop(item, None) is not None:
                self._cancel_timer(item)

    def waiting(self) -> dict[T, float]:
        """Every item with a pending delayed add, and when (epoch seconds) it will be added."""
        with self._wait_lock:
            return {item: p.due for item, p in self._waiting.items()}

    def sweep(self) -> int:
        """Adds every item whose delay is over but whose timer has not delivered it: unarmed
        ones once due, armed ones ``grace`` seconds after. Returns how many it added.

        Call it periodically (every second or so) from a thread that is not the timers'.
        """
        now = self.clock.now()
        added = 0
        with self._wait_lock:
            overdue = [
                (item, p)
                for item, p in self._waiting.items()
                if now >= p.due + (self._grace if p.armed else 0.0)
            ]
            for item, pending in overdue:
                if not self._deliver(item, pending):
                    continue
                self._cancel_timer(item)
                added += 1
                if pending.armed:
                    log.warning(
                        "delaying.timer_missed",
                        queue=self.name,
                        item=str(item),
                        late=round(now - pending.due, 3),
                    )
        return added

    def shut_down(self) -> None:
        self._cancel_waiting()
        super().shut_down()

    def shut_down_with_drain(self, timeout: float | None = None) -> bool:
        self._cancel_waiting()
        return super().shut_down_with_drain(timeout)

    def _fire_callback(self, item: T, token: int) -> timers.Callback:
        def fire() -> None:
            with self._wait_lock:
                pending = self._waiting.get(item)
                if pending is None or pending.token != token:
                    return  # superseded, cancelled, or already added by the sweep
                self._deliver(item, pending)

        return fire

    def _deliver(self, item: T, pending: _Pending) -> bool:
        """Adds ``item``, then drops its record; keeps the record if the add fails. Holds
        ``_wait_lock``."""
        try:
            self.add(item)
        except Exception as exc:
            log.error(
                "delaying.add_failed",
                queue=self.name,
                item=str(item),
                error_type=type(exc).__name__,
            )
            pending.armed = False  # the sweep retries
            return False
        del self._waiting[item]
        return True

    def _cancel_timer(self, item: T) -> None:
        """Removes ``item``'s timer job; a job that survives is harmless (its token is stale)."""
        try:
            self._timers.cancel(self._job_id(item))
        except Exception as exc:
            log.warning(
                "delaying.timer_cancel_failed",
                queue=self.name,
                item=str(item),
                error_type=type(exc).__name__,
            )

    def _cancel_waiting(self) -> None:
        with self._wait_lock:
            for item in self._waiting:
                self._cancel_timer(item)
            self._waiting.clear()

    def _job_id(self, item: T) -> str:
        return f"{self.name}:{item}"
