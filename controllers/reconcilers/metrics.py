"""rotator's own metrics (a contract: docs/api.md, Metrics), on the manager's registry: the
credentials' (:class:`CredentialMetrics`, also the engine's provider-call observer) and the Route
controller's (:class:`RouteMetrics`).

``rotator_credential_expiration_timestamp_seconds`` and ``..._renewal_timestamp_seconds`` are
what to alert on: expiry minus now below a few minutes means a consumer is about to hold an
expired credential. So the expiry comes from the derived Secret on every policy reconcile that
reads one, whatever the refresh then does: a controller restarted while its provider is down still
exports the expiry of what it serves (and, as the renewal time, when it retries).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from controllers.runtime.reconcile import Request

# The policy types whose credentials rotator mints (rotator_rotations_total's type): their failure
# series exist, at 0, from the start, so that increase() counts a first failure too (a series that
# appears at its first increment has no earlier sample to increase from).
MINTED_TYPES = ("AWSCredentials", "GCPCredentials", "AzureCredentials")

PROVIDER_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Seconds: a token endpoint answers in milliseconds to a second; botocore's bounds (5 s connect,
10 s read, two attempts) and rotator.providercalls.DEADLINE (30 s) are the slow end."""


class CredentialMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.expiration = Gauge(
            "rotator_credential_expiration_timestamp_seconds",
            "When the credential served for a BackendSecurityPolicy expires (Unix time)",
            ["namespace", "name", "type"],
            registry=registry,
        )
        self.renewal = Gauge(
            "rotator_credential_renewal_timestamp_seconds",
            "When rotator will next refresh the credential of a BackendSecurityPolicy (Unix time)",
            ["namespace", "name", "type"],
            registry=registry,
        )
        self.rotations = Counter(
            "rotator_rotations_total",
            "Credential refreshes, by policy type and result (success or failure)",
            ["type", "result"],
            registry=registry,
        )
        for kind in MINTED_TYPES:
            self.rotations.labels(kind, "failure")
        self.provider_requests = Counter(
            "rotator_provider_requests_total",
            "Calls to credential providers, by provider, call and response code",
            ["provider", "call", "code"],
            registry=registry,
        )
        self.provider_duration = Histogram(
            "rotator_provider_request_duration_seconds",
            "Time calls to credential providers took, by provider and call",
            ["provider", "call"],
            buckets=PROVIDER_DURATION_BUCKETS,
            registry=registry,
        )
        self._lock = threading.Lock()
        self._labels: dict[Request, tuple[str, str, str]] = {}

    def observed(self, request: Request, kind: str, *, expires_at: float | None) -> None:
        """The expiry of the credential the derived Secret holds, as soon as a reconcile reads
        it: set before any refresh can fail, so the expiry alert sees a credential that every
        refresh since a restart failed to replace."""
        if expires_at is None:  # never expires: no expiration series, and no labels kept for it
            with self._lock:
                labels = self._labels.get(request)
            if labels is not None:
                self._set(self.expiration, labels, None)
            return
        labels = self._relabel(request, kind)
        self._set(self.expiration, labels, expires_at)

    def served(
        self, request: Request, kind: str, *, expires_at: float | None, renews_at: float | None
    ) -> None:
        """The credential now served, and when it is next refreshed (or the next retry is)."""
        if expires_at is None and renews_at is None:
            # No series, so no labels kept: 0.25 KB per API-key policy, at 10,000 of them
            self.forget(request)
            return
        labels = self._relabel(request, kind)
        self._set(self.expiration, labels, expires_at)
        self._set(self.renewal, labels, renews_at)

    def _relabel(self, request: Request, kind: str) -> tuple[str, str, str]:
        """The policy's labels, dropping its series under old ones (its type changed)."""
        labels = (request.namespace, request.name, kind)
        with self._lock:
            previous = self._labels.get(request)
        if previous is not None and previous != labels:
            self.forget(request)
        with self._lock:
            self._labels[request] = labels
        return labels

    @staticmethod
    def _set(gauge: Gauge, labels: tuple[str, str, str], value: float | None) -> None:
        if value is None:
            with contextlib.suppress(KeyError):
                gauge.remove(*labels)
        else:
            gauge.labels(*labels).set(value)

    def forget(self, request: Request) -> None:
        """The policy is gone: its series go too."""
        with self._lock:
            labels = self._labels.pop(request, None)
        if labels is None:
            return
        for gauge in (self.expiration, self.renewal):
            with contextlib.suppress(KeyError):
                gauge.remove(*labels)

    def forget_namespaces(self, holds: Callable[[str], bool]) -> None:
        """The series of every policy in a namespace ``holds`` says yes to go (a shard given
        up: another replica serves them now)."""
        with self._lock:
            gone = [request for request in self._labels if holds(request.namespace)]
        for request in gone:
            self.forget(request)

    def rotated(self, kind: str, *, ok: bool) -> None:
        self.rotations.labels(kind, "success" if ok else "failure").inc()

    # rotator.observe.Observer
    def provider_request(self, *, provider: str, call: str, code: str, seconds: float) -> None:
        self.provider_requests.labels(provider, call, code).inc()
        self.provider_duration.labels(provider, call).observe(max(0.0, seconds))


