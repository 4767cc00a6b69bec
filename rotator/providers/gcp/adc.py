"""The controller's own Google identity: Application Default Credentials (``google.auth.default``
with the cloud-platform scope) — on GKE with workload identity, and on GCE, the metadata server;
``GOOGLE_APPLICATION_CREDENTIALS`` where an operator set it — optionally impersonating a service
account through IAM credentials ``generateAccessToken``, as workload identity federation does.

ADC is looked for once, on first use, and kept: what the process's environment offers does not
change while it runs, and every look pings the metadata server. A look that fails is retried by
the next mint. Each mint refreshes a copy of what was found, so concurrent mints share no token
state. Metadata server calls (the look, the
token) are fenced apart from the Google APIs (:mod:`rotator.providercalls`, provider
``gcp-adc``): a hung metadata server holds no slot of STS's or IAM's.
"""

from __future__ import annotations

import copy
import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

import google.auth
import google.auth.credentials
import google.auth.exceptions
import google.oauth2.credentials
import requests
from google.auth import impersonated_credentials

from rotator import errors, providercalls
from rotator.credentials import Credential
from rotator.observe import Observer
from rotator.providercalls import Failure, ProviderCalls, status_code
from rotator.providers.gcp.common import (
    DATA_KEY,
    SCOPES,
    Endpoints,
    TimedRequest,
    Transport,
    classify,
    expiry_timestamp,
    impersonation_url,
)

PROVIDER = "gcp-adc"
IMPERSONATED_LIFETIME = 3600
"""Seconds asked of ``generateAccessToken`` (its default and maximum without an org policy)."""

Finder = Callable[..., tuple[google.auth.credentials.Credentials, str | None]]
"""``google.auth.default``'s shape: ``(scopes=…, request=…)`` → ``(credentials, project)``."""


class ApplicationDefault:
    """The controller's ADC, found once; :meth:`token` mints with a copy of it."""

    def __init__(
        self,
        observer: Observer,
        *,
        timeout: float = 10.0,
        concurrency: int = 4,
        deadline: float = providercalls.DEADLINE,
        monotonic: Callable[[], float] = time.monotonic,
        find: Finder = google.auth.default,
    ) -> None:
        self.request = TimedRequest(requests.Session(), timeout)
        self._find = find
        self._found: google.auth.credentials.Credentials | None = None
        self._finding: Future[google.auth.credentials.Credentials] | None = None
        self._deadline = deadline
        self._lock = threading.Lock()
        self._calls = ProviderCalls(
            PROVIDER,
            observer=observer,
            classify=classify_adc,
            label="GCP application default credentials",
            concurrency=concurrency,
            deadline=deadline,
            monotonic=monotonic,
        )

    def token(self) -> tuple[str, float | None]:
        """A fresh access token of the controller's identity and its expiry (epoch seconds)."""
        credentials = self._credentials()
        self._calls.run("AccessToken", lambda: credentials.refresh(self.request))
        return str(credentials.token), expiry_timestamp(credentials.expiry)

    def _credentials(self) -> google.auth.credentials.Credentials:
        """A copy of what ADC found, looking first if need be — one look at a time: mints that
        come while one is under way wait for its outcome (bounded by the provider call
        deadline), so a thousand policies at start cost one look, and a hung metadata server
        holds one call, not one per policy."""
        with self._lock:
            if self._found is not None:
                return copy.copy(self._found)
            finding, mine = self._finding, self._finding is None
            if finding is None:
                finding = self._finding = Future()
        if not mine:
            try:
                return copy.copy(finding.result(timeout=self._deadline))
            except errors.CredentialError as exc:  # its own instance: tracebacks are per raise
                raise type(exc)(str(exc), code=exc.code) from None
            except FutureTimeout:
                raise errors.ProviderUnavailable(
                    "GCP application default credentials: still being looked for",
                    code="DeadlineExceeded",
                ) from None
        try:
            found = self._calls.run("FindDefaultCredentials", self._look)
        except BaseException as exc:
            with self._lock:
                self._finding = None
            finding.set_exception(exc)
            raise
        with self._lock:
            self._found, self._finding = found, None
        finding.set_result(found)
        return copy.copy(found)

    def _look(self) -> google.auth.credentials.Credentials:
        scopes: Sequence[str] = list(SCOPES)
        credentials, _ = self._find(scopes=scopes, request=self.request)
        return credentials


def mint(
    adc: ApplicationDefault,
    transport: Transport,
    *,
    impersonate: str | None,
    endpoints: Endpoints,
) -> Credential:
    """The controller's own token, or (``impersonate``) a token of that service account, which
    the controller's identity must be allowed to mint (``roles/iam.serviceAccountTokenCreator``).
    The expiry is the one Google returned with the token."""
    token, expires_at = adc.token()
    if impersonate is None:
        return Credential({DATA_KEY: token.encode()}, expires_at=expires_at)
    # The token just fetched, as it is: google-auth would refresh a source it thinks stale
    # (under 3 min 45 s left) inside the IAM call, out of the metadata server's fence.
    source = google.oauth2.credentials.Credentials(token=token)
    target = impersonated_credentials.Credentials(
        source_credentials=source,
        target_principal=impersonate,
        target_scopes=list(SCOPES),
        lifetime=IMPERSONATED_LIFETIME,
        iam_endpoint_override=impersonation_url(endpoints, impersonate),
    )
    transport.run("generateAccessToken", lambda: target.refresh(transport.request))
    return Credential(
        {DATA_KEY: str(target.token).encode()}, expires_at=expiry_timestamp(target.expiry)
    )


def classify_adc(exc: Exception) -> Failure | None:
    """No ADC found (``DefaultCredentialsError``: no metadata server answered the look — a GKE
    pod's metadata server may not be up yet) is retried; so is a metadata server that does not
    answer, or answers 5xx or 429 (google-auth reports either as a ``TransportError``, wrapped
    in a ``RefreshError`` by a refresh; the code is the HTTP status when there was one). A 4xx
    is its verdict (403: a request it refuses; 404: no such service account). Anything else is
    an OAuth answer, classified as every Google token endpoint's (:func:`common.classify`)."""
    if isinstance(exc, google.auth.exceptions.DefaultCredentialsError):
        return Failure(
            "NoDefaultCredentials",
            transient=True,
            shown="no Application Default Credentials in the controller's environment "
            "(no metadata server answered)",
        )
    cause = _transport_error(exc)
    if cause is not None:
        status = _status(str(cause))
        if status is None:
            return Failure(type(cause).__name__, transient=True, shown="unreachable")
        return Failure(status_code(status), transient=not (400 <= status < 500 and status != 429))
    return classify(exc)


def _transport_error(exc: Exception) -> google.auth.exceptions.TransportError | None:
    if isinstance(exc, google.auth.exceptions.TransportError):
        return exc
    if isinstance(exc, google.auth.exceptions.RefreshError):
        for arg in (*exc.args, exc.__cause__):
            if isinstance(arg, google.auth.exceptions.TransportError):
                return arg
    return None


def _status(message: str) -> int | None:
    """The HTTP status google-auth's metadata client puts in its messages (``Status: 403`` or
    ``Response status: 503``), if any."""
    match = re.search(r"[Ss]tatus: (\d{3})\b", message)
    return int(match.group(1)) if match else None
