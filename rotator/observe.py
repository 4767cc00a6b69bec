"""What the engine reports about its calls to providers; the controller turns it into metrics.

(The engine imports no metrics library: ``rotator_provider_requests_total`` and
``rotator_provider_request_duration_seconds`` live in ``controllers.reconcilers``.)
"""

from __future__ import annotations

from typing import Protocol


class Observer(Protocol):
    def provider_request(self, *, provider: str, call: str, code: str, seconds: float) -> None:
        """One call to ``provider`` (``aws-sts``, ``oidc``…), ended with ``code`` (an HTTP status,
        a provider error code, an exception name, or ``DeadlineExceeded``) after ``seconds``
        (from the moment it held its bulkhead slot until its answer, or until its caller stopped
        waiting at the deadline): exactly one per call that reached the provider
        (:mod:`rotator.providercalls`)."""
        ...


class NoObserver:
    def provider_request(self, *, provider: str, call: str, code: str, seconds: float) -> None:
        pass
