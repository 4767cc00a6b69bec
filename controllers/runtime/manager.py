"""The manager: runs the cache, the controllers, leader election, probes and metrics together.

Start order: metrics and probe servers (so ``/healthz`` answers at once), the APScheduler timers,
the event recorder, the informers; then, once every informer has synced, the controllers — right
away, or after winning leader election. ``/readyz`` fails until the caches have synced.

Stop order (SIGTERM, or ``stop`` set): controllers stop taking work and finish in-flight
reconciles (up to ``graceful_shutdown_timeout``), the lease is released, then everything else.
Losing leadership is fatal: :meth:`Manager.run` returns exit code 1 so the process restarts
clean, as controller-runtime does.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import UTC

import structlog
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler

from controllers.runtime import cache as caches
from controllers.runtime import channel as channels
from controllers.runtime import client as clients
from controllers.runtime import controller as controllers
from controllers.runtime import events, health, leaderelection, reconcile, timers
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


class Manager:
    """Owns the shared parts every controller uses; build controllers with it, then :meth:`run`."""

    def __init__(
        self,
        api: clients.Client,
        options: ManagerOptions,
        *,
        metrics: metric_families.Metrics,
    ) -> None:
        self.api = api
        self.options = options
        self.metrics = metrics
        self.cache = caches.Cache(api, namespaces=options.namespaces, options=options.informer)
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

    def new_controller(
        self,
        name: str,
        reconciler: reconcile.Reconciler,
        options: controllers.ControllerOptions | None = None,
    ) -> controllers.Controller:
        controller = controllers.Controller(
            name, reconciler, timers=self.timers, metrics=self.metrics, options=options
        )
        self._controllers.append(controller)
        return controller

    def new_channel(self, name: str, capacity: int = 1024) -> channels.Channel[reconcile.Request]:
        return channels.Channel(name, capacity=capacity, metrics=self.metrics)

    @property
    def servers(self) -> list[health.Server]:
        return list(self._servers)

    def run(self, stop: threading.Event) -> int:
        """Runs until ``stop`` is set or leadership is lost; returns the process exit code."""
        self.probes.add_healthz("ping", lambda: None)
        self.probes.add_readyz("informers", self._informers_ready)
        self._start_servers()
        self.scheduler.start()
        self.recorder.start()
        self.cache.start()
        elector_thread: threading.Thread | None = None
        code = EXIT_OK
        try:
            if not self._wait_for_sync(stop):
                return EXIT_FAILED if not stop.is_set() else EXIT_OK
            le = self.options.leader_election
            if le is None:
                self._start_controllers()
            else:
                elector = leaderelection.LeaderElector(
                    self.api,
                    le,
                    on_started=self._start_controllers,
                    on_lost=self._lost.set,
                    report=lambda leading: self.metrics.leader.labels(le.name).set(int(leading)),
                )
                elector_thread = threading.Thread(
                    target=elector.run, args=(stop,), name="leader-election", daemon=True
                )
                elector_thread.start()
            while not stop.wait(0.5):
                if self._lost.is_set():
                    code = EXIT_FAILED
                    break
        finally:
            self._shutdown(stop, elector_thread)
        return code

    def _informers_ready(self) -> str | None:
        pending = self.cache.unsynced()
        return f"not synced: {', '.join(pending)}" if pending else None

    def _wait_for_sync(self, stop: threading.Event) -> bool:
        deadline = time.monotonic() + self.options.cache_sync_timeout
        while not self.cache.wait_for_sync(0.5):
            if stop.is_set():
                return False
            if time.monotonic() > deadline:
                log.error(
                    "manager.cache_sync_timeout",
                    unsynced=self.cache.unsynced(),
                    timeout=self.options.cache_sync_timeout,
                )
                return False
        log.info("manager.caches_synced")
        return True

    def _start_controllers(self) -> None:
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
        server = health.metrics_server(bind, self.metrics.registry)
        log.info("manager.serving", what="metrics", address=f"{bind[0]}:{server.port}")
        return server

    def _probe_server(self, bind: tuple[str, int]) -> health.Server:
        server = health.probe_server(bind, self.probes)
        log.info("manager.serving", what="probes", address=f"{bind[0]}:{server.port}")
        return server

    def _shutdown(self, stop: threading.Event, elector_thread: threading.Thread | None) -> None:
        log.info("manager.stopping")
        stop.set()
        grace = self.options.graceful_shutdown_timeout
        end = time.monotonic() + grace
        if self._controllers_started.is_set():
            for controller in self._controllers:
                controller.stop(max(0.1, end - time.monotonic()))
        if elector_thread is not None:
            elector_thread.join(max(0.1, end - time.monotonic()))  # releases the lease
        self.recorder.stop()
        self.scheduler.shutdown(wait=False)
        self.cache.stop()
        for server in self._servers:
            server.stop()
        log.info("manager.stopped")
