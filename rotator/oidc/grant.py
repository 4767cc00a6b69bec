"""The OAuth 2.0 client-credentials grant and OIDC discovery, as data: what is sent, what an
answer means, and which URLs may carry a client secret — no I/O (:mod:`.transport` does that).

Issuers must be ``https``: the client secret is posted to the token endpoint, and an ``http``
URL would send it in clear. ``allow_insecure`` (``--allow-insecure-oidc-issuers``) permits
``http`` for local development only.

Every error carries a code (:mod:`rotator.errors`): an answer's HTTP status, else what was
wrong with it (``NotJSON``, ``NoAccessToken``, ``NoTokenEndpoint``…); a status no RFC
registers is ``UnknownStatus`` (:func:`~rotator.providercalls.status_code`). The code is also the
``code`` label of ``rotator_provider_requests_total``, and an issuer belongs to a tenant: an
OAuth ``error`` as the code would let a hostile issuer mint a new metric series with every
answer. So the codes are a fixed set, and a refusal's OAuth ``error`` (``invalid_client``) goes
into the message only, at most :data:`OAUTH_ERROR_SHOWN` characters of ``[A-Za-z0-9_]``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from rotator import errors
from rotator.oidc.failures import Unusable
from rotator.providercalls import Failure, status_code

REFRESH_MARGIN = 60.0
"""A cached token is replaced when it has less than this many seconds left (or under half its
lifetime, for short-lived tokens)."""
DEFAULT_LIFETIME = 300.0
"""Seconds a token is taken to live when its response gives no usable ``expires_in``."""
INSECURE_FLAG = "--allow-insecure-oidc-issuers"
OAUTH_ERROR_SHOWN = 64
"""Characters of a refusal's OAuth ``error`` put in its message (RFC 6749's longest code is
``unsupported_grant_type``, 22): a hostile issuer cannot fill conditions and Events."""


class InsecureIssuer(errors.InvalidInput):
    """An ``http`` issuer (or a token endpoint without TLS) while ``http`` is not allowed."""

    reason = "InsecureIssuer"


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

    def form(self) -> dict[str, str]:
        """The token request's form fields."""
        form = {"grant_type": "client_credentials", "client_id": self.client_id}
        form["client_secret"] = self.client_secret
        if self.scopes:
            form["scope"] = " ".join(self.scopes)
        if self.audience:
            form["audience"] = self.audience
        return form


@dataclass(frozen=True)
class Token:
    value: str = field(repr=False)
    issued_at: float
    expires_at: float

    def fresh_for(self, now: float) -> float:
        """Seconds from ``now`` the token may still be handed out (0 or less: replace it)."""
        margin = min(REFRESH_MARGIN, (self.expires_at - self.issued_at) / 2)
        return self.expires_at - margin - now


def discovery_url(issuer: str) -> str:
    return issuer.rstrip("/") + "/.well-known/openid-configuration"


def check_scheme(url: str, what: str, *, allow_insecure: bool) -> None:
    """Raises :class:`InsecureIssuer` for a URL a client secret may not be sent to."""
    scheme = urlsplit(url).scheme
    if scheme == "https" or (scheme == "http" and allow_insecure):
        return
    if scheme == "http":
        raise InsecureIssuer(
            f"{what} is not https: rotator sends OIDC client secrets only over TLS (a "
            f"controller for local development may allow http with {INSECURE_FLAG})",
            code="InsecureIssuer",
        )
    raise InsecureIssuer(f"{what} is not an https URL", code="InsecureIssuer")


def answer(status: int, body: bytes, *, secret: str = "") -> dict[str, object]:
    """The JSON object of a 2xx answer, else :class:`~.failures.Unusable`: 5xx and 429 are
    transient, a redirect (not followed) and any other 4xx are refusals (coded by their status,
    their OAuth ``error`` shown in the message unless it overlaps ``secret``, the client secret
    just sent: an issuer that echoes it must not put it in a condition), a body that is not a
    JSON object is transient."""
    if status >= 500 or status == 429:
        raise Unusable(Failure(status_code(status), transient=True, shown=f"HTTP {status}"))
    if 300 <= status < 400:
        shown = f"HTTP {status}: redirects are not followed"
        raise Unusable(Failure(status_code(status), transient=False, shown=shown))
    parsed = _json(body)
    if status >= 400:
        oauth = _oauth_error(parsed, secret)
        shown = f"HTTP {status} {oauth}".rstrip()
        raise Unusable(Failure(status_code(status), transient=False, shown=shown))
    if parsed is None:
        raise Unusable(Failure("NotJSON", transient=True, shown="did not return JSON"))
    if not isinstance(parsed, dict):
        shown = "did not return a JSON object"
        raise Unusable(Failure("NotJSONObject", transient=True, shown=shown))
    return parsed


def token_endpoint(document: dict[str, object], issuer: str, *, allow_insecure: bool) -> str:
    """The token endpoint a discovery document names; a missing or non-TLS one is a refusal
    (permanent until the issuer's document changes: remembered like any failure)."""
    endpoint = document.get("token_endpoint")
    if not isinstance(endpoint, str) or not endpoint:
        raise errors.ProviderRejected(
            f"the discovery document of {where(issuer)} has no token_endpoint",
            code="NoTokenEndpoint",
        )
    scheme = urlsplit(endpoint).scheme
    if scheme != "https" and not (scheme == "http" and allow_insecure):
        raise errors.ProviderRejected(
            f"the discovery document of {where(issuer)} names a token endpoint that is not "
            f"https ({where(endpoint)}); rotator sends client secrets only over TLS",
            code="InsecureTokenEndpoint",
        )
    return endpoint


def token(response: dict[str, object], issuer: str, *, issued_at: float) -> Token:
    """The token of a token response; none is a refusal."""
    value = response.get("access_token")
    if not isinstance(value, str) or not value:
        raise errors.ProviderRejected(
            f"the token endpoint of {where(issuer)} returned no access_token",
            code="NoAccessToken",
        )
    expires_in = response.get("expires_in")
    try:
        lifetime = (
            float(expires_in) if isinstance(expires_in, int | float | str) else DEFAULT_LIFETIME
        )
    except ValueError:
        lifetime = DEFAULT_LIFETIME
    return Token(value, issued_at, issued_at + lifetime)


def host(url: str) -> str:
    """host:port — the key of a bulkhead (userinfo left out: it may hold a password)."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    default = 443 if parts.scheme == "https" else 80
    return f"{(parts.hostname or '').lower()}:{port or default}"


def where(url: str) -> str:
    """A URL for messages: without userinfo, query or fragment."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return f"{parts.scheme}://{netloc}{parts.path}"


def _json(body: bytes) -> object | None:
    try:
        parsed: object = json.loads(body)
    except ValueError:
        return None
    return parsed


def _oauth_error(body: object | None, secret: str) -> str:
    """The OAuth ``error`` code for a message, cut to :data:`OAUTH_ERROR_SHOWN` characters;
    never the description, which some servers fill with input, and nothing but ASCII letters,
    digits and ``_`` (``isalnum`` alone would pass any script's letters and digits)."""
    code = body.get("error") if isinstance(body, dict) else None
    if not isinstance(code, str) or not code.isascii() or not code.replace("_", "").isalnum():
        return ""
    if secret and (secret in code or code in secret):
        return ""
    return code[:OAUTH_ERROR_SHOWN]
