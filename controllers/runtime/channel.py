"""A bounded, typed, de-duplicating channel of keys from one controller to the next.

A sender (a reconcile of an upstream object) puts the keys of the downstream objects it affects;
a :class:`~.sources.ChannelSource` on the receiving controller takes them and enqueues them.

* De-duplicating: a key already waiting in the channel is not added again, so a burst of changes
  to one downstream object travels as one key.
* Bounded, with a defined policy when full: the sender waits up to ``send_timeout`` for room, then
  gets :class:`ChannelFull`. The sending reconcile fails and is retried with backoff, and its retry
  sends again: back-pressure, and nothing lost. Every full event is counted and logged.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

import structlog

log = structlog.get_logger(__name__)

T = TypeVar("T", bound=Hashable)


class ChannelMetrics(Protocol):
    def depth(self, channel: str, depth: int) -> None: ...

    def full(self, channel: str) -> None: ...


class _NoMetrics:
    def depth(self, channel: str, depth: int) -> None:
        pass

    def full(self, channel: str) -> None:
        pass


class ChannelFull(Exception):
    """The receiving side is not keeping up; retry the sending reconcile later."""


class ChannelClosed(Exception):
    """The channel no longer accepts keys (the process is stopping)."""


class Channel(Generic[T]):
    """Keys in FIFO order, each at most once while waiting. Defaults: 1024 keys, 1 s send wait."""

    def __init__(
        self,
        name: str,
        *,
        capacity: int = 1024,
        send_timeout: float = 1.0,
        metrics: ChannelMetrics | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.name = name
        self.capacity = capacity
        self._send_timeout = send_timeout
        self._metrics = metrics or _NoMetrics()
        self._cond = threading.Condition()
        self._items: deque[T] = deque()
        self._waiting: set[T] = set()  # invariant: exactly the items in _items
        self._closed = False

    def send(self, item: T) -> None:
        """Puts ``item`` unless it is already waiting; raises :class:`ChannelFull` when no room
        appears within the send timeout."""
        with self._cond:
            if self._closed:
                raise ChannelClosed(f"channel {self.name} is closed")
            if item in self._waiting:
                return
            if not self._cond.wait_for(
                lambda: self._closed or len(self._items) < self.capacity, self._send_timeout
            ):
                self._metrics.full(self.name)
                log.warning(
                    "channel.full", channel=self.name, capacity=self.capacity, key=str(item)
                )
                raise ChannelFull(f"channel {self.name} is full ({self.capacity} keys waiting)")
            if self._closed:
                raise ChannelClosed(f"channel {self.name} is closed")
            if item in self._waiting:  # another sender put it while we waited
                return
            self._items.append(item)
            self._waiting.add(item)
            self._metrics.depth(self.name, len(self._items))
            self._cond.notify_all()

    def receive(self, timeout: float | None = None) -> T | None:
        """The oldest waiting key, or None after ``timeout`` or once closed and empty."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._items or self._closed, timeout):
                return None
            if not self._items:
                return None
            item = self._items.popleft()
            self._waiting.discard(item)
            self._metrics.depth(self.name, len(self._items))
            self._cond.notify_all()
            return item

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)
