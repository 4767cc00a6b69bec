"""A small proxy in front of moto's STS that does what moto does not and what tests need:

* verifies the web identity token of ``AssumeRoleWithWebIdentity`` — RS256 signature against the
  trusted issuer's JWKS, issuer, audience, expiry — and that the role is one it knows, answering
  like STS (``InvalidIdentityToken``, ``AccessDenied``) otherwise;
* shortens the session it returns to ``lifetime`` seconds (STS refuses durations under 900 s,
  and boto3 checks that client-side, so short-lived test sessions come from here);
* answers ``AssumeRole`` (role chaining) only for a role that trusts whoever signed the request
  — the principal the :class:`~rotator_devkit.devenv.standins.aws.Keyring` recorded for the
  signing key, with the external ID the trust names (:meth:`STSProxy.allow_assume`) — and
  ``AccessDenied`` otherwise, as STS does; its sessions live ``chained_lifetime`` seconds;
* checks the SigV4 signature of every other call (``GetCallerIdentity``: "this credential
  works") against what it and the IAM proxy issued, kept in a shared
  :class:`~rotator_devkit.devenv.standins.aws.Keyring` — moto itself checks no signature — and
  refuses keys nobody here issued, a wrong secret key or session token, an expired session;
* keeps in :attr:`issued` every secret it handed out or was given (session secret keys and
  tokens, web identity tokens), for leak scans;
* counts and timestamps calls, gauges the calls in flight (and their peak: the bulkhead
  test), and can be switched to fail (503) or hang.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs

import jwt

from rotator_devkit.devenv.standins import aws
from rotator_devkit.devenv.standins.aws import aws_error
from rotator_devkit.devenv.standins.httpstub import Stub

ASSUME = "AssumeRoleWithWebIdentity"
ASSUME_ROLE = "AssumeRole"


@dataclass(frozen=True)
class Trust:
    """Who may assume a role with ``AssumeRole``: role or user ARNs, and the external ID the
    role's trust policy requires (None: none)."""

    principals: frozenset[str]
    external_id: str | None = None


@dataclass(frozen=True)
class Call:
    action: str
    at: float
    session: str


