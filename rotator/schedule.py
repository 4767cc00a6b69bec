"""When to refresh a credential, and when to retry after a failed refresh.

Pure functions of times and settings (no clock of their own): the reconciler passes ``now``.

Renewal: by default at 2/3 of the lifetime; ``renew_before`` or ``renew_before_percentage``
move it. Never later than 30 s before expiry (for lifetimes of a minute or less: half-way), and
spread by a jitter of ±``jitter_percentage`` % of the renewal window (issue → renewal) whose
direction is fixed per object (seeded by its uid), so a restart does not reshuffle everyone and
many credentials issued together do not all renew together.

Never earlier than the floor (:func:`renewal_floor`): 1/10 of the lifetime, and at least 5 s,
after issue. A ``renewBefore`` as long as the lifetime (``1h`` on a 1 h session or token) would
otherwise put the renewal at the issue time, and each fresh credential would be due at once: a
provider call, two writes and an Event in a loop. :attr:`Renewal.clamped` says when the spec's
setting was overridden, so the policy can say so.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

MIN_RETRY = 1.0
MAX_RETRY = 60.0
SAFETY_MARGIN = 30.0
"""A refresh is scheduled at least this long before expiry, so a failed one can be retried."""
FLOOR_FRACTION = 0.1
"""A refresh is never scheduled before this fraction of the lifetime has passed since issue.

1/10 bounds the provider calls to ten per lifetime of a credential, whatever the spec says (one
every 6 minutes for 1 h tokens), while honouring every setting that leaves 10 % of the lifetime
or more before the refresh: the CRD's ``renewBeforePercentage`` goes to 99, and 90 still holds.
"""
MIN_RENEWAL_AGE = 5.0
"""...and never less than this many seconds after issue, so that even a credential of a few
seconds (or one whose expiry is at or before its issue, by clock skew) cannot make a hot loop.
A credential that lives 5 s or less is thus renewed after it lapses: a moment without a valid
credential beats calling the provider in a loop, and no supported provider issues such
credentials (STS sessions last 15 min at least; GCP and Azure tokens about an hour)."""


@dataclass(frozen=True)
class RotationSettings:
    renew_before: float | None = None
    """Seconds before expiry to refresh; None uses the percentage or the default."""
    renew_before_percentage: int | None = None
    """Refresh when this percentage of the lifetime is left."""
    jitter_percentage: int = 10
    """Spread, in percent of the renewal window either way. Defaults to 10."""


@dataclass(frozen=True)
class Renewal:
    """When to refresh a credential, and whether the spec's setting had to give way."""

    at: float
    """The refresh time (epoch seconds)."""
    floor: float
    """The earliest refresh time allowed (:func:`renewal_floor`)."""
    clamped: bool
    """``renew_before`` or ``renew_before_percentage`` asked for a refresh before ``floor``
    (it is as long as the lifetime, or nearly): ``at`` keeps to the floor instead."""


def renewal_floor(*, issued_at: float, expires_at: float) -> float:
    """The earliest refresh time: :data:`FLOOR_FRACTION` of the lifetime, and at least
    :data:`MIN_RENEWAL_AGE` seconds, after issue."""
    lifetime = max(0.0, expires_at - issued_at)
    return issued_at + max(lifetime * FLOOR_FRACTION, MIN_RENEWAL_AGE)


def renewal(
    *, issued_at: float, expires_at: float, settings: RotationSettings, seed: str
) -> Renewal:
    """When a credential valid from ``issued_at`` to ``expires_at`` should be refreshed."""
    lifetime = max(0.0, expires_at - issued_at)
    if settings.renew_before is not None:
        requested = expires_at - settings.renew_before
    elif settings.renew_before_percentage is not None:
        requested = expires_at - lifetime * settings.renew_before_percentage / 100
    else:
        requested = issued_at + lifetime * 2 / 3
    floor = renewal_floor(issued_at=issued_at, expires_at=expires_at)
    latest = (
        expires_at - SAFETY_MARGIN if lifetime > 2 * SAFETY_MARGIN else issued_at + lifetime / 2
    )
    latest = max(latest, floor)  # under 10 s of lifetime, the floor wins over the margin
    base = max(floor, min(requested, latest))
    at = _jittered(issued_at, base, latest, settings.jitter_percentage, seed, earliest=floor)
    explicit = settings.renew_before is not None or settings.renew_before_percentage is not None
    return Renewal(at=at, floor=floor, clamped=explicit and requested < floor)


def renewal_time(
    *, issued_at: float, expires_at: float, settings: RotationSettings, seed: str
) -> float:
    """When a credential valid from ``issued_at`` to ``expires_at`` should be refreshed."""
    return renewal(issued_at=issued_at, expires_at=expires_at, settings=settings, seed=seed).at


def interval_time(
    *, issued_at: float, interval: float, settings: RotationSettings, seed: str
) -> float:
    """When a credential that does not expire, but is replaced every ``interval``, is due."""
    base = issued_at + interval
    return _jittered(issued_at, base, None, settings.jitter_percentage, seed)


def _jittered(
    start: float,
    base: float,
    latest: float | None,
    percentage: int,
    seed: str,
    *,
    earliest: float | None = None,
) -> float:
    """``base`` ± ``percentage`` % of the window from ``start``, never before ``earliest``
    (defaults to ``start``) or after ``latest``.

    Near ``latest`` the centre moves earlier rather than clipping half the spread onto it.
    """
    spread = (base - start) * percentage / 100
    if latest is not None:
        base = min(base, latest - spread)
    t = max(start if earliest is None else earliest, base + spread * stable_unit(seed))
    return t if latest is None else min(t, latest)


def stable_unit(seed: str) -> float:
    """A number in [-1, 1] that depends only on ``seed``."""
    digest = hashlib.sha256(seed.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 * 2 - 1


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff after failures. Defaults: 1 s doubling, capped at 1 min (an expired
    credential is retried every minute: consumers are failing until it is back)."""

    base: float = MIN_RETRY
    cap: float = MAX_RETRY
    jitter: float = 0.2
    """Each delay is spread by up to this fraction either way."""


def doubling(base: float, cap: float, attempts: int) -> float:
    """``base`` doubled per attempt after the first, at most ``cap``: the capped doubling of a
    retry after ``attempts`` failures in a row (1 or more; fewer count as 1). The exponent stops
    at 32, so no count overflows a float. Shared by :func:`retry_delay` and the Route's
    rollout retries (controllers.reconcilers.route.restarts)."""
    return float(min(cap, base * 2.0 ** min(max(attempts, 1) - 1, 32)))


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
    delay = doubling(p.base, p.cap, attempts)
    delay *= 1.0 + rng.uniform(-p.jitter, p.jitter)
    if expires_at is not None and expires_at > now:
        delay = min(delay, max(p.base / 2, (expires_at - now) / 2))
    return max(0.05, delay)
