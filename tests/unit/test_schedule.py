"""When credentials are refreshed: the defaults, the bounds, and a jitter stable per object."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
    t = schedule.renewal_time(issued_at=T0, expires_at=T0 + lifetime, settings=settings, seed=seed)
    assert T0 <= t < T0 + lifetime
    if lifetime > 2 * schedule.SAFETY_MARGIN:
        assert t <= T0 + lifetime - schedule.SAFETY_MARGIN + 1e-6, (
            "never later than 30 s before expiry"
        )


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
