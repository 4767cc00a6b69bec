"""The retry schedule as documented, for bounds on what a failing policy may do.

README ("Rotation"): retries back off exponentially — 1 s, doubling, at most 1 min, denser as
expiry nears; ``rotator.schedule.RetryPolicy`` spreads each delay by up to 20 % either way. The
numbers are written out here rather than imported from ``rotator.schedule``, so that a test
holding the controller to them fails when the code drifts from what is documented (a test that
read the cap from the code would follow a mutated cap).

Without a served credential about to expire (nothing to get denser for), attempt ``n + 1``
comes at least ``0.8 * min(60, 2^(n-1))`` seconds after attempt ``n``: the delay is counted from
the clock reading at the start of attempt ``n``, and everything an attempt does (a TokenRequest,
the provider call, a status write) can only come later. So these are hard bounds: a slow
machine makes fewer attempts, never more.
"""

from __future__ import annotations

FIRST = 1.0
"""Seconds before the first retry."""
CAP = 60.0
"""No retry is ever further off than this (before the jitter)."""
JITTER = 0.2
"""Each delay is spread by up to this fraction either way."""


def nominal(failures: int) -> float:
    """The delay after ``failures`` consecutive failures, before the jitter."""
    return min(CAP, FIRST * 2.0 ** min(failures - 1, 32))


def shortest_gap(failures: int) -> float:
    """The least time from attempt ``failures`` to the next one."""
    return nominal(failures) * (1 - JITTER)


def longest_gap(failures: int) -> float:
    """The most time from attempt ``failures`` to the next one, not counting the attempt's own
    work (which only a generous timeout can allow for)."""
    return nominal(failures) * (1 + JITTER)


def earliest(attempt: int, *, since: int = 1) -> float:
    """The least time from attempt ``since`` to attempt ``attempt`` (both 1-based)."""
    return sum(shortest_gap(n) for n in range(since, attempt))


def latest(attempt: int, *, since: int = 1) -> float:
    """The most time from attempt ``since`` to attempt ``attempt``, by the schedule alone."""
    return sum(longest_gap(n) for n in range(since, attempt))


def most_attempts(window: float, *, since: int = 1) -> int:
    """The highest attempt number the schedule allows ``window`` seconds after attempt
    ``since`` (or, with ``since=1``, after the moment the failing object was created: the
    first attempt cannot come earlier)."""
    attempt = since
    while earliest(attempt + 1, since=since) <= window:
        attempt += 1
    return attempt
