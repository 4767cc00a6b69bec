"""When to refresh a credential, and when to retry after a failed refresh.

Pure functions of times and settings (no clock of their own): the reconciler passes ``now``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

MIN_RETRY = 1.0
MAX_RETRY = 300.0


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff after failures. Defaults: 1 s doubling, capped at 5 min."""

    base: float = MIN_RETRY
    cap: float = MAX_RETRY
    jitter: float = 0.2
    """Each delay is spread by up to this fraction either way."""


def retry_delay(
    attempts: int,
    *,
    now: float,
    expires_at: float | None,
    policy: RetryPolicy | None = None,
    rng: random.Random | None = None,
) -> float:
    """Seconds until the next attempt after ``attempts`` consecutive failures (attempts >= 1).

    Exponential with jitter and a cap; while a served credential is still valid, never more
    than half the time left before it expires, so retries get denser as expiry nears and some
    land before it. After expiry, keep retrying at the cap.
    """
    p = policy or RetryPolicy()
    rng = rng or random.Random()  # noqa: S311 - spreading retries, not cryptography
    delay = min(p.cap, p.base * 2.0 ** min(max(attempts, 1) - 1, 32))
    delay *= 1.0 + rng.uniform(-p.jitter, p.jitter)
    if expires_at is not None and expires_at > now:
        delay = min(delay, max(p.base / 2, (expires_at - now) / 2))
    return max(0.05, delay)
