"""Backoff grows and caps; the bucket allows a burst, then a steady rate."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from controllers.runtime.clock import FakeClock
from controllers.runtime.ratelimiters import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    default_controller_rate_limiter,
)


@given(failures=st.integers(1, 80))
def test_exponential_backoff_doubles_then_caps(failures: int) -> None:
    limiter = ItemExponentialFailureRateLimiter[str](0.005, 1000.0)
    delays = [limiter.when("a") for _ in range(failures)]
    for n, delay in enumerate(delays):
        assert delay == min(0.005 * 2**n, 1000.0)
    assert all(b >= a for a, b in itertools_pairwise(delays)), "never shrinks"
    assert limiter.num_requeues("a") == failures
    assert limiter.when("b") == 0.005, "per item"
    limiter.forget("a")
    assert limiter.when("a") == 0.005, "forget resets"


def itertools_pairwise(values: list[float]) -> list[tuple[float, float]]:
    return list(itertools.pairwise(values))


def test_bucket_allows_burst_then_ten_per_second() -> None:
    clock = FakeClock()
    bucket = BucketRateLimiter[str](10.0, 100, clock=clock)
    assert [bucket.when(f"k{i}") for i in range(100)] == [0.0] * 100
    assert bucket.when("k100") == 0.1
    assert bucket.when("k101") == 0.2
    clock.advance(0.2)
    assert bucket.when("k102") == 0.1


def test_default_controller_limiter_is_the_max_of_both() -> None:
    clock = FakeClock()
    limiter: MaxOfRateLimiter[str] = default_controller_rate_limiter(clock)
    assert limiter.when("a") == 0.005
    for i in range(200):
        limiter.when(f"other-{i}")  # drains the bucket
    assert limiter.when("a") > 0.01, "the bucket dominates once drained"
    clock.advance(1000)
    limiter.forget("a")
    assert limiter.when("a") == 0.005
