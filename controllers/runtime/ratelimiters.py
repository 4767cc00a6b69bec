"""Rate limiters for requeues after failures (client-go's ``default_rate_limiters.go``).

The controller default is the maximum of a per-item exponential backoff (5 ms doubling to 1000 s)
and an overall token bucket (10 qps, burst 100): one failing object backs off on its own, and a
storm of failures cannot requeue faster than the bucket allows.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

from controllers.runtime import clock as clocks

T = TypeVar("T", bound=Hashable)
T_contra = TypeVar("T_contra", bound=Hashable, contravariant=True)


class RateLimiter(Protocol[T_contra]):
    """Decides how long an item waits before its next retry."""

    def when(self, item: T_contra) -> float:
        """Seconds to wait before retrying ``item``; records one more failure."""
        ...

    def forget(self, item: T_contra) -> None:
        """Stops tracking ``item``: its next failure starts from the base delay again."""
        ...

    def num_requeues(self, item: T_contra) -> int:
        """How many failures have been recorded for ``item`` since it was last forgotten."""
        ...


class ItemExponentialFailureRateLimiter(Generic[T]):
    """``base * 2**failures`` per item, capped at ``max_delay``.

    Defaults to 5 ms base and 1000 s cap, controller-runtime's values.
    """

    def __init__(self, base_delay: float = 0.005, max_delay: float = 1000.0) -> None:
        if base_delay <= 0 or max_delay < base_delay:
            raise ValueError("need 0 < base_delay <= max_delay")
        self._base = base_delay
        self._max = max_delay
        self._lock = threading.Lock()
        self._failures: dict[T, int] = {}  # invariant: only items that failed since forget()

    def when(self, item: T) -> float:
        with self._lock:
            exp = self._failures.get(item, 0)
            self._failures[item] = exp + 1
        if exp >= 64:  # 2**64 * base overflows any sane cap; avoid the float blow-up
            return self._max
        return min(self._base * 2.0**exp, self._max)

    def forget(self, item: T) -> None:
        with self._lock:
            self._failures.pop(item, None)

    def num_requeues(self, item: T) -> int:
        with self._lock:
            return self._failures.get(item, 0)


class BucketRateLimiter(Generic[T]):
    """A token bucket shared by all items (golang.org/x/time/rate's ``Reserve().Delay()``).

    Every call reserves one token; when the bucket is empty the reservation is in the future and
    the delay says how far. Defaults to 10 qps with a burst of 100, controller-runtime's values.
    """

    def __init__(
        self, qps: float = 10.0, burst: int = 100, *, clock: clocks.Clock | None = None
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("need qps > 0 and burst >= 1")
        self._qps = qps
        self._burst = float(burst)
        self._clock = clock or clocks.RealClock()
        self._lock = threading.Lock()
        self._tokens = float(burst)  # may go negative: tokens reserved ahead of time
        self._last = self._clock.monotonic()

    def when(self, item: T) -> float:
        with self._lock:
            now = self._clock.monotonic()
            self._tokens = min(self._burst, self._tokens + (now - self._last) * self._qps)
            self._last = now
            self._tokens -= 1.0
            if self._tokens >= 0:
                return 0.0
            return -self._tokens / self._qps

    def forget(self, item: T) -> None:
        """Tokens are not per item: nothing to forget."""

    def num_requeues(self, item: T) -> int:
        return 0


class MaxOfRateLimiter(Generic[T]):
    """The longest delay of several limiters; forgetting forgets in all of them."""

    def __init__(self, *limiters: RateLimiter[T]) -> None:
        if not limiters:
            raise ValueError("need at least one rate limiter")
        self._limiters = limiters

    def when(self, item: T) -> float:
        return max(limiter.when(item) for limiter in self._limiters)

    def forget(self, item: T) -> None:
        for limiter in self._limiters:
            limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        return max(limiter.num_requeues(item) for limiter in self._limiters)


def default_controller_rate_limiter(clock: clocks.Clock | None = None) -> MaxOfRateLimiter[T]:
    """max(per-item 5 ms → 1000 s exponential, overall 10 qps / burst 100)."""
    return MaxOfRateLimiter[T](
        ItemExponentialFailureRateLimiter[T](0.005, 1000.0),
        BucketRateLimiter[T](10.0, 100, clock=clock),
    )
