"""What GCP providers share: endpoints, an HTTP transport with a timeout whose calls are fenced by
:mod:`rotator.providercalls` (bulkhead, deadline, one observation), and google-auth's errors
classified once (:func:`classify`: messages keep the OAuth error code, never a body).

This module imports google-auth and requests: only the minting modules import it, and they load
on the first GCP call. The endpoints live in :mod:`~rotator.providers.gcp.endpoints`, which
imports no SDK (the composition root needs them at start-up), and are re-exported here."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import google.auth.exceptions
import google.auth.transport.requests
import requests

from rotator import providercalls
from rotator.observe import Observer
from rotator.providercalls import Failure, ProviderCalls
from rotator.providers.gcp.endpoints import Endpoints, impersonation_url

__all__ = [
    "DATA_KEY",
    "PROVIDER",
    "SCOPES",
    "TRANSIENT_CODES",
    "Endpoints",
    "TimedRequest",
    "Transport",
    "classify",
    "expiry_timestamp",
    "impersonation_url",
    "oauth_code",
]

PROVIDER = "gcp"
DATA_KEY = "gcpAccessToken"
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
TRANSIENT_CODES = frozenset(
    {
        "temporarily_unavailable",
        "internal_failure",
        "unavailable",
        # Google API statuses (``{"error": {"status": "UNAVAILABLE"}}``) of a 503, 500, 429, 504
        "internal",
        "resource_exhausted",
        "deadline_exceeded",
    }
)
"""Error codes worth retrying, compared in lower case (besides google-auth's ``retryable``)."""

T = TypeVar("T")


class TimedRequest(google.auth.transport.requests.Request):
    """google-auth's transport, with a timeout on every call (its default is 120 s)."""

    def __init__(self, session: requests.Session, timeout: float) -> None:
        super().__init__(session)
        self._timeout = timeout

    def __call__(
        self,
        url: str,
        method: str = "GET",
        body: Any = None,
        headers: Any = None,
        timeout: Any = None,
        **kwargs: Any,
    ) -> Any:
        return super().__call__(
            url, method=method, body=body, headers=headers, timeout=self._timeout, **kwargs
        )


class Transport:
    """google-auth's HTTP transport (``request``) and the fence around every call made with it."""

    def __init__(
        self,
        observer: Observer,
        *,
        timeout: float = 10.0,
        concurrency: int = 4,
        deadline: float = providercalls.DEADLINE,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.observer = observer
        self.request = TimedRequest(requests.Session(), timeout)
        self._calls = ProviderCalls(
            PROVIDER,
            observer=observer,
            classify=classify,
            label="GCP",
            concurrency=concurrency,
            deadline=deadline,
            monotonic=monotonic,
        )

    def run(self, call: str, fn: Callable[[], T]) -> T:
        """``fn()`` (a refresh through :attr:`request`) fenced by GCP's bulkhead and deadline."""
        return self._calls.run(call, fn)


def classify(exc: Exception) -> Failure | None:
    """google-auth's errors: no answer (``TransportError``) is transient and shown as
    "unreachable"; an OAuth error is transient when google-auth says it is ``retryable`` or
    its code is in :data:`TRANSIENT_CODES` (an STS or IAM credentials 5xx says
    ``UNAVAILABLE``…), else a refusal."""
    if isinstance(exc, google.auth.exceptions.TransportError):
        return Failure(type(exc).__name__, transient=True, shown="unreachable")
    if isinstance(exc, google.auth.exceptions.GoogleAuthError):  # RefreshError, OAuthError…
        code = oauth_code(exc)
        transient = bool(getattr(exc, "retryable", False)) or code.lower() in TRANSIENT_CODES
        return Failure(code, transient)
    return None


def oauth_code(exc: google.auth.exceptions.GoogleAuthError) -> str:
    """The OAuth ``error`` (or HTTP status) from a RefreshError, nothing else from the body."""
    for raw in exc.args:
        arg = raw
        if isinstance(raw, str) and raw.startswith("{"):
            try:
                arg = json.loads(raw)
            except ValueError:
                arg = raw
        if isinstance(arg, dict) and isinstance(arg.get("error"), str):
            return _word(arg["error"])
        if isinstance(arg, dict) and isinstance(arg.get("error"), dict):
            inner = arg["error"]
            return _word(str(inner.get("status") or inner.get("code") or "error"))
    text = str(exc.args[0]) if exc.args else ""
    match = re.search(r"Error code ([\w.-]+)", text) or re.match(r"\(?'?([a-z_]+)[:']", text)
    return _word(match.group(1)) if match else "refresh_failed"


def _word(text: str) -> str:
    return re.sub(r"[^\w.-]", "", text)[:64] or "error"


def expiry_timestamp(expiry: datetime | None) -> float | None:
    """google-auth keeps expiry as a naive UTC datetime."""
    if expiry is None:
        return None
    return (expiry if expiry.tzinfo else expiry.replace(tzinfo=UTC)).timestamp()
