"""The credential metrics (a contract: DESIGN §4), on the manager's registry.

``rotator_credential_expiration_timestamp_seconds`` and ``..._renewal_timestamp_seconds`` are
what to alert on: expiry minus now below a few minutes means a consumer is about to hold an
expired credential.
"""

from __future__ import annotations

import contextlib
import threading

from prometheus_client import CollectorRegistry, Counter, Gauge

from controllers.runtime.reconcile import Request


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
        self.provider_requests = Counter(
            "rotator_provider_requests_total",
            "Calls to credential providers, by provider, call and response code",
            ["provider", "call", "code"],
            registry=registry,
        )
        self._lock = threading.Lock()
        self._labels: dict[Request, tuple[str, str, str]] = {}

    def served(
        self, request: Request, kind: str, *, expires_at: float | None, renews_at: float | None
    ) -> None:
        labels = (request.namespace, request.name, kind)
        with self._lock:
            previous = self._labels.get(request)
        if previous is not None and previous != labels:
            self.forget(request)
        with self._lock:
            self._labels[request] = labels
        for gauge, value in ((self.expiration, expires_at), (self.renewal, renews_at)):
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
