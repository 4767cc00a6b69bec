"""A small proxy in front of moto's STS that does what moto does not and what tests need:

* verifies the web identity token of ``AssumeRoleWithWebIdentity`` — RS256 signature against the
  trusted issuer's JWKS, issuer, audience, expiry — and that the role is one it knows, answering
  like STS (``InvalidIdentityToken``, ``AccessDenied``) otherwise;
* shortens the session it returns to ``lifetime`` seconds (STS refuses durations under 900 s,
  and boto3 checks that client-side, so short-lived test sessions come from here);
* counts and timestamps calls, and can be switched to fail (503) or hang.
"""

from __future__ import annotations

import re
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs

import jwt

from controllers.devenv.standins.httpstub import Stub

ASSUME = "AssumeRoleWithWebIdentity"


@dataclass(frozen=True)
class Call:
    action: str
    at: float
    session: str


def aws_error(code: str, message: str, kind: str = "Sender") -> bytes:
    return (
        '<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
        f"<Error><Type>{kind}</Type><Code>{code}</Code><Message>{message}</Message></Error>"
        "<RequestId>00000000-0000-0000-0000-000000000000</RequestId></ErrorResponse>"
    ).encode()


class STSProxy(Stub):
    def __init__(self, upstream: str, *, lifetime: int = 60) -> None:
        super().__init__()
        self.upstream = upstream
        self.lifetime = lifetime
        self.trusted: dict[str, tuple[dict[str, Any], str]] = {}  # issuer → (JWKS, audience)
        self.roles: set[str] = set()
        self.calls: list[Call] = []
        self._calls_lock = threading.Lock()

    def trust(self, issuer: str, jwks: dict[str, Any], audience: str) -> None:
        self.trusted[issuer] = (jwks, audience)

    def calls_of(self, action: str, session: str | None = None) -> list[Call]:
        with self._calls_lock:
            return [
                c
                for c in self.calls
                if c.action == action and (session is None or c.session == session)
            ]

    def failure_body(self) -> bytes:
        return aws_error("ServiceUnavailable", "Service is unavailable", "Receiver")

    def failure_content_type(self) -> str:
        return "text/xml"

    def handle(self, handler: BaseHTTPRequestHandler, method: str, body: bytes) -> None:
        form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
        action = form.get("Action", "")
        self.counted(action)
        with self._calls_lock:
            self.calls.append(Call(action, time.time(), form.get("RoleSessionName", "")))
        if action == ASSUME:
            problem = self._check_web_identity(form)
            if problem is not None:
                code, message = problem
                self.reply(
                    handler,
                    403 if code == "AccessDenied" else 400,
                    aws_error(code, message),
                    "text/xml",
                )
                return
        status, answer, content_type = self._forward(handler, body)
        if action == ASSUME and status == 200:
            expiry = datetime.fromtimestamp(time.time() + self.lifetime, tz=UTC).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            )
            answer = re.sub(
                rb"<Expiration>[^<]*</Expiration>",
                f"<Expiration>{expiry}</Expiration>".encode(),
                answer,
            )
        self.reply(handler, status, answer, content_type)

    def _check_web_identity(self, form: dict[str, str]) -> tuple[str, str] | None:
        token = form.get("WebIdentityToken", "")
        try:
            issuer = jwt.decode(token, options={"verify_signature": False}).get("iss", "")
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return "InvalidIdentityToken", "the web identity token is not a JWT"
        if issuer not in self.trusted:
            return "InvalidIdentityToken", "no OpenIDConnect provider found for this issuer"
        jwks, audience = self.trusted[issuer]
        key = next((k for k in jwks["keys"] if k.get("kid") == header.get("kid")), None)
        if key is None:
            return "InvalidIdentityToken", "unknown signing key"
        try:
            jwt.decode(
                token,
                key=jwt.PyJWK(key).key,
                algorithms=["RS256"],
                audience=audience,
                issuer=issuer,
            )
        except jwt.PyJWTError as exc:
            return "InvalidIdentityToken", f"token rejected: {type(exc).__name__}"
        if form.get("RoleArn") not in self.roles:
            return "AccessDenied", "Not authorized to perform sts:AssumeRoleWithWebIdentity"
        return None

    def _forward(self, handler: BaseHTTPRequestHandler, body: bytes) -> tuple[int, bytes, str]:
        headers = {
            k: v
            for k, v in handler.headers.items()
            if k.lower()
            in (
                "content-type",
                "authorization",
                "x-amz-date",
                "x-amz-security-token",
                "x-amz-content-sha256",
            )
        }
        request = urllib.request.Request(  # noqa: S310 - the upstream is moto on loopback
            self.upstream + "/", data=body, headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - loopback
                return (
                    response.status,
                    response.read(),
                    response.headers.get("Content-Type", "text/xml"),
                )
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(), exc.headers.get("Content-Type", "text/xml")
