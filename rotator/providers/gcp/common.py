"""What GCP providers share: endpoints, an HTTP transport with a timeout whose calls are fenced by
:mod:`rotator.providercalls` (bulkhead, deadline, one observation), and google-auth's errors
classified once (:func:`classify`: messages keep the OAuth error code, never a body)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import google.auth.exceptions
import google.auth.transport.requests
import requests

from rotator import errors, providercalls
from rotator.observe import Observer
from rotator.providercalls import Failure, ProviderCalls

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


@dataclass(frozen=True)
class Endpoints:
    """Where the Google APIs are; overridable for private endpoints and tests."""

    sts_url: str = "https://sts.googleapis.com/v1/token"
    iam_credentials_url: str = "https://iamcredentials.googleapis.com"
    token_uri: str | None = None
    """Replaces the ``token_uri`` of service-account keys when set."""


_EMAIL = re.compile(r"[^@/?#%\\\s]+@[^@/?#%\\\s]+")
"""A service account's email as it may stand in a URL path: the CRD's pattern, and no ``%``
or ``\\`` either (an escaped ``/`` must not reach the path)."""


def impersonation_url(endpoints: Endpoints, service_account: str) -> str:
    """IAM credentials ``generateAccessToken`` of ``service_account`` (an email).

    The email is user input that becomes a path segment: checked here too, not only by the
    CRD's pattern, so an object admitted without it (an older CRD) still cannot steer the
    request to another path (the REST client's ``path_segment`` rule, for Google's API)."""
    if not _EMAIL.fullmatch(service_account) or any(ord(c) < 32 for c in service_account):
        raise errors.InvalidInput(
            "the service account to impersonate must be an email (name@project.iam"
            ".gserviceaccount.com) with no '/', '?', '#', '%' or '\\'"
        )
    return (
        f"{endpoints.iam_credentials_url.rstrip('/')}/v1/projects/-/serviceAccounts/"
        f"{service_account}:generateAccessToken"
    )


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
