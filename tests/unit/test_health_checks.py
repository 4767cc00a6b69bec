"""``/healthz`` fails when a thread the process cannot work without has ended: a controller's
worker, the leader elector — not merely when the process stops answering. And a controller's
stop keeps to its timeout, which the manager's graceful stop adds up."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC

import pytest
from apscheduler.schedulers.background import BackgroundScheduler

from controllers.runtime import health
from controllers.runtime.controller import Controller, ControllerOptions
from controllers.runtime.metrics import Metrics
from controllers.runtime.reconcile import Request, Result
from controllers.runtime.timers import APSchedulerTimers
from tests.support.polling import wait_for


@pytest.fixture
def scheduler() -> Iterator[BackgroundScheduler]:
    s = BackgroundScheduler(timezone=UTC)
    s.start()
    yield s
    s.shutdown(wait=False)


class Deadly:
    """Ends the worker thread that reconciles ``die``: SystemExit is no Exception, so neither
    the reconcile's nor the worker's handler catches it."""

    def reconcile(self, request: Request) -> Result:
        if request.name == "die":
            raise SystemExit(1)
        return Result()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_healthz_fails_when_a_controller_worker_has_ended(scheduler) -> None:
    c = Controller(
        "deadly",
        Deadly(),
        timers=APSchedulerTimers(scheduler),
        metrics=Metrics(),
        options=ControllerOptions(workers=2),
    )
    probes = health.Probes()
    probes.add_healthz("controller-deadly", health.none_ended(c.dead_workers))
    c.start()
    try:
        assert probes.evaluate("/healthz") == (True, ["[+]controller-deadly ok"])
        c.queue.add(Request("ns", "die"))
        wait_for(c.dead_workers, timeout=5, what="a worker ended")
        result = probes.evaluate("/healthz")
        assert result is not None
        ok, lines = result
        assert not ok
        assert "deadly-worker-" in lines[0]
    finally:
        c.stop(1)
    assert c.dead_workers() == [], "a stopped controller's workers are meant to end"


def test_healthz_fails_when_a_thread_ends_before_it_was_asked_to() -> None:
    until = threading.Event()
    thread = threading.Thread(target=lambda: None, name="leader-election")
    check = health.thread_running(lambda: thread, until=until)
    assert check() is None, "not started yet"
    thread.start()
    thread.join(5)
    assert check() == "thread leader-election ended"
    until.set()
    assert check() is None, "asked to end"


class Hanging:
    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def reconcile(self, request: Request) -> Result:
        self.started.set()
        self.release.wait(10)
        return Result()


def test_stop_keeps_to_its_timeout_and_reports_an_abandoned_reconcile(scheduler) -> None:
    """The manager's graceful stop relies on it: ``stop(t)`` returns after ``t`` in all (not
    once for the queue and again for the workers), False when a reconcile is still running."""
    reconciler = Hanging()
    c = Controller("hanging", reconciler, timers=APSchedulerTimers(scheduler), metrics=Metrics())
    c.start()
    c.queue.add(Request("ns", "slow"))
    assert reconciler.started.wait(5)
    began = time.monotonic()
    try:
        assert c.stop(1.0) is False
        assert time.monotonic() - began < 1.5
    finally:
        reconciler.release.set()
