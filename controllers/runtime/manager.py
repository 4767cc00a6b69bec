"""The manager: runs the cache, the controllers, leader election, probes and metrics together.

Start order: metrics and probe servers (so ``/healthz`` answers at once), the APScheduler timers,
the event recorder, the informers; then, once every informer has synced, the controllers — right
away, or after winning leader election. ``/readyz`` fails until the caches have synced.

Stop order (SIGTERM, or ``stop`` set): controllers stop taking work and finish in-flight
reconciles (up to ``graceful_shutdown_timeout`` in all) while the lease is still renewed; only
then is the lease released, so a successor starts no sooner than the last reconcile here ended.
If a reconcile is still running when the time is up it is abandoned, the lease is *not* released
(the successor waits for it to expire) and :meth:`Manager.run` returns 1: the caller must end the
process at once, which ends the abandoned reconcile.

Losing leadership is fatal and gets no grace (controller-runtime sets its shutdown timeout to
zero): the controllers are told to stop taking work, nothing is waited for, and
:meth:`Manager.run` returns 1 at once, for the caller to end the process (``rotator run`` does
so with ``os._exit``, so no reconcile outlives the lease). Leadership is lost when the elector
says so, when its thread ends for any reason, or when the renew deadline passes while the
elector is stuck.

``/healthz`` fails when the elector's thread or a controller's worker thread has ended.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from datetime import UTC

import structlog
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler

from controllers.runtime import cache as caches
from controllers.runtime import client as clients
from controllers.runtime import clock as clocks
from controllers.runtime import controller as controllers
from controllers.runtime import (
    events,
    health,
    heap,
    leaderelection,
    metricsauth,
    reconcile,
    timers,
    tlsserving,
)
from controllers.runtime import metrics as metric_families
from controllers.runtime.informer import InformerOptions

log = structlog.get_logger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1


@dataclass(frozen=True)
class ManagerOptions:
    namespaces: tuple[str, ...] = ()
    """Namespaces to watch; empty means all. Defaults to all."""
    metrics_bind_address: str = ":8080"
    """Where ``/metrics`` is served; ``"0"`` disables. Defaults to ``:8080``."""
    metrics_secure: bool = False
    """Serve metrics over HTTPS, and only to bearer tokens the API server authenticates and
    authorizes for the path (:mod:`.metricsauth`), as kubebuilder's ``--metrics-secure``.
    Defaults to False (plain HTTP to anyone), as controller-runtime's ``SecureServing``."""
    metrics_cert_dir: str = ""
    """With ``metrics_secure``: the folder of ``tls.crt`` and ``tls.key`` (re-read when they
    change). Defaults to empty: a self-signed certificate made at start."""
    health_probe_bind_address: str = ":8081"
    """Where ``/healthz`` and ``/readyz`` are served; ``"0"`` disables. Defaults to ``:8081``."""
    leader_election: leaderelection.LeaderElectionOptions | None = None
    """Campaign for this Lease before starting controllers; None runs them at once."""
    graceful_shutdown_timeout: float = 30.0
    """Seconds in-flight reconciles get to finish on stop. Defaults to 30."""
    cache_sync_timeout: float = 120.0
    """Seconds to wait for informers to sync before giving up. Defaults to 120."""
    informer: InformerOptions = field(default_factory=InformerOptions)
    component: str = "rotator"
    """Name reported on Events. Defaults to ``rotator``."""
    identity: str = "rotator"
    """This process, for Events (``reportingInstance``)."""
    freeze_heap: bool = False
    """Pause the cyclic garbage collector while the caches sync and freeze what they loaded
    (:mod:`.heap`): process-wide, so for the composition root (``rotator run`` sets it), not
    for a manager inside a test's process. Defaults to False."""


