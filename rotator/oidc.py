"""OIDC client-credentials tokens, for exchanging with AWS STS, GCP STS or Azure AD.

Discovery (``/.well-known/openid-configuration``) finds the token endpoint; the token is cached
per issuer and client until shortly before it expires, and when it must be fetched, one caller
fetches while the others for the same client wait for that result (kopf's credential Vault
shape) — a burst of policies sharing a client makes one request, not fifty. Every HTTP call has
a timeout. ``requests`` is the HTTP client (already a dependency of the kubernetes package);
the client-credentials grant is three form fields, not worth a framework.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import requests

from rotator import errors
from rotator.bulkhead import Bulkhead
from rotator.observe import NoObserver, Observer

PROVIDER = "oidc"
REFRESH_MARGIN = 60.0
"""A cached token is replaced when it has less than this many seconds left (or under half its
lifetime, for short-lived tokens)."""


@dataclass(frozen=True)
class Client:
    issuer: str
    client_id: str
    client_secret: str = field(repr=False)
    scopes: tuple[str, ...] = ()
    audience: str | None = None

    def cache_key(self) -> tuple[str, ...]:
        secret_digest = hashlib.sha256(self.client_secret.encode()).hexdigest()
        return (
            self.issuer,
            self.client_id,
            secret_digest,
            " ".join(self.scopes),
            self.audience or "",
        )


@dataclass(frozen=True)
class Token:
    value: str = field(repr=False)
    issued_at: float
    expires_at: float

    def fresh(self, now: float) -> bool:
        margin = min(REFRESH_MARGIN, (self.expires_at - self.issued_at) / 2)
        return now < self.expires_at - margin


class TokenSource:
    """Client-credentials tokens from OIDC issuers, cached and fetched once per client."""

    def __init__(
        self,
        *,
        session: requests.Session | None = None,
        timeout: float = 10.0,
        concurrency: int = 4,
        observer: Observer | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._session = session or requests.Session()
        self._timeout = timeout
        self._bulkhead = Bulkhead(PROVIDER, limit=concurrency)
        self._observer = observer or NoObserver()
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens: dict[tuple[str, ...], Token] = {}
        self._fetching: dict[tuple[str, ...], threading.Lock] = {}
        self._endpoints: dict[str, tuple[str, float]] = {}  # issuer → (token endpoint, found at)

    def token(self, client: Client) -> Token:
        key = client.cache_key()
        with self._lock:
            cached = self._tokens.get(key)
            if cached is not None and cached.fresh(self._clock()):
                return cached
            gate = self._fetching.setdefault(key, threading.Lock())
        with gate:  # one fetch per client; the others wait and take its token
            with self._lock:
                cached = self._tokens.get(key)
                if cached is not None and cached.fresh(self._clock()):
                    return cached
            token = self._fetch(client)
            with self._lock:
                self._tokens[key] = token
            return token

    def _fetch(self, client: Client) -> Token:
        endpoint = self._token_endpoint(client.issuer)
        form = {"grant_type": "client_credentials", "client_id": client.client_id}
        form["client_secret"] = client.client_secret
        if client.scopes:
            form["scope"] = " ".join(client.scopes)
        if client.audience:
            form["audience"] = client.audience
        now = self._clock()
        body = self._call("token", "POST", endpoint, data=form)
        value = body.get("access_token")
        if not isinstance(value, str) or not value:
            raise errors.ProviderRejected(
                f"the token endpoint of {client.issuer} returned no access_token"
            )
        expires_in = body.get("expires_in")
        lifetime = float(expires_in) if isinstance(expires_in, int | float | str) else 300.0
        return Token(value, now, now + lifetime)

    def _token_endpoint(self, issuer: str) -> str:
        with self._lock:
            known = self._endpoints.get(issuer)
        if known is not None and self._clock() - known[1] < 3600:
            return known[0]
        url = issuer.rstrip("/") + "/.well-known/openid-configuration"
        endpoint = self._call("discovery", "GET", url).get("token_endpoint")
        if not isinstance(endpoint, str):
            raise errors.ProviderRejected(
                f"the discovery document of {issuer} has no token_endpoint"
            )
        with self._lock:
            self._endpoints[issuer] = (endpoint, self._clock())
        return endpoint

    def _call(self, call: str, method: str, url: str, **kwargs: object) -> dict[str, object]:
        try:
            with self._bulkhead.slot():
                response = self._session.request(method, url, timeout=self._timeout, **kwargs)  # type: ignore[arg-type]
        except requests.RequestException as exc:
            self._observer.provider_request(provider=PROVIDER, call=call, code=type(exc).__name__)
            raise errors.ProviderUnavailable(
                f"OIDC {call} at {url} failed: {type(exc).__name__}"
            ) from None
        self._observer.provider_request(
            provider=PROVIDER, call=call, code=str(response.status_code)
        )
        if response.status_code >= 500 or response.status_code == 429:
            raise errors.ProviderUnavailable(f"OIDC {call} at {url}: HTTP {response.status_code}")
        if response.status_code >= 400:
            why = _oauth_error(response)
            raise errors.ProviderRejected(
                f"OIDC {call} at {url} refused: HTTP {response.status_code} {why}".rstrip()
            )
        try:
            body = response.json()
        except ValueError:
            raise errors.ProviderUnavailable(f"OIDC {call} at {url} did not return JSON") from None
        if not isinstance(body, dict):
            raise errors.ProviderUnavailable(f"OIDC {call} at {url} did not return a JSON object")
        return body


def _oauth_error(response: requests.Response) -> str:
    """The OAuth ``error`` code (never the description, which some servers fill with input)."""
    try:
        code = response.json().get("error")
    except (ValueError, AttributeError):
        return ""
    return str(code) if isinstance(code, str) and code.replace("_", "").isalnum() else ""