# rotator_route_rollouts_total's kinds (rolloutRestartTargets' enum: route.restarts.WORKLOADS) and
# results: each kind's failure series exists at 0 from the start, so increase() counts a first one.
ROLLOUT_KINDS = ("Deployment", "StatefulSet", "DaemonSet")
ROLLOUT_SUCCESS = "success"
ROLLOUT_FAILURE = "failure"


class RouteMetrics:
    """The Route controller's: config Secret writes, rollout patches, and the Routes whose
    ``rolloutRestartTargets`` run a configuration older than their config Secret's."""

    def __init__(self, registry: CollectorRegistry, *, formats: Iterable[str] = ()) -> None:
        self.config_writes = Counter(
            "rotator_route_config_writes_total",
            "Route config Secrets written (created or changed), by output format",
            ["format"],
            registry=registry,
        )
        for name in formats:  # at 0 from the start: increase() counts each format's first write
            self.config_writes.labels(name)
        self.rollouts = Counter(
            "rotator_route_rollouts_total",
            "Rollout patches of rolloutRestartTargets, by workload kind and result",
            ["kind", "result"],
            registry=registry,
        )
        for kind in ROLLOUT_KINDS:
            self.rollouts.labels(kind, ROLLOUT_FAILURE)
        self.pending = Gauge(
            "rotator_route_rollouts_pending",
            "1 while a Route's rolloutRestartTargets run a configuration older than the one in "
            "its config Secret, else 0",
            ["namespace", "route"],
            registry=registry,
        )
        self._lock = threading.Lock()
        self._routes: set[tuple[str, str]] = set()  # the pending series' labels

    def config_written(self, fmt: str) -> None:
        self.config_writes.labels(fmt).inc()

    def rolled_out(self, kind: str, *, ok: bool) -> None:
        self.rollouts.labels(kind, ROLLOUT_SUCCESS if ok else ROLLOUT_FAILURE).inc()

    def rollout_pending(self, namespace: str, route: str, pending: bool) -> None:
        with self._lock:
            self._routes.add((namespace, route))
        self.pending.labels(namespace, route).set(1 if pending else 0)

    def forget_route(self, namespace: str, route: str) -> None:
        """The Route is gone, or has no targets: its series goes."""
        with self._lock:
            self._routes.discard((namespace, route))
        with contextlib.suppress(KeyError):
            self.pending.remove(namespace, route)

    def forget_namespaces(self, holds: Callable[[str], bool]) -> None:
        """The series of every Route in a namespace ``holds`` says yes to go (a shard given up)."""
        with self._lock:
            gone = [key for key in self._routes if holds(key[0])]
        for namespace, route in gone:
            self.forget_route(namespace, route)