class STSProxy(Stub):
    def __init__(
        self, upstream: str, *, lifetime: int = 60, keyring: aws.Keyring | None = None
    ) -> None:
        super().__init__()
        self.upstream = upstream
        self.lifetime = lifetime
        self.keyring = keyring or aws.Keyring()
        self.trusted: dict[str, tuple[dict[str, Any], str]] = {}  # issuer → (JWKS, audience)
        self.roles: set[str] = set()
        self.assumable: dict[str, Trust] = {}  # role ARN → who may assume it (AssumeRole)
        self.chained_lifetime: int | None = None
        """Seconds an ``AssumeRole`` session lives; None: ``lifetime``."""
        self.calls: list[Call] = []
        self._calls_lock = threading.Lock()
        self._in_flight = 0
        self._peak_in_flight = 0
        self._unanswered = threading.local()  # this handler thread's request is still counted

    def trust(self, issuer: str, jwks: dict[str, Any], audience: str) -> None:
        self.trusted[issuer] = (jwks, audience)

    def allow_assume(self, role_arn: str, *principals: str, external_id: str | None = None) -> None:
        """Lets ``principals`` (role or user ARNs) assume ``role_arn`` with ``AssumeRole``, as
        well as those already trusted; ``external_id`` replaces the one required."""
        trusted = self.assumable.get(role_arn)
        known = trusted.principals if trusted is not None else frozenset()
        self.assumable[role_arn] = Trust(known | frozenset(principals), external_id)

    def calls_of(self, action: str, session: str | None = None) -> list[Call]:
        with self._calls_lock:
            return [
                c
                for c in self.calls
                if c.action == action and (session is None or c.session == session)
            ]

    @property
    def in_flight(self) -> int:
        """Requests received and not yet answered."""
        with self._calls_lock:
            return self._in_flight

    @property
    def peak_in_flight(self) -> int:
        """The most requests in flight at once since :meth:`reset_peak`."""
        with self._calls_lock:
            return self._peak_in_flight

    def reset_peak(self) -> None:
        with self._calls_lock:
            self._peak_in_flight = self._in_flight

    def _dispatch(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        """Counts the request in flight from its arrival until its answer starts. Both ends are
        inside the client's call (it sends after taking its bulkhead slot and frees the slot
        only after reading the answer), so the count never exceeds the client's own: a peak
        above a client's limit is a real breach, not a race of the gauge."""
        with self._calls_lock:
            self._in_flight += 1
            self._peak_in_flight = max(self._peak_in_flight, self._in_flight)
        with self._lock:
            self._unanswered.held = self.mode == "hang"
        self._unanswered.pending = True
        try:
            super()._dispatch(handler, method)
        finally:
            self._answering()

    def _answering(self) -> None:
        """Uncounts this thread's request; ``count("answered_held")`` counts the answers to
        requests that arrived while hanging."""
        if getattr(self._unanswered, "pending", False):
            self._unanswered.pending = False
            with self._calls_lock:
                self._in_flight -= 1
            if self._unanswered.held:
                self.counted("answered_held")

    def reply(  # type: ignore[override]  # an instance method: uncounts, then answers
        self, handler: BaseHTTPRequestHandler, status: int, body: bytes, content_type: str
    ) -> None:
        self._answering()
        Stub.reply(handler, status, body, content_type)

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
            self.remember(form.get("WebIdentityToken", ""))
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
        else:
            refusal = aws.verify_received(
                self.keyring, handler, body, scheme=self.scheme, now=time.time()
            )
            if refusal is not None:
                self.counted(f"refused_{refusal.code}")
                self.reply(handler, refusal.status, refusal.body(), "text/xml")
                return
            if action == ASSUME_ROLE and (denied := self._check_trust(handler, form)) is not None:
                self.counted("refused_AccessDenied")
                self.reply(handler, 403, aws_error("AccessDenied", denied), "text/xml")
                return
        status, answer, content_type = aws.forward(self.upstream, handler, body)
        if action in (ASSUME, ASSUME_ROLE) and status == 200:
            lifetime = self.lifetime
            if action == ASSUME_ROLE and self.chained_lifetime is not None:
                lifetime = self.chained_lifetime
            expires_at = float(int(time.time() + lifetime))  # whole seconds, as shown
            expiry = datetime.fromtimestamp(expires_at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            answer = re.sub(
                rb"<Expiration>[^<]*</Expiration>",
                f"<Expiration>{expiry}</Expiration>".encode(),
                answer,
            )
            self._record(answer, expires_at, form.get("RoleArn"))
        self.reply(handler, status, answer, content_type)

    def _record(self, answer: bytes, expires_at: float, role_arn: str | None) -> None:
        """Keeps the session's secret key and token, to check the signatures made with them and
        for :attr:`issued`, and whose session it is (the role), for :meth:`_check_trust`."""
        issued = aws.issued_in(answer)
        if issued is not None:
            key_id, secret, token = issued
            self.keyring.add(key_id, aws.Issued(secret, token, expires_at, principal=role_arn))
            self.remember(secret, token or "")

    def _check_trust(self, handler: BaseHTTPRequestHandler, form: dict[str, str]) -> str | None:
        """Why STS would refuse this (signed, verified) ``AssumeRole``; None if the role trusts
        the signer, with the external ID it requires."""
        key = aws.signer(handler)
        issued = self.keyring.get(key) if key is not None else None
        caller = issued.principal if issued is not None else None
        role = form.get("RoleArn", "")
        trust = self.assumable.get(role)
        denied = f"User: {caller} is not authorized to perform: sts:AssumeRole on resource: {role}"
        if trust is None or caller not in trust.principals:
            return denied
        if trust.external_id is not None and form.get("ExternalId") != trust.external_id:
            return denied
        return None

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
