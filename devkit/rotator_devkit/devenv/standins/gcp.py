"""Google's token services, as small local stand-ins that speak and check the documented
protocols (there is no emulator):

* STS ``POST /v1/token`` — RFC 8693 token exchange (form-encoded): grant and token types, a known
  workload identity pool provider as ``audience``, a subject JWT whose signature, issuer and
  audience check out;
* IAM credentials ``POST /v1/projects/-/serviceAccounts/{email}:generateAccessToken`` — JSON,
  a bearer token STS issued, an ``expireTime`` without fractional seconds;
* OAuth ``POST /token`` — the JWT-bearer grant of a service-account key, the assertion verified
  with the public half of one of the account's keys, ``aud`` the token URI. An account may have
  several keys, each valid until it is deleted, as in IAM: a second key made for an account (a
  retried registration) does not invalidate the first. An assertion whose header names a key
  (``kid``: google-auth sends the key file's ``private_key_id``) is verified with that key
  only, and refused when the account has no key of that id; one without a ``kid`` (Google's
  documented header has none) with any of the account's keys.

Its :attr:`issued` holds the tokens it minted, the subject tokens and assertions presented to it
and the private keys it made (each full line of the PEM body), for leak scans.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from rotator_devkit.devenv.standins.httpstub import Stub
from rotator_devkit.devenv.standins.jwts import Trust

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
ACCESS_TOKEN = "urn:ietf:params:oauth:token-type:access_token"
JWT_TYPE = "urn:ietf:params:oauth:token-type:jwt"
GOOGLE_TOKEN_ENDPOINT = "https://oauth2.googleapis.com/token"


class GCPStandIn(Stub):
    def __init__(self, *, lifetime: int = 60) -> None:
        super().__init__()
        self.lifetime = lifetime
        self.trust = Trust()
        self.providers: dict[str, set[str]] = {}  # provider audience → accepted subject audiences
        self.service_accounts: set[str] = set()  # impersonable emails
        self.keys: dict[str, dict[str, Any]] = {}  # client_email → key id → public key
        self.tokens: dict[str, tuple[str, float]] = {}  # token → (kind, when it ends)
        self.may_impersonate = {"federated", "metadata"}
        """Kinds of token ``generateAccessToken`` accepts as its bearer: federated ones, and
        those of a metadata server (gce_metadata.py)."""
        self._issued_lock = threading.Lock()

    @property
    def sts_url(self) -> str:
        return f"{self.url}/v1/token"

    @property
    def token_uri(self) -> str:
        return f"{self.url}/token"

    def add_provider(self, audience: str, subject_audiences: set[str]) -> None:
        self.providers[audience] = subject_audiences

    def service_account_key(self, email: str, project: str = "test-project") -> dict[str, Any]:
        """A new service-account key file whose public half this stand-in trusts, beside the
        account's earlier keys."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        key_id = secrets.token_hex(20)  # IAM's key ids are 40 hex digits
        self.keys.setdefault(email, {})[key_id] = key.public_key()
        pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
        self.remember(*(line for line in pem.splitlines() if len(line) == 64))
        return {
            "type": "service_account",
            "project_id": project,
            "private_key_id": key_id,
            "private_key": pem,
            "client_email": email,
            "client_id": "1234567890",
            "token_uri": self.token_uri,
        }

    def was_issued(self, token: str) -> str | None:
        with self._issued_lock:
            found = self.tokens.get(token)
        return None if found is None else found[0]

    def expires_at(self, token: str) -> float | None:
        """When a token this stand-in minted stops being valid (epoch seconds); None for one it
        never minted. What a Google API (the Vertex AI stand-in) checks a bearer token against."""
        with self._issued_lock:
            found = self.tokens.get(token)
        return None if found is None else found[1]

    def handle(self, handler: BaseHTTPRequestHandler, method: str, body: bytes) -> None:
        path = handler.path.split("?")[0]
        if method == "POST" and path == "/v1/token":
            self._exchange({k: v[0] for k, v in parse_qs(body.decode()).items()}, handler)
        elif method == "POST" and path.endswith(":generateAccessToken"):
            self._impersonate(path, handler, body)
        elif method == "POST" and path == "/token":
            self._jwt_bearer({k: v[0] for k, v in parse_qs(body.decode()).items()}, handler)
        else:
            self._error(handler, 404, "not_found")

    def _exchange(self, form: dict[str, str], handler: BaseHTTPRequestHandler) -> None:
        if (
            form.get("grant_type") != TOKEN_EXCHANGE
            or form.get("requested_token_type") != ACCESS_TOKEN
        ):
            return self._error(handler, 400, "invalid_request", "exchange")
        if form.get("subject_token_type") != JWT_TYPE:
            return self._error(handler, 400, "invalid_request", "exchange")
        accepted = self.providers.get(form.get("audience", ""))
        if accepted is None:
            return self._error(handler, 400, "invalid_target", "exchange")
        self.remember(form.get("subject_token", ""))
        claims, why = self.trust.verify(form.get("subject_token", ""), audiences=accepted)
        if claims is None:
            return self._error(handler, 400, "invalid_grant", "exchange", why)
        self.counted("exchange")
        lifetime = self.lifetime  # once: what is told is what is recorded
        token = self._issue("federated", time.time() + lifetime)
        self._json(
            handler,
            200,
            {
                "access_token": token,
                "issued_token_type": ACCESS_TOKEN,
                "token_type": "Bearer",
                "expires_in": lifetime,
            },
        )

    def _impersonate(self, path: str, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        email = path.split("/serviceAccounts/", 1)[1].rsplit(":", 1)[0]
        bearer = (handler.headers.get("Authorization") or "").removeprefix("Bearer ")
        if self.was_issued(bearer) not in self.may_impersonate:
            return self._error(handler, 401, "UNAUTHENTICATED", "impersonate")
        if email not in self.service_accounts:
            return self._error(handler, 403, "PERMISSION_DENIED", "impersonate")
        request = json.loads(body or b"{}")
        if not request.get("scope"):
            return self._error(handler, 400, "INVALID_ARGUMENT", "impersonate")
        self.counted("impersonate")
        end = int(time.time() + self.lifetime)  # expireTime has no fractional seconds
        token = self._issue("impersonated", end)
        expire = datetime.fromtimestamp(end, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self._json(handler, 200, {"accessToken": token, "expireTime": expire})

    def _jwt_bearer(self, form: dict[str, str], handler: BaseHTTPRequestHandler) -> None:
        if form.get("grant_type") != JWT_BEARER:
            return self._error(handler, 400, "unsupported_grant_type", "oauth")
        assertion = form.get("assertion", "")
        self.remember(assertion)
        try:
            email = jwt.decode(assertion, options={"verify_signature": False}).get("iss", "")
            key_id = jwt.get_unverified_header(assertion).get("kid")
        except jwt.PyJWTError:
            return self._error(handler, 400, "invalid_grant", "oauth")
        keys = self.keys.get(email)
        if keys is None:
            return self._error(handler, 400, "invalid_grant", "oauth", "unknown service account")
        if key_id is None:
            candidates = list(keys.values())
        elif isinstance(key_id, str) and key_id in keys:
            candidates = [keys[key_id]]
        else:  # a key id the account has none of: another account's key, or a deleted one
            return self._error(handler, 400, "invalid_grant", "oauth", "unknown key id")
        refused: jwt.PyJWTError | None = None
        for key in candidates:
            try:
                # Google documents the assertion's audience as its token endpoint, whatever the
                # token_uri it is posted to (google-auth sends exactly that).
                jwt.decode(
                    assertion,
                    key=key,
                    algorithms=["RS256"],
                    audience=[GOOGLE_TOKEN_ENDPOINT, self.token_uri],
                    issuer=email,
                )
                break
            except jwt.PyJWTError as exc:
                # a claim refused by the key that signed it says more than another key's
                # signature mismatch
                if refused is None or isinstance(refused, jwt.InvalidSignatureError):
                    refused = exc
        else:
            reason = type(refused).__name__ if refused is not None else "no key"
            return self._error(handler, 400, "invalid_grant", "oauth", reason)
        self.counted("oauth")
        lifetime = self.lifetime
        self._json(
            handler,
            200,
            {
                "access_token": self._issue("service-account", time.time() + lifetime),
                "expires_in": lifetime,
                "token_type": "Bearer",
            },
        )

    def issue(self, kind: str, lifetime: int) -> str:
        """A new access token of ``kind`` living ``lifetime`` s, which :meth:`was_issued` and
        :meth:`expires_at` will recognise (for a metadata server stand-in, whose tokens Google's
        APIs accept)."""
        return self._issue(kind, time.time() + lifetime)

    def _issue(self, kind: str, end: float) -> str:
        """A new token, valid until ``end`` (epoch seconds)."""
        token = f"ya29.{kind}-{secrets.token_urlsafe(24)}"
        with self._issued_lock:
            self.tokens[token] = (kind, end)
        self.remember(token)
        return token

    def _error(
        self, handler: BaseHTTPRequestHandler, status: int, code: str, what: str = "", why: str = ""
    ) -> None:
        self.counted(f"{what}_refused" if what else "refused")
        self._json(handler, status, {"error": code, "error_description": why or code})

    def _json(self, handler: BaseHTTPRequestHandler, status: int, body: dict[str, Any]) -> None:
        self.reply(handler, status, json.dumps(body).encode(), "application/json")
