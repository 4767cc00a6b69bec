"""Timers behind delayed adds: one job per key, replaced when its time moves.

Production uses :class:`APSchedulerTimers`: every pending ``add_after`` is an APScheduler date job,
so the whole schedule of pending reconciles can be listed (``scheduled()``) and measured. Jobs are
coalesced and have no misfire grace limit: a job that could not run on time (a stalled process, a
suspended laptop) still runs as soon as it can, because a late refresh beats a skipped one.

Timers are best effort: a fire can still be lost (a submission error, a callback that raised).
:class:`~.delaying.DelayingQueue` does not trust them alone; its sweep adds what a timer missed.

:class:`ManualTimers` is the shipped test double, driven by a :class:`~.clock.FakeClock`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Protocol

from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.base import BaseScheduler
from apscheduler.triggers.date import DateTrigger

from controllers.runtime import clock as clocks

Callback = Callable[[], None]


class Timers(Protocol):
    """Runs a callback at a wall-clock time; one pending callback per id."""

    def call_at(self, job_id: str, when: float, callback: Callback) -> None:
        """Schedules ``callback`` at ``when`` (epoch seconds), replacing any job with ``job_id``."""
        ...

    def cancel(self, job_id: str) -> None:
        """Removes the job with ``job_id``, if any."""
        ...

    def scheduled(self) -> dict[str, float]:
        """Every pending job id and its due time (epoch seconds)."""
        ...


MAX_INSTANCES = 1_000_000
"""Per job id: in effect no limit (see :meth:`APSchedulerTimers.call_at`)."""


class APSchedulerTimers:
    """Timers on a running APScheduler scheduler (owned and started by the composition root)."""

    def __init__(self, scheduler: BaseScheduler) -> None:
        self._scheduler = scheduler

    def call_at(self, job_id: str, when: float, callback: Callback) -> None:
        self._scheduler.add_job(
            callback,
            trigger=DateTrigger(run_date=clocks.to_datetime(when)),
            id=job_id,
            replace_existing=True,
            coalesce=True,
            misfire_grace_time=None,  # late jobs still run
            # APScheduler counts running instances per job id, and a date job skipped for
            # max_instances is deleted, never run. A job re-armed under the same id while its
            # previous fire is still running (a reconcile that requeues at once) must not be
            # skipped; the callbacks are idempotent, so concurrent instances are harmless.
            max_instances=MAX_INSTANCES,
        )

    def cancel(self, job_id: str) -> None:
        with contextlib.suppress(JobLookupError):
            self._scheduler.remove_job(job_id)

    def scheduled(self) -> dict[str, float]:
        return {
            job.id: job.next_run_time.timestamp()
            for job in self._scheduler.get_jobs()
            if job.next_run_time is not None
        }


class ManualTimers:
    """Timers that fire only when :meth:`fire_due` is called; for tests on a fake clock."""

    def __init__(self, clock: clocks.Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._jobs: dict[str, tuple[float, Callback]] = {}

    def call_at(self, job_id: str, when: float, callback: Callback) -> None:
        with self._lock:
            self._jobs[job_id] = (when, callback)

    def cancel(self, job_id: str) -> None:
        with self._lock:
            self._jobs.pop(job_id, None)

    def scheduled(self) -> dict[str, float]:
        with self._lock:
            return {job_id: when for job_id, (when, _) in self._jobs.items()}

    def fire_due(self) -> int:
        """Runs every job due at the clock's current time, in due order; returns how many ran."""
        now = self._clock.now()
        with self._lock:
            due = sorted(
                ((when, job_id, cb) for job_id, (when, cb) in self._jobs.items() if when <= now),
                key=lambda job: job[0],
            )
            for _, job_id, _ in due:
                del self._jobs[job_id]
        for _, _, callback in due:
            callback()
        return len(due)
