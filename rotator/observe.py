"""What the engine reports about its calls to providers; the controller turns it into metrics.

(The engine imports no metrics library: ``rotator_provider_requests_total`` lives in
``controllers.reconcilers``.)
"""

from __future__ import annotations

from typing import Protocol


class Observer(Protocol):
    def provider_request(self, *, provider: str, call: str, code: str) -> None:
        """One call to ``provider`` (``aws-sts``, ``oidc``…), ended with ``code`` (an HTTP status,
        a provider error code, an exception name, or ``DeadlineExceeded``): exactly one per
        call that reached the provider (:mod:`rotator.providercalls`)."""
        ...


class NoObserver:
    def provider_request(self, *, provider: str, call: str, code: str) -> None:
        pass
