"""A delaying queue that requeues failures through a rate limiter (``rate_limiting_queue.go``)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import TypeVar

from controllers.runtime import clock as clocks
from controllers.runtime import delaying, queue, ratelimiters, timers

T = TypeVar("T", bound=Hashable)


class RateLimitingQueue(delaying.DelayingQueue[T]):
    """:class:`~.delaying.DelayingQueue` plus :meth:`add_rate_limited`, :meth:`forget` and
    :meth:`num_requeues`."""

    def __init__(
        self,
        *,
        name: str,
        timers: timers.Timers,
        rate_limiter: ratelimiters.RateLimiter[T] | None = None,
        metrics: queue.QueueMetrics[T] | None = None,
        clock: clocks.Clock | None = None,
    ) -> None:
        super().__init__(name=name, timers=timers, metrics=metrics, clock=clock)
        self._limiter: ratelimiters.RateLimiter[T] = (
            rate_limiter or ratelimiters.default_controller_rate_limiter(self.clock)
        )

    def add_rate_limited(self, item: T) -> None:
        """Adds ``item`` once the rate limiter allows it; counts a retry."""
        self._metrics.retried()
        self.add_after(item, self._limiter.when(item))

    def forget(self, item: T) -> None:
        """Resets ``item``'s backoff: call after it was processed successfully."""
        self._limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        return self._limiter.num_requeues(item)
