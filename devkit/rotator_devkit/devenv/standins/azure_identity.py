"""Azure managed identity endpoints, as one local stand-in that checks what the real ones check:

* IMDS ``GET /metadata/identity/oauth2/token?api-version=…&resource=…[&client_id=…]`` (what a VM
  or an AKS node offers; azure-identity and MSAL find it at ``AZURE_POD_IDENTITY_AUTHORITY_HOST``,
  default ``http://169.254.169.254``): the ``Metadata: true`` header is required and a proxied
  request (``X-Forwarded-For``) refused, as IMDS does against SSRF; it answers only for the
  identities assigned here — the system-assigned one if :attr:`system_assigned`, and the
  user-assigned client IDs of :attr:`user_assigned` — and says "Identity not found" (400) for
  any other;
* App Service / Container Apps ``GET /msi/token?api-version=2019-08-01&resource=…`` (found at
  ``IDENTITY_ENDPOINT``, :attr:`identity_endpoint`): the ``X-IDENTITY-HEADER`` must carry
  :attr:`identity_header` (the secret the platform puts in ``IDENTITY_HEADER``); the same
  identities.

Tokens live :attr:`lifetime` seconds. Every token, and the identity header, is in :attr:`issued`
for leak scans; :meth:`was_issued` says which identity and resource a token was minted for.
Counts: ``imds_token``, ``app_service_token`` (tokens issued), ``refused``.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from rotator_devkit.devenv.standins.httpstub import Stub

IMDS_PATH = "/metadata/identity/oauth2/token"
APP_SERVICE_PATH = "/msi/token"
SYSTEM_ASSIGNED = "system-assigned"


@dataclass(frozen=True)
class Issued:
    identity: str
    """A user-assigned client ID, or :data:`SYSTEM_ASSIGNED`."""
    resource: str
    expires_on: int
    endpoint: str
    """``imds`` or ``app-service``."""


class ManagedIdentityStandIn(Stub):
    def __init__(
        self,
        *,
        lifetime: int = 60,
        system_assigned: bool = True,
        user_assigned: tuple[str, ...] = (),
    ) -> None:
        super().__init__()
        self.lifetime = lifetime
        self.system_assigned = system_assigned
        self.user_assigned: set[str] = set(user_assigned)
        self.identity_header = "idh-" + secrets.token_urlsafe(24)
        self.remember(self.identity_header)
        self._tokens: dict[str, Issued] = {}
        self._tokens_lock = threading.Lock()

    @property
    def authority_host(self) -> str:
        """For ``AZURE_POD_IDENTITY_AUTHORITY_HOST`` (IMDS)."""
        return self.url

    @property
    def identity_endpoint(self) -> str:
        """For ``IDENTITY_ENDPOINT`` (App Service, Container Apps)."""
        return self.url + APP_SERVICE_PATH

    def was_issued(self, token: str) -> Issued | None:
        with self._tokens_lock:
            return self._tokens.get(token)

    def failure_body(self) -> bytes:
        # IMDS's OAuth error and App Service's status both: MSAL reads one or the other
        return b'{"error": "temporarily_unavailable", "statusCode": 503, "message": "unavailable"}'

    def handle(self, handler: BaseHTTPRequestHandler, method: str, body: bytes) -> None:
        url = urlsplit(handler.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        if method == "GET" and url.path == IMDS_PATH:
            self._imds(handler, query)
        elif method == "GET" and url.path == APP_SERVICE_PATH:
            self._app_service(handler, query)
        else:
            self._refuse(handler, 404, "not_found", "no such endpoint")

    def _imds(self, handler: BaseHTTPRequestHandler, query: dict[str, str]) -> None:
        if handler.headers.get("Metadata") != "true":
            return self._refuse(
                handler, 400, "invalid_request", "Required metadata header not specified"
            )
        if handler.headers.get("X-Forwarded-For"):
            return self._refuse(
                handler, 400, "invalid_request", "Request contains forwarded header"
            )
        if not query.get("api-version") or not query.get("resource"):
            return self._refuse(handler, 400, "invalid_request", "Required query variable missing")
        identity = self._identity(query)
        if identity is None:
            return self._refuse(handler, 400, "invalid_request", "Identity not found")
        token, issued = self._issue(identity, query["resource"], "imds")
        self.counted("imds_token")
        self._json(
            handler,
            200,
            {
                "access_token": token,
                "client_id": identity,
                "expires_in": str(self.lifetime),
                "expires_on": str(issued.expires_on),
                "ext_expires_in": str(self.lifetime),
                "not_before": str(issued.expires_on - self.lifetime),
                "resource": issued.resource,
                "token_type": "Bearer",
            },
        )

    def _app_service(self, handler: BaseHTTPRequestHandler, query: dict[str, str]) -> None:
        if handler.headers.get("X-IDENTITY-HEADER") != self.identity_header:
            return self._refuse(
                handler, 401, "unauthorized", "X-IDENTITY-HEADER is missing or wrong"
            )
        if not query.get("api-version") or not query.get("resource"):
            return self._refuse(handler, 400, "invalid_request", "Required query variable missing")
        identity = self._identity(query)
        if identity is None:
            return self._refuse(handler, 400, "invalid_request", "Identity not found")
        token, issued = self._issue(identity, query["resource"], "app-service")
        self.counted("app_service_token")
        self._json(
            handler,
            200,
            {
                "access_token": token,
                "expires_on": str(issued.expires_on),
                "resource": issued.resource,
                "token_type": "Bearer",
                "client_id": identity,
            },
        )

    def _identity(self, query: dict[str, str]) -> str | None:
        """The identity asked for, if assigned here (by client ID only; an object or resource
        ID, which the real endpoints also take, is never assigned here)."""
        if any(k in query for k in ("object_id", "msi_res_id", "mi_res_id", "principal_id")):
            return None
        client_id = query.get("client_id")
        if client_id is None:
            return SYSTEM_ASSIGNED if self.system_assigned else None
        return client_id if client_id in self.user_assigned else None

    def _issue(self, identity: str, resource: str, endpoint: str) -> tuple[str, Issued]:
        token = "eyJ0eXAiOiJKV1QiLCJtaSI6MX0." + secrets.token_urlsafe(32)
        issued = Issued(identity, resource, int(time.time()) + self.lifetime, endpoint)
        with self._tokens_lock:
            self._tokens[token] = issued
        self.remember(token)
        return token, issued

    def _refuse(
        self, handler: BaseHTTPRequestHandler, status: int, error: str, description: str
    ) -> None:
        """IMDS answers an OAuth error; App Service a status and a message."""
        self.counted("refused")
        if urlsplit(handler.path).path == APP_SERVICE_PATH:
            self._json(handler, status, {"statusCode": status, "message": description})
        else:
            self._json(handler, status, {"error": error, "error_description": description})

    def _json(self, handler: BaseHTTPRequestHandler, status: int, body: dict[str, Any]) -> None:
        self.reply(handler, status, json.dumps(body).encode(), "application/json")
