"""Prometheus metrics with controller-runtime's names and labels (a contract: docs/api.md, Metrics).

All metrics live on one registry owned by the composition root; nothing is registered globally.

A sharded replica (``rotator run --shards N``) runs one set of controllers per shard it holds,
under the same controller names: its per-controller families carry one more label, ``shard``
(the shard's index), and a shard's series go when the replica gives it up
(:meth:`Metrics.for_shard`, :meth:`Metrics.forget_controller`) — a replica that no longer works
on a shard must not export a frozen queue depth or worker count for it. A replica without shards
has no such label: its exposition is exactly controller-runtime's.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Hashable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from controllers.runtime import clock as clocks

_RECONCILE_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8,
    0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30,
    40, 50, 60,
)  # fmt: skip
_QUEUE_BUCKETS = tuple(10.0**e for e in range(-8, 4))  # 10 ns … 1000 s, as client-go
RESULTS = ("success", "error", "requeue", "requeue_after")
"""controller_runtime_reconcile_total's ``result`` values."""


class Metrics:
    """Every runtime metric family, on ``registry``. controller-runtime's and client-go's keep
    their names; the runtime's own (dropped Events) are named
    ``<prefix>_…`` by the application that owns the process."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        prefix: str = "controller",
        clock: clocks.Clock | None = None,
        sharded: bool = False,
    ) -> None:
        self.registry = registry or CollectorRegistry()
        self.clock = clock or clocks.RealClock()
        self.sharded = sharded
        self._scope: tuple[str, ...] = ()  # the shard label's value, in a for_shard() view
        r = self.registry
        shard = ["shard"] if sharded else []
        self.reconcile_total = Counter(
            "controller_runtime_reconcile_total",
            "Total number of reconciliations per controller",
            ["controller", "result", *shard],
            registry=r,
        )
        self.reconcile_errors = Counter(
            "controller_runtime_reconcile_errors_total",
            "Total number of reconciliation errors per controller",
            ["controller", *shard],
            registry=r,
        )
        self.terminal_errors = Counter(
            "controller_runtime_terminal_reconcile_errors_total",
            "Total number of terminal reconciliation errors per controller",
            ["controller", *shard],
            registry=r,
        )
        self.reconcile_time = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            ["controller", *shard],
            buckets=_RECONCILE_BUCKETS,
            registry=r,
        )
        self.active_workers = Gauge(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            ["controller", *shard],
            registry=r,
        )
        self.max_concurrent = Gauge(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            ["controller", *shard],
            registry=r,
        )
        self.queue_depth = Gauge(
            "workqueue_depth",
            "Current depth of workqueue",
            ["name", "controller", *shard],
            registry=r,
        )
        self.queue_adds = Counter(
            "workqueue_adds_total",
            "Total number of adds handled by workqueue",
            ["name", "controller", *shard],
            registry=r,
        )
        self.queue_latency = Histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            ["name", "controller", *shard],
            buckets=_QUEUE_BUCKETS,
            registry=r,
        )
        self.work_duration = Histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            ["name", "controller", *shard],
            buckets=_QUEUE_BUCKETS,
            registry=r,
        )
        self.queue_retries = Counter(
            "workqueue_retries_total",
            "Total number of retries handled by workqueue",
            ["name", "controller", *shard],
            registry=r,
        )
        self.leader = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates "
            "backup, 1 indicates master. 'name' is the string used to identify the lease.",
            ["name"],
            registry=r,
        )
        self.rest_requests = Counter(
            "rest_client_requests_total",
            "Number of HTTP requests, partitioned by status code, method, and host",
            ["code", "method", "host"],
            registry=r,
        )
        self.rest_latency = Histogram(
            "rest_client_request_duration_seconds",
            "Request latency in seconds, by verb",
            ["verb"],
            registry=r,
        )
        self.events_dropped = Counter(
            f"{prefix}_events_dropped_total",
            "Kubernetes Events not recorded: the recorder's buffer was full, the object's Events "
            "were throttled, the API refused them, or they were unsent at stop",
            registry=r,
        )

    def for_shard(self, index: int) -> Metrics:
        """The same families, for the controllers of shard ``index`` (their ``shard`` label)."""
        if not self.sharded:
            raise ValueError(
                "for_shard() needs Metrics(sharded=True): the families have no shard label"
            )
        view = copy.copy(self)
        view._scope = (str(index),)
        return view

    def controller_labels(self, controller: str, *middle: str) -> tuple[str, ...]:
        """The label values of ``controller``'s series (``middle``: a ``result``), in this view."""
        return (controller, *middle, *self._scope)

    def queue_labels(self, name: str) -> tuple[str, ...]:
        return (name, name, *self._scope)

    def forget_controller(self, controller: str) -> None:
        """Removes every series of ``controller`` in this view (a shard given up)."""
        removals: list[tuple[Gauge | Counter | Histogram, tuple[str, ...]]] = [
            (family, self.controller_labels(controller))
            for family in (
                self.reconcile_errors,
                self.terminal_errors,
                self.reconcile_time,
                self.active_workers,
                self.max_concurrent,
            )
        ]
        removals += [
            (self.reconcile_total, self.controller_labels(controller, result)) for result in RESULTS
        ]
        removals += [
            (family, self.queue_labels(controller))
            for family in (
                self.queue_depth,
                self.queue_adds,
                self.queue_latency,
                self.work_duration,
                self.queue_retries,
            )
        ]
        for family, labels in removals:
            with contextlib.suppress(KeyError):
                family.remove(*labels)

    def for_queue(self, name: str) -> PrometheusQueueMetrics:
        return PrometheusQueueMetrics(self, name)

    def for_requests(self, host: str) -> PrometheusRequestMetrics:
        return PrometheusRequestMetrics(self, host)


