"""Counting the waits and wake-ups of a work queue's workers: what tells a queue that wakes only
the worker it has a key for from one that wakes them all (tests/unit/test_queue.py asserts it,
``python -m tests.bench.queuewake`` prints it)."""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import TypeVar

from controllers.runtime.queue import Queue

T = TypeVar("T", bound=Hashable)


class CountingCondition(threading.Condition):
    """A Condition that counts the waits begun on it and the wake-ups returned from them."""

    def __init__(self, lock: threading.RLock) -> None:
        super().__init__(lock)
        self.waits = 0
        self.woken = 0

    def wait(self, timeout: float | None = None) -> bool:
        self.waits += 1  # under the queue's lock, as the wait that follows registers
        try:
            return super().wait(timeout)
        finally:
            self.woken += 1  # under the lock again


def count_worker_wakeups(queue: Queue[T]) -> CountingCondition:
    """Puts a :class:`CountingCondition` where ``queue``'s workers wait (before any of them
    does) and returns it."""
    ready = CountingCondition(queue._lock)
    queue._ready = ready
    return ready
