"""Azure AD's v2 token endpoint, as a local HTTPS stand-in (MSAL insists on https; the
certificate comes from a throwaway CA whose file the controller is told to trust):

* ``GET /{tenant}/v2.0/.well-known/openid-configuration`` — the tenant's metadata;
* ``POST /{tenant}/oauth2/v2.0/token`` — ``client_credentials`` with a ``client_secret``, or with a
  ``client_assertion`` (JWT bearer) whose signature, issuer, subject and audience match a
  federated credential of the application. Wrong secrets get AADSTS7000215, like the real one.

Its :attr:`issued` holds the tokens it minted, the client assertions presented to it and (see
:meth:`issued_values`) the applications' client secrets, for leak scans.
"""

from __future__ import annotations

import json
import secrets
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from rotator_devkit.controlplane import pki
from rotator_devkit.devenv.standins.httpstub import Stub
from rotator_devkit.devenv.standins.jwts import Trust

ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"


@dataclass
class App:
    tenant: str
    secret: str | None = None
    federated: set[tuple[str, str]] = field(default_factory=set)  # (issuer, subject)
    audience: str = "api://AzureADTokenExchange"


def tls_context(folder: Path) -> tuple[ssl.SSLContext, Path]:
    """A server context for 127.0.0.1 and the CA file that trusts it."""
    ca = pki.CertificateAuthority("rotator-test-azure-ca")
    issued = ca.issue(
        "azure-standin", dns_names=["localhost"], ip_addresses=["127.0.0.1"], server=True
    )
    (folder / "ca.crt").write_bytes(ca.cert_pem)
    (folder / "server.crt").write_bytes(issued.cert)
    (folder / "server.key").write_bytes(issued.key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "server.crt", folder / "server.key")
    return context, folder / "ca.crt"


class AzureStandIn(Stub):
    def __init__(self, tls: ssl.SSLContext, ca_file: Path, *, lifetime: int = 60) -> None:
        super().__init__(tls=tls)
        self.ca_file = ca_file
        self.lifetime = lifetime
        self.trust = Trust()
        self.apps: dict[str, App] = {}
        self.tokens: set[str] = set()  # the access tokens it minted
        self._expiries: dict[str, float] = {}  # token → when it expires (time.time())
        self._tokens_lock = threading.Lock()

    @property
    def authority_host(self) -> str:
        return self.url.removeprefix("https://")

    def handle(self, handler: BaseHTTPRequestHandler, method: str, body: bytes) -> None:
        parts = handler.path.split("?")[0].strip("/").split("/")
        if method == "GET" and parts[1:] == ["v2.0", ".well-known", "openid-configuration"]:
            self.counted("metadata")
            base = f"{self.url}/{parts[0]}"
            self._json(
                handler,
                200,
                {
                    "token_endpoint": f"{base}/oauth2/v2.0/token",
                    "authorization_endpoint": f"{base}/oauth2/v2.0/authorize",
                    "device_authorization_endpoint": f"{base}/oauth2/v2.0/devicecode",
                    "issuer": f"{base}/v2.0",
                    "jwks_uri": f"{base}/discovery/v2.0/keys",
                    "token_endpoint_auth_methods_supported": [
                        "client_secret_post",
                        "private_key_jwt",
                    ],
                },
            )
        elif method == "POST" and parts[1:] == ["oauth2", "v2.0", "token"]:
            self._token(parts[0], {k: v[0] for k, v in parse_qs(body.decode()).items()}, handler)
        else:
            self.counted("unknown_path")
            self._json(handler, 404, {"error": "not_found"})

    def was_issued(self, token: str) -> bool:
        with self._tokens_lock:
            return token in self.tokens

    def expires_at(self, token: str) -> float | None:
        """When a token it minted expires (epoch seconds); None for one it did not mint. What an
        Azure OpenAI stand-in checks a bearer token against (``upstreams.AzureOpenAIStandIn``)."""
        with self._tokens_lock:
            return self._expiries.get(token)

    def issued_values(self) -> frozenset[str]:
        """Besides what it minted, the client secrets registered (tests set :attr:`apps`)."""
        return super().issued_values() | {a.secret for a in list(self.apps.values()) if a.secret}

    def _token(self, tenant: str, form: dict[str, str], handler: BaseHTTPRequestHandler) -> None:
        app = self.apps.get(form.get("client_id", ""))
        if form.get("grant_type") != "client_credentials":
            return self._refuse(handler, 400, "unsupported_grant_type", "AADSTS70003")
        if app is None or app.tenant != tenant:
            return self._refuse(handler, 400, "unauthorized_client", "AADSTS700016")
        if not form.get("scope", "").endswith("/.default"):
            return self._refuse(handler, 400, "invalid_scope", "AADSTS1002012")
        if "client_secret" in form:
            if app.secret is None or form["client_secret"] != app.secret:
                return self._refuse(
                    handler,
                    401,
                    "invalid_client",
                    "AADSTS7000215",
                    "Invalid client secret provided.",
                )
        elif form.get("client_assertion_type") == ASSERTION_TYPE:
            self.remember(form.get("client_assertion", ""))
            claims, _ = self.trust.verify(
                form.get("client_assertion", ""), audiences={app.audience}
            )
            if claims is None or (claims.get("iss"), claims.get("sub")) not in app.federated:
                return self._refuse(
                    handler,
                    401,
                    "invalid_client",
                    "AADSTS700213",
                    "No matching federated identity record found.",
                )
        else:
            return self._refuse(
                handler,
                401,
                "invalid_client",
                "AADSTS7000218",
                "The request body must contain client_assertion or client_secret.",
            )
        self.counted("token")
        token = "eyJ0eXAiOiJKV1Qi." + secrets.token_urlsafe(32)
        with self._tokens_lock:
            self.tokens.add(token)
            self._expiries[token] = time.time() + self.lifetime
        self.remember(token)
        self._json(
            handler,
            200,
            {
                "token_type": "Bearer",
                "expires_in": self.lifetime,
                "ext_expires_in": self.lifetime,
                "access_token": token,
            },
        )

    def _refuse(
        self, handler: BaseHTTPRequestHandler, status: int, error: str, code: str, text: str = ""
    ) -> None:
        self.counted("refused")
        number = int(code.removeprefix("AADSTS"))
        self._json(
            handler,
            status,
            {
                "error": error,
                "error_description": f"{code}: {text or error}",
                "error_codes": [number],
            },
        )

    def _json(self, handler: BaseHTTPRequestHandler, status: int, body: dict[str, Any]) -> None:
        self.reply(handler, status, json.dumps(body).encode(), "application/json")
