"""What GCP providers share: endpoints, an HTTP transport with a timeout, and google-auth errors
mapped once into the engine's error tree (messages keep the OAuth error code, never a body)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import google.auth.exceptions
import google.auth.transport.requests
import requests

from rotator import errors
from rotator.bulkhead import Bulkhead
from rotator.observe import Observer

PROVIDER = "gcp"
DATA_KEY = "gcpAccessToken"
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)


@dataclass(frozen=True)
class Endpoints:
    """Where the Google APIs are; overridable for private endpoints and tests."""

    sts_url: str = "https://sts.googleapis.com/v1/token"
    iam_credentials_url: str = "https://iamcredentials.googleapis.com"
    token_uri: str | None = None
    """Replaces the ``token_uri`` of service-account keys when set."""


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
    def __init__(self, observer: Observer, *, timeout: float = 10.0, concurrency: int = 4) -> None:
        self.observer = observer
        self.request = TimedRequest(requests.Session(), timeout)
        self._bulkhead = Bulkhead(PROVIDER, limit=concurrency)

    @contextmanager
    def call(self, call: str) -> Iterator[None]:
        with self._bulkhead.slot():
            try:
                yield
            except google.auth.exceptions.TransportError as exc:
                self.observer.provider_request(
                    provider=PROVIDER, call=call, code=type(exc).__name__
                )
                raise errors.ProviderUnavailable(f"GCP {call} failed: unreachable") from None
            except google.auth.exceptions.GoogleAuthError as exc:  # RefreshError, OAuthError…
                code = oauth_code(exc)
                self.observer.provider_request(provider=PROVIDER, call=call, code=code)
                message = f"GCP {call} failed: {code}"
                if getattr(exc, "retryable", False) or code in (
                    "temporarily_unavailable",
                    "internal_failure",
                    "unavailable",
                ):
                    raise errors.ProviderUnavailable(message) from None
                raise errors.ProviderRejected(message) from None
        self.observer.provider_request(provider=PROVIDER, call=call, code="200")


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
