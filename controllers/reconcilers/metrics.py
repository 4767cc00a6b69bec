"""The credential metrics (a contract: docs/api.md, Metrics), on the manager's registry.

``rotator_credential_expiration_timestamp_seconds`` and ``..._renewal_timestamp_seconds`` are
what to alert on: expiry minus now below a few minutes means a consumer is about to hold an
expired credential. So the expiry comes from the derived Secret on every policy reconcile that
reads one, whatever the refresh then does: a controller restarted while its provider is down still
exports the expiry of what it serves (and, as the renewal time, when it retries).
"""

from __future__ import annotations

import contextlib
import threading

from prometheus_client import CollectorRegistry, Counter, Gauge

from controllers.runtime.reconcile import Request

# The policy types whose credentials rotator mints (rotator_rotations_total's type): their failure
# series exist, at 0, from the start, so that increase() counts a first failure too (a series that
# appears at its first increment has no earlier sample to increase from).
MINTED_TYPES = ("AWSCredentials", "GCPCredentials", "AzureCredentials")


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

    def rotated(self, kind: str, *, ok: bool) -> None:
        self.rotations.labels(kind, "success" if ok else "failure").inc()

    # rotator.observe.Observer
    def provider_request(self, *, provider: str, call: str, code: str) -> None:
        self.provider_requests.labels(provider, call, code).inc()
