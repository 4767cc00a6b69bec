"""The controller loop's dispatch of reconcile outcomes, on real timers (APScheduler)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from datetime import UTC

import pytest
from apscheduler.schedulers.background import BackgroundScheduler

from controllers.runtime.controller import Controller, ControllerOptions
from controllers.runtime.metrics import Metrics
from controllers.runtime.reconcile import Request, Result, TerminalError
from controllers.runtime.timers import APSchedulerTimers
from tests.support.polling import wait_for

Behaviour = Callable[[int], Result]


class Scripted:
    """A reconciler whose outcome per call is scripted per request name."""

    def __init__(self, behaviours: dict[str, Behaviour]) -> None:
        self.behaviours = behaviours
        self.calls: dict[str, list[float]] = defaultdict(list)
        self.lock = threading.Lock()

    def reconcile(self, request: Request) -> Result:
        with self.lock:
            self.calls[request.name].append(time.monotonic())
            n = len(self.calls[request.name])
        return self.behaviours[request.name](n)

    def count(self, name: str) -> int:
        with self.lock:
            return len(self.calls[name])


@pytest.fixture
def scheduler() -> Iterator[BackgroundScheduler]:
    s = BackgroundScheduler(timezone=UTC)
    s.start()
    yield s
    s.shutdown(wait=False)


def run(scheduler: BackgroundScheduler, reconciler: Scripted, *names: str, workers: int = 2):
    metrics = Metrics()
    c = Controller(
        "test",
        reconciler,
        timers=APSchedulerTimers(scheduler),
        metrics=metrics,
        options=ControllerOptions(workers=workers),
    )
    c.start()
    for name in names:
        c.queue.add(Request("ns", name))
    return c, metrics


def sample(metrics: Metrics, metric: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(metric, labels) or 0.0


def test_error_is_retried_with_growing_backoff_until_success(scheduler) -> None:
    def flaky(n: int) -> Result:
        if n <= 4:
            raise RuntimeError("boom")
        return Result()

    r = Scripted({"a": flaky})
    c, metrics = run(scheduler, r, "a")
    wait_for(lambda: r.count("a") == 5, timeout=10, what="5 attempts")
    gaps = [b - a for a, b in zip(r.calls["a"], r.calls["a"][1:], strict=False)]
    backoffs = [0.005 * 2**n for n in range(4)]
    assert all(gap >= b for gap, b in zip(gaps, backoffs, strict=True)), (gaps, backoffs)
    wait_for(lambda: c.queue.num_requeues(Request("ns", "a")) == 0, what="forgotten on success")
    assert sample(metrics, "controller_runtime_reconcile_errors_total", controller="test") == 4
    assert sample(metrics, "workqueue_retries_total", name="test", controller="test") == 4
    c.stop(5)


def test_requeue_after_reconciles_again_close_to_the_time(scheduler) -> None:
    r = Scripted({"a": lambda n: Result(requeue_after=0.5) if n == 1 else Result()})
    c, metrics = run(scheduler, r, "a")
    wait_for(lambda: r.count("a") == 2, timeout=5, what="second reconcile")
    gap = r.calls["a"][1] - r.calls["a"][0]
    print(f"requeue_after=0.5 s came back after {gap:.3f} s")
    assert gap >= 0.5, "never early"
    assert (
        sample(
            metrics, "controller_runtime_reconcile_total", controller="test", result="requeue_after"
        )
        == 1
    )
    c.stop(5)


def test_terminal_error_is_not_retried(scheduler) -> None:
    def terminal(n: int) -> Result:
        raise TerminalError("spec can never work")

    r = Scripted({"a": terminal, "b": lambda n: Result()})
    c, metrics = run(scheduler, r, "a", "b")
    wait_for(lambda: r.count("b") == 1, what="b reconciled")
    wait_for(
        lambda: (
            sample(metrics, "controller_runtime_terminal_reconcile_errors_total", controller="test")
            == 1
        ),
        what="terminal error counted",
    )
    assert c.queue.waiting() == {}, "nothing scheduled for a terminal error"
    assert len(c.queue) == 0
    assert r.count("a") == 1
    c.stop(5)


def test_an_exception_never_kills_the_worker(scheduler) -> None:
    def crash(n: int) -> Result:
        raise KeyError("a bug in a reconciler")

    r = Scripted({"bad": crash, **{f"ok{i}": (lambda n: Result()) for i in range(5)}})
    c, _ = run(scheduler, r, "bad", *[f"ok{i}" for i in range(5)], workers=1)
    wait_for(
        lambda: all(r.count(f"ok{i}") == 1 for i in range(5)), what="the single worker lives on"
    )
    c.stop(5)


def test_error_with_requeue_after_uses_backoff_not_the_requeue(scheduler) -> None:
    class WithHint(Exception):
        requeue_after = 30.0

    def hinted(n: int) -> Result:
        if n == 1:
            raise WithHint("retry hint")
        return Result()

    r = Scripted({"a": hinted})
    c, _ = run(scheduler, r, "a")
    wait_for(lambda: r.count("a") == 2, timeout=5, what="retried by backoff (ms), not after 30 s")
    c.stop(5)


class WatchedCondition(threading.Condition):
    """A Condition that says when a thread starts waiting on it, once ``armed``."""

    def __init__(self, lock: threading.RLock) -> None:
        super().__init__(lock)
        self.armed = False
        self.waiting = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        if self.armed:
            self.waiting.set()
        return super().wait(timeout)


def test_stop_waits_for_in_flight_reconciles(scheduler) -> None:
    """Catches a ``stop()`` that does not wait (no drain of the queue, or a zero timeout).

    No timing: the reconcile is held until ``stop()`` has either returned or started waiting on
    the queue (the only waiter once the single worker is busy), so a ``stop()`` that does not
    wait returns while the reconcile is still held, in every run.
    """
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def held(n: int) -> Result:
        started.set()
        release.wait(30)
        finished.set()
        return Result()

    r = Scripted({"held": held})
    c = Controller(
        "test",
        r,
        timers=APSchedulerTimers(scheduler),
        metrics=Metrics(),
        options=ControllerOptions(workers=1),
    )
    watched = WatchedCondition(c.queue._lock)
    c.queue._idle = watched  # before start: what a draining stop() waits on
    c.start()
    c.queue.add(Request("ns", "held"))
    assert started.wait(10), "reconcile started"
    watched.armed = True  # the one worker is in the reconcile: only stop() can wait now
    outcome: dict[str, bool] = {}

    def stop() -> None:
        outcome["drained"] = c.stop(30)
        outcome["finished when stop returned"] = finished.is_set()

    stopper = threading.Thread(target=stop)
    stopper.start()
    wait_for(
        lambda: watched.waiting.is_set() or not stopper.is_alive(),
        what="stop() waiting on the queue, or returned",
    )
    release.set()
    stopper.join(30)
    assert not stopper.is_alive()
    assert outcome == {"drained": True, "finished when stop returned": True}


def test_stop_reports_a_reconcile_it_had_to_abandon(scheduler) -> None:
    """Catches a ``stop()`` that claims a clean stop while a reconcile still runs."""
    started, release = threading.Event(), threading.Event()

    def stuck(n: int) -> Result:
        started.set()
        release.wait(30)
        return Result()

    r = Scripted({"stuck": stuck})
    c, _ = run(scheduler, r, "stuck")
    assert started.wait(10), "reconcile started"
    try:
        assert c.stop(0.2) is False, "the in-flight reconcile was abandoned, and it says so"
    finally:
        release.set()


def test_result_without_requeue_cancels_an_earlier_requeue(scheduler) -> None:
    r = Scripted({"a": lambda n: Result(requeue_after=60) if n == 1 else Result()})
    c, _ = run(scheduler, r, "a")
    wait_for(lambda: Request("ns", "a") in c.queue.waiting(), what="a requeue scheduled")
    c.queue.add(Request("ns", "a"))
    wait_for(lambda: r.count("a") == 2, what="reconciled again on an event")
    wait_for(lambda: c.queue.waiting() == {}, what="the stale timer is gone")
    assert scheduler.get_jobs() == []
    c.stop(5)
