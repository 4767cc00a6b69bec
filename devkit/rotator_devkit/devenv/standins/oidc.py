"""A local OIDC issuer that really signs JWTs: discovery, JWKS, and a token endpoint for the
client-credentials grant that checks the client's id and secret. Tokens are RS256, with
``iss``, ``sub`` (the client id), ``aud``, ``iat``, ``exp``. Its :attr:`issued` holds the client
secrets registered and the tokens minted, for leak scans."""

from __future__ import annotations

import json
import time
import uuid
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from rotator_devkit.devenv.standins.httpstub import Stub


class OIDCIssuer(Stub):
    def __init__(self, *, token_lifetime: int = 300) -> None:
        super().__init__()
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = uuid.uuid4().hex[:8]
        self.token_lifetime = token_lifetime
        self.clients: dict[str, str] = {}
        self.default_audience = "sts.amazonaws.com"

    @property
    def issuer(self) -> str:
        return self.url

    def register(self, client_id: str, secret: str) -> None:
        self.clients[client_id] = secret
        self.remember(secret)

    def jwks(self) -> dict[str, Any]:
        public = json.loads(RSAAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [{**public, "kid": self.kid, "use": "sig", "alg": "RS256"}]}

    def handle(self, handler: BaseHTTPRequestHandler, method: str, body: bytes) -> None:
        path = handler.path.split("?")[0]
        if method == "GET" and path == "/.well-known/openid-configuration":
            self.counted("discovery")
            doc = {
                "issuer": self.issuer,
                "token_endpoint": f"{self.issuer}/token",
                "jwks_uri": f"{self.issuer}/jwks",
                "grant_types_supported": ["client_credentials"],
                "token_endpoint_auth_methods_supported": ["client_secret_post"],
                "id_token_signing_alg_values_supported": ["RS256"],
            }
            self.reply(handler, 200, json.dumps(doc).encode(), "application/json")
        elif method == "GET" and path == "/jwks":
            self.counted("jwks")
            self.reply(handler, 200, json.dumps(self.jwks()).encode(), "application/json")
        elif method == "POST" and path == "/token":
            self._token(handler, {k: v[0] for k, v in parse_qs(body.decode()).items()})
        else:
            self.reply(handler, 404, b"{}", "application/json")

    def _token(self, handler: BaseHTTPRequestHandler, form: dict[str, str]) -> None:
        if form.get("grant_type") != "client_credentials":
            self.counted("bad_grant")
            self.reply(handler, 400, b'{"error": "unsupported_grant_type"}', "application/json")
            return
        client_id = form.get("client_id", "")
        if client_id not in self.clients or self.clients[client_id] != form.get("client_secret"):
            self.counted("invalid_client")
            self.reply(handler, 401, b'{"error": "invalid_client"}', "application/json")
            return
        self.counted("token")
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "sub": client_id,
            "aud": form.get("audience") or self.default_audience,
            "iat": now,
            "exp": now + self.token_lifetime,
            "scope": form.get("scope", ""),
        }
        token = jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": self.kid})
        self.remember(token)
        answer = {"access_token": token, "token_type": "Bearer", "expires_in": self.token_lifetime}
        self.reply(handler, 200, json.dumps(answer).encode(), "application/json")
