"""What GCP providers share: endpoints, an HTTP transport with a timeout whose calls are fenced by
:mod:`rotator.providercalls` (bulkhead, deadline, one observation), and google-auth's errors
classified once (:func:`classify`: messages keep the OAuth error code, never a body; the
observed code is one of a fixed set, :data:`KNOWN_CODES`).

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
from rotator.providercalls import Failure, ProviderCalls, status_code
from rotator.providers.gcp.endpoints import Endpoints, impersonation_url

__all__ = [
    "DATA_KEY",
    "KNOWN_CODES",
    "PROVIDER",
    "SCOPES",
    "TRANSIENT_CODES",
    "UNRECOGNIZED",
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
KNOWN_CODES = frozenset(
    {
        # OAuth 2.0 (RFC 6749 §4.1.2.1 and §5.2, RFC 6750 §3.1, RFC 8693 §2.2.2)
        "invalid_request",
        "invalid_client",
        "invalid_grant",
        "unauthorized_client",
        "unsupported_grant_type",
        "unsupported_response_type",
        "invalid_scope",
        "invalid_target",
        "invalid_token",
        "insufficient_scope",
        "access_denied",
        "server_error",
        "temporarily_unavailable",
        "internal_failure",
        "unavailable",
        # Google API statuses (google.rpc.Code), as ``{"error": {"status": …}}`` spells them
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "UNAUTHENTICATED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        # rotator's own: an error without a code
        "refresh_failed",
    }
)
"""The codes a GCP failure may be observed and carried with (exact case), besides an HTTP
status (:func:`~rotator.providercalls.status_code`) and exception type names. The token
endpoint of a service-account key is the key's ``token_uri``, which a tenant writes (unless
the operator replaces it): its answers may say anything, and the code is a metric label."""
UNRECOGNIZED = "Unrecognized"
"""The code of an error whose own code is not in :data:`KNOWN_CODES` (shown in the message,
cut to 64 characters of ``[A-Za-z0-9_.-]``)."""

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
    ``UNAVAILABLE``…), else a refusal. Its code is the error's own when Google uses it
    (:data:`KNOWN_CODES`, an HTTP status), else :data:`UNRECOGNIZED` with the error's own code
    in the message only."""
    if isinstance(exc, google.auth.exceptions.TransportError):
        return Failure(type(exc).__name__, transient=True, shown="unreachable")
    if isinstance(exc, google.auth.exceptions.GoogleAuthError):  # RefreshError, OAuthError…
        said = oauth_code(exc)
        transient = bool(getattr(exc, "retryable", False)) or said.lower() in TRANSIENT_CODES
        if said in KNOWN_CODES or (said.isdigit() and status_code(int(said)) == said):
            return Failure(said, transient)
        return Failure(UNRECOGNIZED, transient, shown=f"{said} (not an error code Google uses)")
    return None


def oauth_code(exc: google.auth.exceptions.GoogleAuthError) -> str:
    """The OAuth ``error`` (or Google API status, or HTTP status) a RefreshError says, nothing
    else from the body: as the answer wrote it, cut to a word (:func:`classify` bounds it)."""
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
    """ASCII letters, digits, ``_``, ``.`` and ``-`` only (``\\w`` would pass any script's
    letters), at most 64 of them."""
    return re.sub(r"[^A-Za-z0-9_.-]", "", text)[:64] or "error"


def expiry_timestamp(expiry: datetime | None) -> float | None:
    """google-auth keeps expiry as a naive UTC datetime."""
    if expiry is None:
        return None
    return (expiry if expiry.tzinfo else expiry.replace(tzinfo=UTC)).timestamp()
