"""Timers that fail the way a real scheduler can, for tests of the delaying queue's recovery.

:class:`FlakyTimers` runs on a :class:`~controllers.runtime.clock.FakeClock` like
:class:`~controllers.runtime.timers.ManualTimers`, and a test switches its faults on and off:

* ``fail_call_at`` — arming raises (a scheduler that is shut down or whose job store failed);
* ``fire_due(drop=True)`` — due jobs are removed unrun (APScheduler deletes a date job skipped
  for ``max_instances``, or one its executor refused);
* ``fire_due(hold=True)`` — due jobs are handed to the "executor" but run only at the next
  ``fire_due`` (a fire that comes late, possibly after its record was replaced or swept);
* ``fail_cancel`` — removing a job raises and the job stays (it fires later, stale).

:class:`DroppingTimers` wraps real timers (APScheduler) and loses the fires of selected jobs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from controllers.runtime import clock as clocks
from controllers.runtime.timers import Callback, Timers


class SchedulerFault(RuntimeError):
    """What an injected fault raises."""


class FlakyTimers:
    """:class:`~controllers.runtime.timers.Timers` with injectable faults."""

    def __init__(self, clock: clocks.Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._jobs: dict[str, tuple[float, Callback]] = {}
        self._held: list[Callback] = []
        self.fail_call_at = False
        self.fail_cancel = False
        self.dropped = 0

    def call_at(self, job_id: str, when: float, callback: Callback) -> None:
        if self.fail_call_at:
            raise SchedulerFault("injected: cannot arm a timer")
        with self._lock:
            self._jobs[job_id] = (when, callback)

    def cancel(self, job_id: str) -> None:
        if self.fail_cancel:
            raise SchedulerFault("injected: cannot remove a timer")
        with self._lock:
            self._jobs.pop(job_id, None)

    def scheduled(self) -> dict[str, float]:
        with self._lock:
            return {job_id: when for job_id, (when, _) in self._jobs.items()}

    def fire_due(self, *, drop: bool = False, hold: bool = False) -> int:
        """Runs the fires held back last time, then every job due now, in due order — or drops
        or holds the due ones. Returns how many callbacks ran."""
        now = self._clock.now()
        with self._lock:
            held, self._held = self._held, []
            due = sorted(
                ((when, job_id, cb) for job_id, (when, cb) in self._jobs.items() if when <= now),
                key=lambda job: job[0],
            )
            for _, job_id, _ in due:
                del self._jobs[job_id]
            if drop:
                self.dropped += len(due)
                due = []
            elif hold:
                self._held = [cb for _, _, cb in due]
                due = []
        callbacks = held + [cb for _, _, cb in due]
        for callback in callbacks:
            callback()
        return len(callbacks)


class DroppingTimers:
    """Real timers whose fires are lost for the job ids ``drops`` selects: the job still runs,
    and does nothing (as a date job APScheduler skipped and deleted). For tests that the
    delaying queue's sweep, not the scheduler, is what keeps a key from being lost."""

    def __init__(self, inner: Timers, drops: Callable[[str], bool]) -> None:
        self._inner = inner
        self._drops = drops
        self._lock = threading.Lock()
        self.lost: list[str] = []

    def call_at(self, job_id: str, when: float, callback: Callback) -> None:
        if self._drops(job_id):
            callback = self._lost(job_id)
        self._inner.call_at(job_id, when, callback)

    def cancel(self, job_id: str) -> None:
        self._inner.cancel(job_id)

    def scheduled(self) -> dict[str, float]:
        return self._inner.scheduled()

    def _lost(self, job_id: str) -> Callback:
        def lost() -> None:
            with self._lock:
                self.lost.append(job_id)

        return lost