class PrometheusQueueMetrics:
    """client-go's queue metrics for one named queue (a ``queue.QueueMetrics``)."""

    def __init__(self, metrics: Metrics, name: str) -> None:
        self._clock = metrics.clock
        labels = metrics.queue_labels(name)
        self._depth = metrics.queue_depth.labels(*labels)
        self._adds = metrics.queue_adds.labels(*labels)
        self._latency = metrics.queue_latency.labels(*labels)
        self._work = metrics.work_duration.labels(*labels)
        self._retries = metrics.queue_retries.labels(*labels)
        self._lock = threading.Lock()
        self._added_at: dict[Hashable, float] = {}
        self._started_at: dict[Hashable, float] = {}

    def added(self, item: Hashable) -> None:
        with self._lock:
            self._adds.inc()
            self._depth.inc()
            self._added_at.setdefault(item, self._clock.monotonic())

    def taken(self, item: Hashable) -> None:
        now = self._clock.monotonic()
        with self._lock:
            self._depth.dec()
            added = self._added_at.pop(item, None)
            if not self._added_at:
                self._added_at = {}  # a dict's table never shrinks as keys leave (queue.py)
            self._started_at[item] = now
        if added is not None:
            self._latency.observe(now - added)

    def finished(self, item: Hashable) -> None:
        with self._lock:
            started = self._started_at.pop(item, None)
            if not self._started_at:
                self._started_at = {}
        if started is not None:
            self._work.observe(self._clock.monotonic() - started)

    def retried(self) -> None:
        self._retries.inc()


class PrometheusRequestMetrics:
    """client-go's REST client metrics for one API server (a ``client.RequestMetrics``)."""

    def __init__(self, metrics: Metrics, host: str) -> None:
        self._metrics = metrics
        self._host = host

    def request_done(self, *, method: str, code: str, seconds: float) -> None:
        self._metrics.rest_requests.labels(code, method, self._host).inc()
        self._metrics.rest_latency.labels(method).observe(seconds)
