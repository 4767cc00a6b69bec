"""When credentials are refreshed: the defaults, the bounds (a floor after issue, a margin before
expiry), and a jitter stable per object; when a failed refresh is retried: the schedule the
README documents (1 s doubling, at most 1 min, never past half the remaining validity), on a
fake clock, with its numbers written out (tests/support/backoff.py) rather than read from the
code under test.

Each test's docstring names the deliberate breakages of ``rotator.schedule`` it was checked to
fail on (issue 15)."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controllers.runtime.clock import FakeClock
from rotator import durations, schedule
from rotator.schedule import RotationSettings
from tests.support import backoff

T0 = 1_800_000_000.0


@given(
    lifetime=st.floats(1, 48 * 3600),
    seed=st.text(min_size=1, max_size=20),
    jitter=st.integers(0, 50),
    before=st.one_of(st.none(), st.floats(1, 48 * 3600)),
    percentage=st.one_of(st.none(), st.integers(1, 99)),
)
def test_renewal_is_after_issue_and_before_expiry_with_a_margin(
    lifetime: float, seed: str, jitter: int, before: float | None, percentage: int | None
) -> None:
    settings = RotationSettings(
        renew_before=before, renew_before_percentage=percentage, jitter_percentage=jitter
    )
    r = schedule.renewal(issued_at=T0, expires_at=T0 + lifetime, settings=settings, seed=seed)
    t = r.at
    floor = T0 + max(lifetime / 10, schedule.MIN_RENEWAL_AGE)
    assert r.floor == pytest.approx(floor, abs=1e-6)  # not relative: T0 is 1.8e9 s
    assert t >= floor - 1e-6, "never before the floor: 1/10 of the lifetime, and 5 s, after issue"
    if lifetime > schedule.MIN_RENEWAL_AGE:
        assert t < T0 + lifetime
    if lifetime > 2 * schedule.SAFETY_MARGIN:
        assert t <= T0 + lifetime - schedule.SAFETY_MARGIN + 1e-6, (
            "never later than 30 s before expiry"
        )
    requested = (
        T0 + lifetime - before
        if before is not None
        else T0 + lifetime * (1 - percentage / 100)
        if percentage is not None
        else None
    )
    assert r.clamped == (requested is not None and requested < floor), "clamped says when"


def test_default_is_two_thirds_of_the_lifetime_within_the_jitter() -> None:
    """Mutations caught: jitter removed (``jitter_percentage`` 0: no spread), jitter of ±50 %
    (times outside ±10 % of the window)."""
    hour = 3600.0
    times = [
        schedule.renewal_time(
            issued_at=T0, expires_at=T0 + hour, settings=RotationSettings(), seed=f"uid-{i}"
        )
        for i in range(200)
    ]
    base, spread = T0 + hour * 2 / 3, hour * 2 / 3 * 0.10
    assert all(base - spread - 1e-6 <= t <= base + spread + 1e-6 for t in times)
    assert max(times) - min(times) > spread, "spread over the window, not bunched"


def test_jitter_is_stable_per_object() -> None:
    s = RotationSettings()
    a = schedule.renewal_time(issued_at=T0, expires_at=T0 + 3600, settings=s, seed="uid-1")
    assert a == schedule.renewal_time(issued_at=T0, expires_at=T0 + 3600, settings=s, seed="uid-1")
    assert a != schedule.renewal_time(issued_at=T0, expires_at=T0 + 3600, settings=s, seed="uid-2")


def test_short_lifetimes_renew_well_before_expiry() -> None:
    t = schedule.renewal_time(
        issued_at=T0, expires_at=T0 + 60, settings=RotationSettings(), seed="x"
    )
    assert T0 + 20 <= t <= T0 + 30, "a 60 s credential renews 30 s or more before expiry"
    t = schedule.renewal_time(
        issued_at=T0, expires_at=T0 + 20, settings=RotationSettings(), seed="x"
    )
    assert T0 <= t <= T0 + 10, "under a minute: half-way at the latest"


def test_renew_before_and_percentage() -> None:
    no_jitter = {"jitter_percentage": 0}
    t = schedule.renewal_time(
        issued_at=T0,
        expires_at=T0 + 3600,
        settings=RotationSettings(renew_before=600, **no_jitter),
        seed="x",
    )
    assert t == T0 + 3000
    t = schedule.renewal_time(
        issued_at=T0,
        expires_at=T0 + 3600,
        settings=RotationSettings(renew_before_percentage=25, **no_jitter),
        seed="x",
    )
    assert t == T0 + 2700


HOUR = 3600.0
NO_JITTER = {"jitter_percentage": 0}


@pytest.mark.parametrize(
    ("lifetime", "settings", "offset", "clamped"),
    [
        # renewBefore as long as the lifetime: the floor, 1/10 of it, and the spec is flagged
        (HOUR, RotationSettings(renew_before=HOUR, **NO_JITTER), 360.0, True),
        (HOUR, RotationSettings(renew_before=2 * HOUR, **NO_JITTER), 360.0, True),
        # the e2e stand-ins' 60 s sessions: 1/10 is 6 s, above the 5 s minimum
        (60.0, RotationSettings(renew_before=2 * HOUR, **NO_JITTER), 6.0, True),
        # a 20 s credential: the 5 s minimum wins over 1/10 (2 s)
        (20.0, RotationSettings(renew_before=HOUR, **NO_JITTER), 5.0, True),
        # renewBeforePercentage: 95 % is past the floor, 90 % is exactly on it and honoured
        (HOUR, RotationSettings(renew_before_percentage=95, **NO_JITTER), 360.0, True),
        (HOUR, RotationSettings(renew_before_percentage=90, **NO_JITTER), 360.0, False),
        (HOUR, RotationSettings(renew_before=3000, **NO_JITTER), 600.0, False),
        # a renewBefore shorter than the safety margin is clamped the other way, not flagged
        (HOUR, RotationSettings(renew_before=10, **NO_JITTER), HOUR - 30, False),
        (HOUR, RotationSettings(**NO_JITTER), HOUR * 2 / 3, False),
    ],
)
def test_renewal_floor(
    lifetime: float, settings: RotationSettings, offset: float, clamped: bool
) -> None:
    r = schedule.renewal(issued_at=T0, expires_at=T0 + lifetime, settings=settings, seed="x")
    assert r.at - T0 == pytest.approx(offset, abs=1e-6)
    assert r.clamped is clamped


def test_jitter_never_crosses_the_floor() -> None:
    settings = RotationSettings(renew_before=HOUR, jitter_percentage=50)
    times = [
        schedule.renewal_time(issued_at=T0, expires_at=T0 + HOUR, settings=settings, seed=f"u{i}")
        for i in range(200)
    ]
    assert min(times) == T0 + 360, "half the objects sit on the floor, none before it"
    assert max(times) > T0 + 360 + 100, "the other half are still spread"


@pytest.mark.parametrize(
    ("lifetime", "renew_before"), [(HOUR, HOUR), (HOUR, 2 * HOUR), (60.0, 2 * HOUR), (0.0, 60.0)]
)
def test_a_renew_before_as_long_as_the_lifetime_is_no_hot_loop(
    lifetime: float, renew_before: float
) -> None:
    """A controller on a fake clock: mint when due, as the policy reconciler does, for a day of
    credentials. Provider calls are bounded by the floor: one per max(lifetime/10, 5 s)."""
    clock = FakeClock(T0)
    settings = RotationSettings(renew_before=renew_before)
    start, mints, due = clock.now(), 0, clock.now()
    window = 24 * HOUR
    while clock.now() - start < window:
        if clock.now() >= due:  # refresh_reason: "due"
            mints += 1
            issued = clock.now()
            due = schedule.renewal_time(
                issued_at=issued, expires_at=issued + lifetime, settings=settings, seed="uid"
            )
            assert due > clock.now(), "a fresh credential is never due at once"
        clock.advance(max(0.001, due - clock.now()))  # Result(requeue_after=due - now)
    period = max(lifetime * schedule.FLOOR_FRACTION, schedule.MIN_RENEWAL_AGE)
    print(f"\nlifetime {lifetime:.0f} s, renewBefore {renew_before:.0f} s: {mints} mints in 24 h")
    assert mints <= window / period + 1


@pytest.mark.parametrize("seed", [f"uid-{i}" for i in range(50)])
def test_a_one_minute_session_renews_within_ten_percent_of_its_window(seed: str) -> None:
    """The e2e stand-ins' 60 s sessions: the window ends 30 s before expiry (the safety margin
    wins over 2/3), and the renewal is ±10 % of it around a centre moved in by the spread, in
    the direction the object's uid fixes. What tests/e2e/test_aws.py checks on the wire.

    Mutations caught: jitter removed, jitter of ±50 %, the centre left on the margin (half the
    spread clipped onto one time)."""
    window = 60.0 - 30.0
    t = schedule.renewal_time(
        issued_at=T0, expires_at=T0 + 60, settings=RotationSettings(), seed=seed
    )
    expected = T0 + window * 0.9 + window * 0.1 * schedule.stable_unit(seed)
    assert t - T0 == pytest.approx(expected - T0, abs=1e-6)
    assert T0 + 0.8 * window - 1e-6 <= t <= T0 + window + 1e-6


def failing_refreshes(
    *, start: float, expires_at: float | None, until: float, rng: random.Random
) -> list[float]:
    """A controller on a fake clock whose every refresh fails from ``start`` on, as the policy
    reconciler schedules retries (``_failed`` in controllers/reconcilers/policy.py): the next
    attempt ``retry_delay`` later, and no later than the expiry while the credential is valid
    (so ``Expired`` turns on time). Returns the attempt times up to ``until``."""
    clock = FakeClock(start)
    attempts: list[float] = []
    while clock.now() < until:
        now = clock.now()
        attempts.append(now)
        delay = schedule.retry_delay(len(attempts), now=now, expires_at=expires_at, rng=rng)
        if expires_at is not None and now < expires_at:
            delay = min(delay, max(0.001, expires_at - now))
        assert delay > 0, "a retry is never due at once"
        clock.advance(delay)
    return attempts


@given(seed=st.integers(0, 2**32))
def test_the_retry_schedule_as_documented(seed: int) -> None:
    """A day of failures with nothing served: 1 s, doubling (2, 4 … 32 s), then every minute,
    each delay ±20 %; so 24 h hold about 1440 attempts, not 86 400.

    Mutations caught: a constant 1 s delay (the second gap is 1 s, not 2), no cap (the eighth
    gap is 128 s), jitter removed (the capped gaps all equal), jitter of ±50 % (gaps outside
    ±20 %), a zero delay (a hot loop: the first gap)."""
    day = 24 * 3600.0
    attempts = failing_refreshes(start=T0, expires_at=None, until=T0 + day, rng=random.Random(seed))
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    for n, gap in enumerate(gaps, start=1):
        assert backoff.shortest_gap(n) - 1e-9 <= gap <= backoff.longest_gap(n) + 1e-9, (
            f"the delay after {n} failures is {gap:.2f} s, not {backoff.nominal(n):.0f} s ±20 %"
        )
    capped = gaps[6:]  # from the seventh failure on: 64 s, capped to 60
    assert max(capped) - min(capped) > 0.8 * 2 * backoff.JITTER * backoff.CAP, "jittered"
    assert day / 72 < len(attempts) <= 7 + day / 48


@pytest.mark.parametrize(
    ("lifetime", "failing_from"),
    [
        (60.0, 30.0),  # the e2e stand-ins' sessions: the first failure at the latest renewal
        (3600.0, 2400.0),  # a 1 h session failing from its default renewal (2/3) on
        (12 * 3600.0, 8 * 3600.0),  # a 12 h session: hours at the cap before the end nears
    ],
)
@pytest.mark.parametrize("seed", range(20))
def test_retries_get_denser_as_expiry_nears_and_land_before_it(
    lifetime: float, failing_from: float, seed: int
) -> None:
    """While a served credential is valid, no retry is scheduled past half the time it has
    left, so they come faster as expiry nears and some land just before it: in the last minute,
    at 30, 15, 7.5 … s to go, not the one or two a minute-cap schedule would fit.

    Mutations caught: the half-the-remaining-validity bound dropped (retries stay a minute
    apart up to expiry), a constant 1 s delay (far more than the bound allows before the end
    nears), no cap (hours between retries on the 12 h session)."""
    expires = T0 + lifetime
    attempts = failing_refreshes(
        start=T0 + failing_from, expires_at=expires, until=expires, rng=random.Random(seed)
    )
    for n, (now, following) in enumerate(itertools.pairwise(attempts), start=1):
        left = expires - now
        assert following - now <= max(backoff.FIRST / 2, left / 2) + 1e-6, (
            f"retry {n} at {left:.1f} s to go comes after half of it"
        )
        assert following - now <= backoff.longest_gap(n) + 1e-6, "never later than the schedule"
    last_minute = [t for t in attempts if expires - 60 < t < expires]
    print(f"\n{len(attempts)} attempts, {len(last_minute)} in the last minute before expiry")
    assert len(last_minute) >= 6, "denser as expiry nears"
    assert expires - attempts[-1] <= backoff.FIRST, "the last retry lands right before expiry"


def test_after_expiry_retries_keep_to_the_cap() -> None:
    """Mutations caught: no cap (the delays keep doubling past a minute)."""
    attempts = failing_refreshes(
        start=T0, expires_at=T0 + 600, until=T0 + 3600, rng=random.Random(1)
    )
    after = [t for t in attempts if t > T0 + 600]
    gaps = [b - a for a, b in itertools.pairwise(after)]
    assert gaps
    assert all(backoff.CAP * 0.8 - 1e-9 <= g <= backoff.CAP * 1.2 + 1e-9 for g in gaps)


@pytest.mark.parametrize("failures", range(1, 12))
def test_each_retry_delay_is_spread_by_20_percent(failures: int) -> None:
    """Many controllers failing together must not retry together: each delay is spread over
    ±20 % of its nominal value, both ways.

    Mutations caught: retry jitter removed (every delay nominal), jitter of ±50 % (outside the
    range), a constant 1 s delay, no cap."""
    rng = random.Random(failures)
    delays = [schedule.retry_delay(failures, now=T0, expires_at=None, rng=rng) for _ in range(300)]
    nominal = backoff.nominal(failures)
    assert all(nominal * 0.8 - 1e-9 <= d <= nominal * 1.2 + 1e-9 for d in delays)
    assert min(delays) < nominal * 0.85, "spread below the nominal delay"
    assert max(delays) > nominal * 1.15, "spread above it"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1h", 3600), ("90s", 90), ("1h30m", 5400), ("1.5h", 5400), ("250ms", 0.25), ("15m", 900)],
)
def test_durations(text: str, seconds: float) -> None:
    assert durations.parse(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "1", "h", "1 h", "1d", "-1s"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        durations.parse(text)
