"""When credentials are refreshed: the defaults, the bounds (a floor after issue, a margin before\nexpiry), and a jitter stable per object."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controllers.runtime.clock import FakeClock
from rotator import durations, schedule
from rotator.schedule import RotationSettings

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
    assert r.floor == pytest.approx(floor)
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
    assert r.at == pytest.approx(T0 + offset)
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
