"""A jittered exponential backoff for loops that reconnect (client-go's ``wait.Backoff``)."""

from __future__ import annotations

import random


class Backoff:
    """Delays ``initial * factor**n`` capped at ``cap``, each stretched by up to ``jitter``.

    Defaults to client-go's reflector values: 0.8 s doubling to 30 s, 10 % jitter.
    """

    def __init__(
        self,
        initial: float = 0.8,
        cap: float = 30.0,
        *,
        factor: float = 2.0,
        jitter: float = 0.1,
        rng: random.Random | None = None,
    ) -> None:
        self._initial = initial
        self._cap = cap
        self._factor = factor
        self._jitter = jitter
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not cryptography
        self._next = initial

    def next(self) -> float:
        """The next delay to wait; each call grows the one after it."""
        delay = self._next
        self._next = min(self._cap, self._next * self._factor)
        return delay * (1.0 + self._rng.uniform(0.0, self._jitter))

    def reset(self) -> None:
        self._next = self._initial
