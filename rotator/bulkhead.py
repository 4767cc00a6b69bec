"""Bulkheads: a cap on calls in flight to one provider (or one host of it), so a provider that
hangs can hold only part of the controller's workers and never delays rotations that use other
providers — or, with :class:`Bulkheads`, other hosts of the same provider (one tenant's OIDC
issuer must not use up the slots of everyone else's)."""

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
        self._lock = threading.Lock()
        self._in_flight = 0

    @property
    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    @property
    def wait(self) -> float:
        """Seconds a caller waits for a slot unless it says otherwise."""
        return self._wait

    def acquire(self, *, wait: float | None = None) -> None:
        """Takes a slot, waiting up to ``wait`` seconds (the default wait if None); raises
        :class:`~rotator.errors.ProviderUnavailable` (code ``BulkheadFull``) when none frees.

        Pair with :meth:`release`, which may be called from another thread: a call that runs
        on a worker thread gives its slot back when it really ends, not when its caller stops
        waiting for it."""
        if not self._slots.acquire(timeout=max(0.0, self._wait if wait is None else wait)):
            raise errors.ProviderUnavailable(
                f"{self._limit} calls to {self.name} already in flight; it is slow or unreachable",
                code="BulkheadFull",
            )
        with self._lock:
            self._in_flight += 1

    def release(self) -> None:
        with self._lock:
            self._in_flight -= 1
        self._slots.release()

    @contextmanager
    def slot(self, *, wait: float | None = None) -> Iterator[None]:
        """Holds a slot for the ``with`` block. ``wait`` (seconds) replaces the default wait for
        this call: a caller with a deadline waits no longer than what is left of it."""
        self.acquire(wait=wait)
        try:
            yield
        finally:
            self.release()


class Bulkheads:
    """One :class:`Bulkhead` per key (an issuer's host and port, say), made on first use.

    Keys come from user input (every tenant names its own issuer), so the family is bounded:
    past ``max_keys`` bulkheads, idle ones are forgotten (one with calls in flight never is,
    or its callers would share a fresh set of slots with newcomers)."""

    def __init__(
        self, name: str, *, limit: int = 4, wait: float = 1.0, max_keys: int = 1024
    ) -> None:
        self.name = name
        self._limit = limit
        self._wait = wait
        self._max_keys = max_keys
        self._lock = threading.Lock()
        self._bulkheads: dict[str, Bulkhead] = {}

    def of(self, key: str) -> Bulkhead:
        with self._lock:
            bulkhead = self._bulkheads.get(key)
            if bulkhead is None:
                if len(self._bulkheads) >= self._max_keys:
                    self._forget_idle()
                bulkhead = Bulkhead(f"{self.name} {key}", limit=self._limit, wait=self._wait)
                self._bulkheads[key] = bulkhead
            return bulkhead

    @contextmanager
    def slot(self, key: str, *, wait: float | None = None) -> Iterator[None]:
        """A slot of ``key``'s bulkhead (see :meth:`Bulkhead.slot`)."""
        with self.of(key).slot(wait=wait):
            yield

    def __len__(self) -> int:
        with self._lock:
            return len(self._bulkheads)

    def _forget_idle(self) -> None:
        for key in [k for k, b in self._bulkheads.items() if b.in_flight == 0]:
            del self._bulkheads[key]
