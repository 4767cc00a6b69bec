"""add_after: earliest wins, late adds are never postponed, shutdown drops pending delays."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controllers.runtime.clock import FakeClock
from controllers.runtime.delaying import DelayingQueue
from controllers.runtime.ratelimiting import RateLimitingQueue
from controllers.runtime.timers import ManualTimers


def make() -> tuple[DelayingQueue[str], FakeClock, ManualTimers]:
    clock = FakeClock()
    timers = ManualTimers(clock)
    return DelayingQueue(name="q", timers=timers, clock=clock), clock, timers


@given(
    requests=st.lists(
        st.tuples(st.sampled_from("abc"), st.integers(1, 100)), min_size=1, max_size=30
    )
)
def test_earliest_add_after_wins(requests: list[tuple[str, int]]) -> None:
    q, clock, timers = make()
    for item, delay in requests:
        q.add_after(item, delay)
    earliest: dict[str, int] = {}
    for item, delay in requests:
        earliest[item] = min(earliest.get(item, delay), delay)
    assert {k: v - clock.now() for k, v in q.waiting().items()} == earliest
    assert len(timers.scheduled()) == len(earliest), "one timer job per item"
    for second in range(1, 101):
        clock.advance(1)
        timers.fire_due()
        due_now = {item for item, delay in earliest.items() if delay == second}
        got = set()
        while len(q):
            taken, _ = q.get()
            assert taken is not None
            got.add(taken)
            q.done(taken)
        assert got == due_now, f"at t={second}"
    assert q.waiting() == {}


def test_zero_or_negative_delay_adds_now() -> None:
    q, _, _ = make()
    q.add_after("a", 0)
    q.add_after("b", -1)
    assert len(q) == 2


def test_shutdown_cancels_pending_delays() -> None:
    q, clock, timers = make()
    q.add_after("a", 5)
    q.shut_down()
    assert timers.scheduled() == {}
    clock.advance(10)
    assert timers.fire_due() == 0
    assert q.get() == (None, True)


def test_rate_limited_adds_back_off_and_forget_resets() -> None:
    clock = FakeClock()
    timers = ManualTimers(clock)
    q: RateLimitingQueue[str] = RateLimitingQueue(name="q", timers=timers, clock=clock)
    q.add_rate_limited("a")
    first = q.waiting()["a"] - clock.now()
    clock.advance(first)
    timers.fire_due()
    _item, _ = q.get()
    q.done("a")
    q.add_rate_limited("a")
    second = q.waiting()["a"] - clock.now()
    assert second == pytest.approx(0.010, abs=1e-6)
    assert first == pytest.approx(0.005, abs=1e-6)
    assert q.num_requeues("a") == 2
    q.forget("a")
    assert q.num_requeues("a") == 0


def test_cancel_removes_the_pending_timer() -> None:
    q, clock, timers = make()
    q.add_after("a", 5)
    q.cancel("a")
    assert q.waiting() == {}
    assert timers.scheduled() == {}
    clock.advance(10)
    assert timers.fire_due() == 0
    assert len(q) == 0
