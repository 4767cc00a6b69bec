"""Prometheus metrics with controller-runtime's names and labels (a contract: docs/api.md, Metrics).

All metrics live on one registry owned by the composition root; nothing is registered globally.
"""

from __future__ import annotations

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
    ) -> None:
        self.registry = registry or CollectorRegistry()
        self.clock = clock or clocks.RealClock()
        r = self.registry
        self.reconcile_total = Counter(
            "controller_runtime_reconcile_total",
            "Total number of reconciliations per controller",
            ["controller", "result"],
            registry=r,
        )
        self.reconcile_errors = Counter(
            "controller_runtime_reconcile_errors_total",
            "Total number of reconciliation errors per controller",
            ["controller"],
            registry=r,
        )
        self.terminal_errors = Counter(
            "controller_runtime_terminal_reconcile_errors_total",
            "Total number of terminal reconciliation errors per controller",
            ["controller"],
            registry=r,
        )
        self.reconcile_time = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            ["controller"],
            buckets=_RECONCILE_BUCKETS,
            registry=r,
        )
        self.active_workers = Gauge(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            ["controller"],
            registry=r,
        )
        self.max_concurrent = Gauge(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            ["controller"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "workqueue_depth", "Current depth of workqueue", ["name", "controller"], registry=r
        )
        self.queue_adds = Counter(
            "workqueue_adds_total",
            "Total number of adds handled by workqueue",
            ["name", "controller"],
            registry=r,
        )
        self.queue_latency = Histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            ["name", "controller"],
            buckets=_QUEUE_BUCKETS,
            registry=r,
        )
        self.work_duration = Histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            ["name", "controller"],
            buckets=_QUEUE_BUCKETS,
            registry=r,
        )
        self.queue_retries = Counter(
            "workqueue_retries_total",
            "Total number of retries handled by workqueue",
            ["name", "controller"],
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

    def for_queue(self, name: str) -> PrometheusQueueMetrics:
        return PrometheusQueueMetrics(self, name)

    def for_requests(self, host: str) -> PrometheusRequestMetrics:
        return PrometheusRequestMetrics(self, host)


class PrometheusQueueMetrics:
    """client-go's queue metrics for one named queue (a ``queue.QueueMetrics``)."""

    def __init__(self, metrics: Metrics, name: str) -> None:
        self._clock = metrics.clock
        self._depth = metrics.queue_depth.labels(name, name)
        self._adds = metrics.queue_adds.labels(name, name)
        self._latency = metrics.queue_latency.labels(name, name)
        self._work = metrics.work_duration.labels(name, name)
        self._retries = metrics.queue_retries.labels(name, name)
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
            self._started_at[item] = now
        if added is not None:
            self._latency.observe(now - added)

    def finished(self, item: Hashable) -> None:
        with self._lock:
            started = self._started_at.pop(item, None)
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
