"""The controller loop under faults outside the reconcile: a worker outlives an exception in the
dispatch, and a timer fire the scheduler loses is made up by the watchdog's sweep."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC

import pytest
import structlog
from apscheduler.schedulers.background import BackgroundScheduler

from controllers.runtime import delaying
from controllers.runtime.controller import Controller, ControllerOptions
from controllers.runtime.metrics import Metrics
from controllers.runtime.reconcile import Request, Result
from controllers.runtime.timers import APSchedulerTimers, Timers
from tests.support.polling import wait_for
from tests.support.timers import DroppingTimers

SECRET = "sk-live-never-in-a-log-0042"


class Recorder:
    """A reconciler that records when each key was reconciled; ``requeue`` per name."""

    def __init__(self, requeue: dict[str, float] | None = None) -> None:
        self.requeue = requeue or {}
        self.calls: dict[str, list[float]] = {}
        self.lock = threading.Lock()

    def reconcile(self, request: Request) -> Result:
        with self.lock:
            calls = self.calls.setdefault(request.name, [])
            calls.append(time.monotonic())
            first = len(calls) == 1
        after = self.requeue.get(request.name)
        return Result(requeue_after=after) if after and first else Result()

    def count(self, name: str) -> int:
        with self.lock:
            return len(self.calls.get(name, []))


@pytest.fixture
def scheduler() -> Iterator[BackgroundScheduler]:
    s = BackgroundScheduler(timezone=UTC)
    s.start()
    yield s
    s.shutdown(wait=False)


def start(reconciler: Recorder, timers: Timers, workers: int = 1) -> Controller:
    c = Controller(
        "test",
        reconciler,
        timers=timers,
        metrics=Metrics(),
        options=ControllerOptions(workers=workers),
    )
    c.start()
    return c


def test_an_exception_after_the_reconcile_keeps_the_worker_and_retries_the_key(
    scheduler: BackgroundScheduler,
) -> None:
    r = Recorder()
    c = start(r, APSchedulerTimers(scheduler))
    forget = c.queue.forget
    failures = [KeyError(SECRET)]

    def broken_forget(request: Request) -> None:  # _handle's first queue action on success
        if request.name == "bad" and failures:
            raise failures.pop()
        forget(request)

    c.queue.forget = broken_forget  # type: ignore[method-assign,assignment]
    with structlog.testing.capture_logs() as logs:
        c.queue.add(Request("ns", "bad"))
        for i in range(3):
            c.queue.add(Request("ns", f"ok{i}"))
        wait_for(lambda: all(r.count(f"ok{i}") == 1 for i in range(3)), what="the worker lives on")
        wait_for(lambda: r.count("bad") == 2, timeout=5, what="the key requeued and retried")
    c.stop(5)
    crashes = [e for e in logs if e["event"] == "worker.unexpected_error"]
    assert len(crashes) == 1
    assert crashes[0]["namespace"] == "ns"
    assert crashes[0]["name"] == "bad"
    assert crashes[0]["error_type"] == "KeyError"
    assert SECRET not in repr(logs), "the message is never logged"


def test_a_requeue_whose_timer_fire_is_lost_still_comes_back(
    scheduler: BackgroundScheduler,
) -> None:
    """A renewal requeue whose timer never delivers (as a date job APScheduler skips) is made up
    by the sweep, at most the grace plus one watchdog period late — no longer lost for good."""
    timers = DroppingTimers(APSchedulerTimers(scheduler), drops=lambda job_id: True)
    r = Recorder(requeue={"renew": 0.5})
    c = start(r, timers)
    c.queue.add(Request("ns", "renew"))
    bound = 0.5 + delaying.SWEEP_GRACE + 1.0  # the watchdog sweeps every second
    wait_for(lambda: r.count("renew") == 2, timeout=bound + 2, what="reconciled again")
    gap = r.calls["renew"][1] - r.calls["renew"][0]
    print(f"\nrequeue_after=0.5 s with its fire lost: back after {gap:.2f} s (bound {bound} s)")
    assert timers.lost == ["test:ns/renew"], "the fire was lost"
    assert 0.5 <= gap <= bound + 0.5
    assert c.queue.waiting() == {}
    c.stop(5)
