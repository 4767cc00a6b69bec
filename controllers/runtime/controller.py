"""The controller loop: sources feed a rate-limited queue; workers reconcile what it hands out.

All reconcile outcomes are dispatched in one place, :meth:`Controller._handle`, following
:mod:`controllers.runtime.reconcile`. A worker never dies of an exception, the reconcile's or
one raised after it (the key is then requeued with backoff). Every reconcile runs under a deadline
that bounds all its API requests (``reconcile_timeout``); a reconcile that overruns it anyway is
reported by a watchdog, once, with its key and duration. The watchdog also sweeps the queue's
delayed adds every second, so a timer fire lost by the scheduler costs a second, not the key.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from dataclasses import dataclass

import structlog

from controllers.runtime import client as clients
from controllers.runtime import clock as clocks
from controllers.runtime import errors, metrics, ratelimiting, timers
from controllers.runtime.metrics import RESULTS
from controllers.runtime.reconcile import Reconciler, Request, Result, TerminalError
from controllers.runtime.sources import Source

log = structlog.get_logger(__name__)


CRASH_RETRY = 1.0
"""Seconds before a key is retried when even its rate-limited requeue failed."""


@dataclass(frozen=True)
class ControllerOptions:
    workers: int = 1
    """Reconciles run at once (distinct objects only). Defaults to 1, as controller-runtime."""
    reconcile_timeout: float = 60.0
    """Seconds a reconcile's API requests may take in all. Defaults to 60."""


@dataclass
class _Active:
    request: Request
    reconcile_id: str
    started: float
    reported: bool = False


