"""OIDC client-credentials tokens, for exchanging with AWS STS, GCP STS or Azure AD.

Discovery (``/.well-known/openid-configuration``) finds the token endpoint; then the grant
(:mod:`.grant`) posts the client's credentials there. Issuers belong to tenants, and one
tenant's slow issuer must not stall everyone else's rotations, so every call goes through
:class:`~rotator.providercalls.ProviderCalls`, the fence of every provider (provider ``oidc``,
calls ``discovery`` and ``token``: one observation each, errors with their code):

* one **deadline** per :meth:`TokenSource.token` (waiting for another caller's fetch,
  discovery, the token request: connect, headers and body together), which the transport
  (:mod:`.transport`) enforces on the socket itself;
* response bodies of at most ``max_body`` bytes (1 MiB), read as a stream;
* a **bulkhead per host** (host and port of the URL called): a slow issuer fills its own slots,
  not those of other issuers;
* tokens and endpoints cached, single-flight, failures remembered for a backoff (:mod:`.cache`).

Modules: ``grant`` (what is sent and what answers mean), ``transport`` (HTTP cut at the
deadline), ``cache`` (the memory); this facade composes them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rotator import providercalls
from rotator.bulkhead import Bulkheads
from rotator.lazy import Lazy
from rotator.observe import NoObserver, Observer
from rotator.oidc import grant
from rotator.oidc.cache import (
    FAILURE_BACKOFF,
    FAILURE_BACKOFF_CAP,
    MAX_CLIENTS,
    MAX_ISSUERS,
    Remembered,
)
from rotator.oidc.failures import classify
from rotator.oidc.grant import INSECURE_FLAG, REFRESH_MARGIN, Client, InsecureIssuer, Token

if TYPE_CHECKING:
    import requests

    from rotator.oidc.transport import Transport

__all__ = [
    "DEADLINE",
    "DISCOVERY_TTL",
    "FAILURE_BACKOFF",
    "FAILURE_BACKOFF_CAP",
    "INSECURE_FLAG",
    "MAX_BODY",
    "PROVIDER",
    "REFRESH_MARGIN",
    "SLOT_WAIT",
    "Client",
    "InsecureIssuer",
    "Token",
    "TokenSource",
]

PROVIDER = "oidc"
DEADLINE = 10.0
"""Seconds one :meth:`TokenSource.token` call may take, all waiting and HTTP included."""
MAX_BODY = 1 << 20
"""Bytes a discovery document or token response may have."""
DISCOVERY_TTL = 3600.0
"""Seconds a discovered token endpoint is reused."""
SLOT_WAIT = providercalls.SLOT_WAIT
"""Seconds a call waits for a slot of its host's bulkhead (less if the deadline is nearer)."""


class TokenSource:
    """Client-credentials tokens from OIDC issuers, cached and fetched once per client, each
    call bounded by one deadline (see the module docstring). A ``session`` passed in gets
    rotator's adapters mounted, whose connections the deadline can cut, at the first exchange
    (when the transport, and ``requests`` with it, is made)."""

    def __init__(
        self,
        *,
        session: requests.Session | None = None,
        deadline: float = DEADLINE,
        concurrency: int = 4,
        max_body: int = MAX_BODY,
        failure_backoff: float = FAILURE_BACKOFF,
        allow_insecure: bool = False,
        observer: Observer | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._transport: Lazy[Transport] = Lazy(
            lambda: _transport(max_body=max_body, session=session, monotonic=monotonic),
            what="the OIDC transport (requests)",
        )
        self._allow_insecure = allow_insecure
        self._bulkheads = Bulkheads("OIDC issuer", limit=concurrency, wait=SLOT_WAIT)
        self._calls = providercalls.ProviderCalls(
            PROVIDER,
            observer=observer or NoObserver(),
            classify=classify,
            label="OIDC",
            concurrency=concurrency,
            deadline=deadline,
            monotonic=monotonic,
        )
        self._clock = clock
        self._monotonic = monotonic
        self._tokens: Remembered[Token] = Remembered(
            MAX_CLIENTS, backoff=failure_backoff, clock=clock, monotonic=monotonic
        )
        self._endpoints: Remembered[str] = Remembered(
            MAX_ISSUERS, backoff=failure_backoff, clock=clock, monotonic=monotonic
        )

    def token(self, client: Client) -> Token:
        """A fresh token for ``client``; raises :class:`InsecureIssuer` for an ``http`` issuer
        (unless allowed) and :class:`~rotator.errors.ProviderUnavailable` when the deadline
        passes — never blocks much longer than the deadline."""
        where = grant.where(client.issuer)
        grant.check_scheme(client.issuer, f"issuer {where}", allow_insecure=self._allow_insecure)
        deadline = self._monotonic() + self._calls.deadline
        return self._tokens.get(
            client.cache_key(),
            lambda: self._fetch(client, deadline),
            wait=deadline - self._monotonic(),
            what=f"an OIDC token from {where}",
        )

    def _fetch(self, client: Client, deadline: float) -> tuple[Token, float]:
        endpoint = self._endpoints.get(
            (client.issuer,),
            lambda: (self._discover(client.issuer, deadline), DISCOVERY_TTL),
            wait=deadline - self._monotonic(),
            what=f"the OIDC discovery of {grant.where(client.issuer)}",
        )
        issued_at = self._clock()
        answer = self._call(
            "token", "POST", endpoint, deadline, data=client.form(), secret=client.client_secret
        )
        token = grant.token(answer, client.issuer, issued_at=issued_at)
        return token, token.fresh_for(self._clock())

    def _discover(self, issuer: str, deadline: float) -> str:
        document = self._call("discovery", "GET", grant.discovery_url(issuer), deadline)
        return grant.token_endpoint(document, issuer, allow_insecure=self._allow_insecure)

    def _call(
        self, call: str, method: str, url: str, deadline: float, *, secret: str = "", **kwargs: Any
    ) -> dict[str, object]:
        """One exchange through the provider fence, in a slot of its host's bulkhead (``secret``:
        the client secret it sends, kept out of what the answer's error shows). The transport is
        built before the fence, as every provider client is (:mod:`rotator.lazy`): its import
        takes no slot of the issuer's bulkhead and no part of the call's deadline."""
        transport = self._transport.get()
        return self._calls.run(
            call,
            lambda: grant.answer(
                *transport.exchange(method, url, deadline, **kwargs), secret=secret
            ),
            bulkhead=self._bulkheads.of(grant.host(url)),
            deadline=deadline,
            where=grant.where(url),
        )


def _transport(
    *, max_body: int, session: requests.Session | None, monotonic: Callable[[], float]
) -> Transport:
    """The HTTP transport; its module imports ``requests`` (see :mod:`.failures`), which a
    controller without OIDC policies never needs."""
    from rotator.oidc.transport import Transport  # noqa: PLC0415 - requests, on first use

    return Transport(max_body=max_body, session=session, monotonic=monotonic)
