"""Bulkheads: a cap on calls in flight to one provider, so a provider that hangs can hold only
part of the controller's workers and never delays rotations that use other providers."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from rotator import errors


class Bulkhead:
    """At most ``limit`` concurrent calls; a caller waits up to ``wait`` seconds for a slot,
    then fails with :class:`~rotator.errors.ProviderUnavailable` (retried with backoff)."""

    def __init__(self, name: str, *, limit: int = 4, wait: float = 1.0) -> None:
        self.name = name
        self._slots = threading.BoundedSemaphore(limit)
        self._limit = limit
        self._wait = wait

    @contextmanager
    def slot(self) -> Iterator[None]:
        if not self._slots.acquire(timeout=self._wait):
            raise errors.ProviderUnavailable(
                f"{self._limit} calls to {self.name} already in flight; it is slow or unreachable"
            )
        try:
            yield
        finally:
            self._slots.release()