class Controller:
    """Reconciles objects of one kind with ``reconciler``, fed by its sources."""

    def __init__(
        self,
        name: str,
        reconciler: Reconciler,
        *,
        timers: timers.Timers,
        metrics: metrics.Metrics,
        options: ControllerOptions | None = None,
        clock: clocks.Clock | None = None,
    ) -> None:
        self.name = name
        self._reconciler = reconciler
        self._metrics = metrics
        self._options = options or ControllerOptions()
        self._clock = clock or clocks.RealClock()
        self.queue: ratelimiting.RateLimitingQueue[Request] = ratelimiting.RateLimitingQueue(
            name=name, timers=timers, metrics=metrics.for_queue(name), clock=self._clock
        )
        self._sources: list[Source] = []
        self._workers: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._active: dict[int, _Active] = {}
        self._active_lock = threading.Lock()
        self._log = log.bind(controller=name)
        # the series of this controller, looked up once: labels() takes a lock and hashes the
        # label values, and every reconcile updates four of them
        m = self._metrics
        labels = m.controller_labels(name)
        self._active_workers = m.active_workers.labels(*labels)
        self._reconcile_time = m.reconcile_time.labels(*labels)
        self._results = {
            result: m.reconcile_total.labels(*m.controller_labels(name, result))
            for result in RESULTS
        }
        self._errors = m.reconcile_errors.labels(*labels)
        self._terminal_errors = m.terminal_errors.labels(*labels)

    def watch(self, source: Source) -> None:
        """Adds a source; must be called before :meth:`start`."""
        self._sources.append(source)

    def start(self) -> None:
        m = self._metrics
        m.max_concurrent.labels(*m.controller_labels(self.name)).set(self._options.workers)
        for source in self._sources:
            source.start(self.queue.add)
        for i in range(self._options.workers):
            worker = threading.Thread(
                target=self._work, args=(i,), name=f"{self.name}-worker-{i}", daemon=True
            )
            self._workers.append(worker)
            worker.start()
        threading.Thread(target=self._watchdog, name=f"{self.name}-watchdog", daemon=True).start()
        self._log.info("controller.started", workers=self._options.workers)

    def stop(self, timeout: float = 30.0) -> bool:
        """Stops taking work and waits up to ``timeout`` in all for in-flight reconciles to finish.

        Returns False if some were still running when the time ran out: they are abandoned, and
        only the end of the process ends them.
        """
        end = time.monotonic() + timeout
        self._stopping.set()
        for source in self._sources:
            source.stop()
        drained = self.queue.shut_down_with_drain(timeout)
        for worker in self._workers:
            worker.join(max(0.0, end - time.monotonic()))
        drained = drained and not any(w.is_alive() for w in self._workers)
        if not drained:
            self._log.warning("controller.stop_timeout", in_flight=self.queue.processing())
        self._log.info("controller.stopped")
        return drained

    def dead_workers(self) -> list[str]:
        """Worker threads that ended while the controller runs (none once it is stopping):
        ``/healthz`` fails on any, so a controller that silently stopped working gets restarted."""
        if self._stopping.is_set():
            return []
        return [w.name for w in self._workers if not w.is_alive()]

    # --- workers -----------------------------------------------------------------------------

    def _work(self, worker_id: int) -> None:
        while True:
            request, shutdown = self.queue.get()
            if shutdown or request is None:
                return
            if self._stopping.is_set():
                self.queue.done(request)  # queued work is dropped on stop; it is level-triggered
                continue
            self._active_workers.inc()
            try:
                self._process(worker_id, request)
            except Exception as exc:  # outside the reconcile (dispatch, queue, metrics): a bug
                self._survive(request, exc)
            finally:
                self._active_workers.dec()
                self.queue.done(request)

    def _survive(self, request: Request, exc: Exception) -> None:
        """Keeps the worker alive and the key queued after an exception outside the reconcile.

        The key is requeued with the rate limiter's backoff (a bug that fails every time must not
        spin); should even that fail, after a fixed :data:`CRASH_RETRY`. Logged with the key and
        the error's type only: the message may quote what the reconcile was handling.
        """
        try:
            self._log.error(
                "worker.unexpected_error",
                namespace=request.namespace,
                name=request.name,
                error_type=type(exc).__name__,
            )
            self.queue.add_rate_limited(request)
        except Exception:
            self.queue.add_after(request, CRASH_RETRY)

    def _process(self, worker_id: int, request: Request) -> None:
        reconcile_id = os.urandom(6).hex()  # as uuid4().hex[:12], without a UUID object
        started = time.monotonic()
        with self._active_lock:
            self._active[worker_id] = _Active(request, reconcile_id, started)
        # bind and reset by token: structlog's bound_contextvars copies the whole context twice
        # (25 µs a reconcile; this is 10)
        tokens = structlog.contextvars.bind_contextvars(
            controller=self.name,
            namespace=request.namespace,
            name=request.name,
            reconcile_id=reconcile_id,
        )
        try:
            self._log.debug("reconcile.started")  # with reconcile.done: when it ran, from logs
            try:
                with clients.deadline(started + self._options.reconcile_timeout):
                    result: Result | BaseException = self._reconciler.reconcile(request)
            except Exception as exc:
                result = exc
            finally:
                with self._active_lock:
                    self._active.pop(worker_id, None)
                self._reconcile_time.observe(time.monotonic() - started)
            self._handle(request, result)
        finally:
            structlog.contextvars.reset_contextvars(**tokens)

    def _handle(self, request: Request, outcome: Result | BaseException) -> None:
        """The one place where a reconcile's outcome becomes queue actions and metrics."""
        total = self._results
        match outcome:
            case TerminalError():
                self.queue.forget(request)
                total["error"].inc()
                self._errors.inc()
                self._terminal_errors.inc()
                self._log.error("reconcile.terminal_error", error=str(outcome))
            case BaseException():
                if getattr(outcome, "requeue_after", None) is not None:
                    self._log.warning(
                        "reconcile.requeue_after_ignored", why="an error requeues with backoff"
                    )
                self.queue.add_rate_limited(request)
                total["error"].inc()
                self._errors.inc()
                transient = isinstance(outcome, errors.ApiError) and outcome.transient
                level = 30 if transient else 40  # warning for transient, error otherwise
                if isinstance(outcome, errors.Conflict):
                    level = 10  # written from a stale cache: routine, the retry re-reads
                self._log.log(
                    level,
                    "reconcile.failed",
                    retries=self.queue.num_requeues(request),
                    **described(outcome, transient=transient),
                )
            case Result(requeue_after=after) if after:
                self.queue.forget(request)
                self.queue.add_after(request, after)
                total["requeue_after"].inc()
                self._log.debug("reconcile.done", requeue_after=round(after, 3))
            case Result():
                # The reconcile saw the whole world and needs no later look: a timer left by an
                # earlier reconcile (a renewal of a policy now deleted) is stale.
                self.queue.cancel(request)
                self.queue.forget(request)
                total["success"].inc()
                self._log.debug("reconcile.done")

    def _watchdog(self) -> None:
        timeout = self._options.reconcile_timeout
        while not self._stopping.wait(1.0):
            self._sweep_timers()
            now = time.monotonic()
            with self._active_lock:
                overdue = [
                    a for a in self._active.values() if not a.reported and now - a.started > timeout
                ]
                for active in overdue:
                    active.reported = True
            for active in overdue:
                self._log.error(
                    "reconcile.overran_timeout",
                    namespace=active.request.namespace,
                    name=active.request.name,
                    reconcile_id=active.reconcile_id,
                    running_for=round(now - active.started, 1),
                    timeout=timeout,
                )

    def _sweep_timers(self) -> None:
        """Adds what a lost timer fire left waiting (:meth:`.DelayingQueue.sweep`): on this
        thread, every second, so no scheduler fault can keep a key from its reconcile."""
        try:
            self.queue.sweep()
        except Exception as exc:  # the watchdog outlives it, and sweeps again in a second
            self._log.error("controller.sweep_failed", error_type=type(exc).__name__)


def described(exc: BaseException, *, transient: bool) -> dict[str, object]:
    """Log fields for a failed reconcile that cannot leak what the reconciler was handling.

    API errors carry the API server's message, which never holds a Secret's data; anything else
    is a bug whose message may quote its input (``UnicodeDecodeError`` quotes the offending
    byte), so it is logged by type and stack frames only.
    """
    if isinstance(exc, errors.ApiError):
        fields: dict[str, object] = {"error": str(exc), "error_type": type(exc).__name__}
        if not transient:
            fields["stack"] = "".join(traceback.format_tb(exc.__traceback__))
        return fields
    return {
        "error": f"unexpected {type(exc).__name__} (message withheld: it may quote input)",
        "error_type": type(exc).__name__,
        "stack": "".join(traceback.format_tb(exc.__traceback__)),
    }
