"""add_after: earliest wins, late adds are never postponed, shutdown drops pending delays, and no\nscheduler fault loses a key."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from controllers.runtime.clock import FakeClock
from controllers.runtime.delaying import DelayingQueue
from controllers.runtime.ratelimiting import RateLimitingQueue
from controllers.runtime.timers import ManualTimers
from tests.support.timers import FlakyTimers


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


# --- a key is never lost: fake clock, injected scheduler faults ---------------------------------

GRACE = 1.0
delay_keys = st.sampled_from(["ns/a", "ns/b", "ns/c"])


class FlakyMetrics:
    """Queue metrics whose ``added`` raises while ``fail`` is set: an add that fails inside a
    timer's fire or the sweep."""

    def __init__(self) -> None:
        self.fail = False
        self.failed: set[str] = set()

    def added(self, item: str) -> None:
        if self.fail:
            self.failed.add(item)
            raise RuntimeError("injected: add failed")

    def taken(self, item: str) -> None:
        pass

    def finished(self, item: str) -> None:
        pass

    def retried(self) -> None:
        pass


class NeverLosesAKey(RuleBasedStateMachine):
    """Every interleaving of add_after and time passing, with the scheduler failing to arm, dropping
    fires, firing late and failing to cancel: each add-after window is processed exactly once, never
    before its due time and at most ``grace`` after it (plus the sweep), and the pending records
    are always exactly the model's (no stale record swallows a later add_after)."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.timers = FlakyTimers(self.clock)
        self.metrics = FlakyMetrics()
        self.q: DelayingQueue[str] = DelayingQueue(
            name="q", timers=self.timers, metrics=self.metrics, clock=self.clock, grace=GRACE
        )
        self.pending: dict[str, float] = {}  # model: the open window per key (earliest wins)
        self.processed: list[tuple[str, float]] = []

    @rule(key=delay_keys, delay=st.floats(0.05, 20), fail=st.booleans())
    def add_after(self, key: str, delay: float, fail: bool) -> None:
        self.timers.fail_call_at = fail
        try:
            self.q.add_after(key, delay)
        finally:
            self.timers.fail_call_at = False
        due = self.clock.now() + delay
        self.pending[key] = min(self.pending.get(key, due), due)

    @rule(key=delay_keys)
    def add_now(self, key: str) -> None:
        self.q.add_after(key, 0)
        assert self.drain() == [key], "a zero delay adds at once"

    @rule(
        dt=st.floats(0.05, 3),
        drop=st.booleans(),
        hold=st.booleans(),
        fail_add=st.booleans(),
        fail_cancel=st.booleans(),
    )
    def tick(self, dt: float, drop: bool, hold: bool, fail_add: bool, fail_cancel: bool) -> None:
        self.clock.advance(dt)
        now = self.clock.now()
        self.metrics.fail, self.metrics.failed = fail_add, set()
        self.timers.fail_cancel = fail_cancel
        try:
            self.timers.fire_due(drop=drop, hold=hold)
            self.q.sweep()  # the controller's watchdog, once a second
        finally:
            self.metrics.fail = False
            self.timers.fail_cancel = False
        got = self.drain()
        assert len(got) == len(set(got)), "each window is processed once"
        for key in got:
            due = self.pending.pop(key, None)
            assert due is not None, f"{key} processed without an open window"
            assert due <= now, f"{key} processed {due - now:.3f} s early"
        for key, due in self.pending.items():
            late = now - due
            assert late < GRACE or key in self.metrics.failed, (
                f"{key} still waiting {late:.3f} s after its due time"
            )

    @invariant()
    def records_match_the_model(self) -> None:
        assert self.q.waiting() == self.pending

    def teardown(self) -> None:
        for _ in range(3):  # faults off: every open window closes, once
            self.clock.advance(GRACE + 20)
            self.timers.fire_due()
            self.q.sweep()
            for key in self.drain():
                assert self.pending.pop(key, None) is not None, f"{key} processed twice"
        assert self.pending == {}, "every window was processed"
        assert self.q.waiting() == {}

    def drain(self) -> list[str]:
        got = []
        while len(self.q):
            item, _ = self.q.get()
            assert item is not None
            got.append(item)
            self.q.done(item)
        return got


TestNeverLosesAKey = NeverLosesAKey.TestCase
TestNeverLosesAKey.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)


def test_a_dropped_fire_no_longer_swallows_later_adds() -> None:
    """The bug this replaces: a fire lost for good left its record behind, and every later
    add_after for the key deferred to it (earliest wins): the key was never processed again."""
    clock = FakeClock()
    timers = FlakyTimers(clock)
    q: DelayingQueue[str] = DelayingQueue(name="q", timers=timers, clock=clock, grace=GRACE)
    q.add_after("a", 10)
    clock.advance(10)
    timers.fire_due(drop=True)
    assert timers.dropped == 1
    q.add_after("a", 5)  # merges into the overdue window: it must still be delivered
    assert len(q) == 0, "within the grace the timer may still fire"
    clock.advance(GRACE)
    assert q.sweep() == 1
    assert q.get() == ("a", False)
    q.done("a")
    assert q.waiting() == {}
    q.add_after("a", 5)
    clock.advance(5)
    assert timers.fire_due() == 1, "the next window is armed again"
    assert len(q) == 1


def test_a_failed_arm_is_rolled_back_and_delivered_by_the_sweep() -> None:
    clock = FakeClock()
    timers = FlakyTimers(clock)
    q: DelayingQueue[str] = DelayingQueue(name="q", timers=timers, clock=clock, grace=GRACE)
    timers.fail_call_at = True
    q.add_after("a", 3)
    timers.fail_call_at = False
    assert timers.scheduled() == {}, "no job claimed"
    assert q.waiting() == {"a": clock.now() + 3}, "the key is still pending"
    clock.advance(2.9)
    assert q.sweep() == 0, "not before its time"
    clock.advance(0.1)
    assert q.sweep() == 1, "an unarmed record is swept as soon as it is due"
    assert q.get() == ("a", False)


def test_a_late_fire_after_the_sweep_is_a_no_op() -> None:
    clock = FakeClock()
    timers = FlakyTimers(clock)
    q: DelayingQueue[str] = DelayingQueue(name="q", timers=timers, clock=clock, grace=GRACE)
    q.add_after("a", 1)
    clock.advance(1)
    timers.fire_due(hold=True)  # submitted, not yet run
    clock.advance(GRACE)
    assert q.sweep() == 1
    assert q.get() == ("a", False)
    q.done("a")
    q.add_after("a", 60)  # a new window
    assert timers.fire_due() == 1, "the held fire runs now"
    assert len(q) == 0, "stale: it does not deliver the new window early"
    assert q.waiting() == {"a": clock.now() + 60}