class Manager:
    """Owns the shared parts every controller uses; build controllers with it, then :meth:`run`."""

    def __init__(
        self,
        api: clients.Client,
        options: ManagerOptions,
        *,
        metrics: metric_families.Metrics,
        clock: clocks.Clock | None = None,
    ) -> None:
        self.api = api
        self.options = options
        self.metrics = metrics
        self.clock = clock or clocks.RealClock()
        """The time source of the manager, its cache and the controllers it builds."""
        self.cache = caches.Cache(
            api, namespaces=options.namespaces, options=options.informer, clock=self.clock
        )
        self.scheduler = BackgroundScheduler(
            timezone=UTC, executors={"default": ThreadPoolExecutor(4)}
        )
        self.timers = timers.APSchedulerTimers(self.scheduler)
        self.recorder = events.EventRecorder(
            api, component=options.component, instance=options.identity, metrics=metrics
        )
        self.probes = health.Probes()
        self._controllers: list[controllers.Controller] = []
        self._servers: list[health.Server] = []
        self._lost = threading.Event()
        self._controllers_started = threading.Event()
        self._lifecycle = threading.Lock()  # orders starting controllers against stopping
        self._stopping = False
        self._elector: leaderelection.LeaderElector | None = None
        self._elector_thread: threading.Thread | None = None
        self._elector_stop = threading.Event()  # set once the controllers have stopped

    def new_controller(
        self,
        name: str,
        reconciler: reconcile.Reconciler,
        options: controllers.ControllerOptions | None = None,
    ) -> controllers.Controller:
        controller = controllers.Controller(
            name,
            reconciler,
            timers=self.timers,
            metrics=self.metrics,
            options=options,
            clock=self.clock,
        )
        self._controllers.append(controller)
        return controller

    @property
    def servers(self) -> list[health.Server]:
        return list(self._servers)

    def run(self, stop: threading.Event) -> int:
        """Runs until ``stop`` is set or leadership is lost; returns the process exit code.

        EXIT_FAILED means the process must end now: leadership was lost, the caches never
        synced, or a reconcile was abandoned at the end of the graceful stop.
        """
        self.probes.add_healthz("ping", lambda: None)
        for controller in self._controllers:
            self.probes.add_healthz(
                f"controller-{controller.name}", health.none_ended(controller.dead_workers)
            )
        self.probes.add_readyz("informers", self._informers_ready)
        self._start_servers()
        self.scheduler.start()
        self.recorder.start()
        failed = False
        try:
            if self._start_cache(stop):
                le = self.options.leader_election
                if le is None:
                    self._start_controllers()
                else:
                    self._start_elector(le)
                self._wait(stop)
            else:
                failed = not stop.is_set()
        finally:
            drained = self._shutdown()
        return EXIT_FAILED if failed or self._lost.is_set() or not drained else EXIT_OK

    def _start_cache(self, stop: threading.Event) -> bool:
        """Starts the informers and waits for them to sync; False if they did not in time."""
        with heap.loading() if self.options.freeze_heap else contextlib.nullcontext():
            self.cache.start()
            return self._wait_for_sync(stop)

    def _start_elector(self, le: leaderelection.LeaderElectionOptions) -> None:
        elector = leaderelection.LeaderElector(
            self.api,
            le,
            on_started=self._start_controllers,
            on_lost=self._lost.set,
            report=lambda leading: self.metrics.leader.labels(le.name).set(int(leading)),
        )
        thread = threading.Thread(
            target=elector.run, args=(self._elector_stop,), name="leader-election", daemon=True
        )
        self._elector, self._elector_thread = elector, thread
        self.probes.add_healthz("leader-election", self._elector_healthy)
        thread.start()

    def _elector_healthy(self) -> str | None:
        if self._elector is not None and self._elector.overdue():
            return "past the renew deadline"
        return health.thread_running(lambda: self._elector_thread, until=self._elector_stop)()

    def _wait(self, stop: threading.Event) -> None:
        """Until ``stop`` or the loss of leadership, which wakes it at once."""
        while not stop.is_set():
            if self._leadership_lost(0.1):
                return

    def _leadership_lost(self, wait: float) -> bool:
        """Waits up to ``wait`` for the elector to report the loss; also declares it lost when
        its thread has ended or it is past the renew deadline (stuck in a request)."""
        if self._lost.wait(wait):
            return True
        problem = self._elector_thread is not None and self._elector_healthy()
        if problem:
            log.error("leader.lost", why=problem)
            self._lost.set()
        return self._lost.is_set()

    def _informers_ready(self) -> str | None:
        pending = self.cache.unsynced()
        return f"not synced: {', '.join(pending)}" if pending else None

    def _wait_for_sync(self, stop: threading.Event) -> bool:
        deadline = self.clock.monotonic() + self.options.cache_sync_timeout
        while not self.cache.wait_for_sync(0.5):
            if stop.is_set():
                return False
            if self.clock.monotonic() > deadline:
                log.error(
                    "manager.cache_sync_timeout",
                    unsynced=self.cache.unsynced(),
                    timeout=self.options.cache_sync_timeout,
                )
                return False
        log.info("manager.caches_synced")
        return True

    def _start_controllers(self) -> None:
        with self._lifecycle:
            if self._stopping:
                return  # won the election while stopping: the lease is released unused
            for controller in self._controllers:
                controller.start()
            self._controllers_started.set()

    def _start_servers(self) -> None:
        for address, make in (
            (self.options.metrics_bind_address, self._metrics_server),
            (self.options.health_probe_bind_address, self._probe_server),
        ):
            bind = health.parse_bind_address(address)
            if bind is not None:
                server = make(bind)
                server.start()
                self._servers.append(server)

    def _metrics_server(self, bind: tuple[str, int]) -> health.Server:
        if not self.options.metrics_secure:
            server = health.metrics_server(bind, self.metrics.registry)
            log.info("manager.serving", what="metrics", address=f"{bind[0]}:{server.port}")
            return server
        cert_dir = self.options.metrics_cert_dir
        certificates: tlsserving.Certificates = (
            tlsserving.CertificateDir(cert_dir) if cert_dir else tlsserving.SelfSigned()
        )
        server = health.metrics_server(
            bind, self.metrics.registry, tls=certificates, auth=metricsauth.Filter(self.api)
        )
        log.info(
            "manager.serving",
            what="metrics",
            address=f"{bind[0]}:{server.port}",
            scheme="https",
            certificate=cert_dir or "self-signed",
            access="TokenReview+SubjectAccessReview",
        )
        return server

    def _probe_server(self, bind: tuple[str, int]) -> health.Server:
        server = health.probe_server(bind, self.probes)
        log.info("manager.serving", what="probes", address=f"{bind[0]}:{server.port}")
        return server

    def _shutdown(self) -> bool:
        """Stops everything in order; False if a reconcile was abandoned or leadership lost."""
        lost = self._lost.is_set()
        log.info("manager.stopping", leadership_lost=lost)
        with self._lifecycle:
            self._stopping = True
            started = self._controllers_started.is_set()
        if lost:
            # No grace: the lease may be someone else's by now. Stop handing out work (on a
            # thread of its own: a source's stop may take a moment) and return at once; the
            # caller ends the process, and with it any reconcile still running.
            def stop_taking_work() -> None:
                for controller in self._controllers if started else ():
                    controller.stop(0.0)

            threading.Thread(target=stop_taking_work, name="stop-on-loss", daemon=True).start()
            log.info("manager.stopped", leadership_lost=True)
            return False
        drained = not started or self._stop_controllers(self.options.graceful_shutdown_timeout)
        if self._lost.is_set():
            log.info("manager.stopped", leadership_lost=True)
            return False
        self._stop_elector(release=drained)
        self.recorder.stop()
        self.scheduler.shutdown(wait=False)
        self.cache.stop()
        for server in self._servers:
            server.stop()
        log.info("manager.stopped", drained=drained, leadership_lost=self._lost.is_set())
        return drained and not self._lost.is_set()

    def _stop_controllers(self, timeout: float) -> bool:
        """Stops every controller at once and waits up to ``timeout`` for their in-flight
        reconciles, while the elector keeps renewing; gives up at once if leadership is lost
        meanwhile. True if every reconcile finished."""
        results: dict[str, bool] = {}

        def stop(controller: controllers.Controller) -> None:
            results[controller.name] = controller.stop(timeout)

        threads = [
            threading.Thread(target=stop, args=(c,), name=f"stop-{c.name}", daemon=True)
            for c in self._controllers
        ]
        for thread in threads:
            thread.start()
        end = self.clock.monotonic() + timeout + 1.0  # each stop() keeps to timeout itself
        for thread in threads:
            while thread.is_alive() and self.clock.monotonic() < end:
                if self._leadership_lost(0.05):
                    log.error("manager.stop_abandoned", why="leadership lost while stopping")
                    return False
                thread.join(0.05)
        drained = len(results) == len(threads) and all(results.values())
        if not drained:
            log.warning("manager.reconciles_abandoned", timeout=timeout)
        return drained

    def _stop_elector(self, *, release: bool) -> None:
        """Ends the campaign or the renewals, then releases the lease if every reconcile ended
        (otherwise a successor waits for it to expire, and this process exits first)."""
        elector, thread, le = self._elector, self._elector_thread, self.options.leader_election
        if elector is None or thread is None or le is None:
            return
        self._elector_stop.set()
        thread.join(le.renew_deadline)  # a renew attempt in flight is bounded by it
        if thread.is_alive() or self._lost.is_set():
            return
        if release and le.release_on_stop:
            elector.release()
