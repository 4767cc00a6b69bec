"""OIDC client-credentials tokens, for exchanging with AWS STS, GCP STS or Azure AD.

Discovery (``/.well-known/openid-configuration``) finds the token endpoint; the token is cached
per issuer and client until shortly before it expires, and when it must be fetched, one caller
fetches while the others for the same client wait for that result (kopf's credential Vault
shape) — a burst of policies sharing a client makes one request, not fifty. Discovery is
single-flight per issuer the same way.

Issuers belong to tenants, and one tenant's slow issuer must not stall everyone else's
rotations, so every call is fenced in:

* one **deadline** per :meth:`TokenSource.token` (waiting for another caller's fetch, discovery,
  the token request: connect, headers and body together). A socket timeout bounds each read,
  not their sum — an issuer that trickles a byte a second would hold a policy worker for
  minutes — so each HTTP exchange is watched by a timer that shuts its socket down when the
  deadline passes (what urllib3's timeout notes recommend for a wall-clock limit);
* response bodies of at most ``max_body`` bytes (1 MiB), read as a stream;
* a **bulkhead per host** (host and port of the URL called): a slow issuer fills its own slots,
  not those of other issuers;
* **negative caching**: a failed discovery or token fetch is remembered for a short backoff
  (5 s, doubling while it keeps failing, at most 1 min), so the callers that queued behind it
  fail at once instead of re-fetching one after another; while a retry of a failing key is in
  flight, other callers fail at once rather than wait for it.

Issuers must be ``https``: the client secret is posted to the token endpoint, and an ``http``
URL would send it in clear. ``allow_insecure`` (``--allow-insecure-oidc-issuers``) permits
``http`` for local development only.

``requests`` is the HTTP client (already a dependency of the kubernetes package); the
client-credentials grant is three form fields, not worth a framework.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit

import requests
import requests.adapters
import urllib3
import urllib3.connection
import urllib3.exceptions
import urllib3.poolmanager
import urllib3.response

from rotator import errors, providercalls
from rotator.bulkhead import Bulkheads
from rotator.observe import NoObserver, Observer

PROVIDER = "oidc"
REFRESH_MARGIN = 60.0
"""A cached token is replaced when it has less than this many seconds left (or under half its
lifetime, for short-lived tokens)."""
DEADLINE = 10.0
"""Seconds one :meth:`TokenSource.token` call may take, all waiting and HTTP included."""
MAX_BODY = 1 << 20
"""Bytes a discovery document or token response may have."""
FAILURE_BACKOFF = 5.0
"""Seconds a failed discovery or token fetch is remembered; doubles per repeated failure."""
FAILURE_BACKOFF_CAP = 60.0
DISCOVERY_TTL = 3600.0
"""Seconds a discovered token endpoint is reused."""
SLOT_WAIT = 1.0
"""Seconds a call waits for a slot of its host's bulkhead (less if the deadline is nearer)."""
DEADLINE_GRACE = 0.5
"""Seconds past the deadline the caller waits for an exchange the watch is cutting."""
INSECURE_FLAG = "--allow-insecure-oidc-issuers"


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


@dataclass(frozen=True)
class Token:
    value: str = field(repr=False)
    issued_at: float
    expires_at: float

    def fresh(self, now: float) -> bool:
        margin = min(REFRESH_MARGIN, (self.expires_at - self.issued_at) / 2)
        return now < self.expires_at - margin


class TokenSource:
    """Client-credentials tokens from OIDC issuers, cached and fetched once per client, each
    call bounded by one deadline (see the module docstring). A ``session`` passed in gets
    rotator's adapters mounted, whose connections the deadline can cut."""

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
        self._session = session or requests.Session()
        adapter = _WatchedAdapter()
        self._session.mount("https://", adapter)
        self._session.mount("http://", adapter)
        self._deadline = deadline
        self._max_body = max_body
        self._allow_insecure = allow_insecure
        self._bulkheads = Bulkheads("OIDC issuer", limit=concurrency)
        self._observer = observer or NoObserver()
        self._clock = clock
        self._monotonic = monotonic
        self._tokens: _SingleFlight[Token] = _SingleFlight(
            fresh=lambda token: token.fresh(self._clock()),
            backoff=failure_backoff,
            clock=clock,
            monotonic=monotonic,
        )
        self._endpoints: _SingleFlight[tuple[str, float]] = _SingleFlight(  # (endpoint, found at)
            fresh=lambda found: self._clock() - found[1] < DISCOVERY_TTL,
            backoff=failure_backoff,
            clock=clock,
            monotonic=monotonic,
        )

    def token(self, client: Client) -> Token:
        """A fresh token for ``client``; raises :class:`InsecureIssuer` for an ``http`` issuer
        (unless allowed) and :class:`~rotator.errors.ProviderUnavailable` when the deadline
        passes — never blocks much longer than the deadline."""
        self._check_scheme(client.issuer, f"issuer {_where(client.issuer)}")
        deadline = self._monotonic() + self._deadline
        return self._tokens.get(
            client.cache_key(),
            lambda: self._fetch(client, deadline),
            deadline=deadline,
            what=f"an OIDC token from {_where(client.issuer)}",
        )

    def _fetch(self, client: Client, deadline: float) -> Token:
        endpoint, _ = self._endpoints.get(
            (client.issuer,),
            lambda: self._discover(client.issuer, deadline),
            deadline=deadline,
            what=f"the OIDC discovery of {_where(client.issuer)}",
        )
        form = {"grant_type": "client_credentials", "client_id": client.client_id}
        form["client_secret"] = client.client_secret
        if client.scopes:
            form["scope"] = " ".join(client.scopes)
        if client.audience:
            form["audience"] = client.audience
        now = self._clock()
        body = self._call("token", "POST", endpoint, deadline, data=form)
        value = body.get("access_token")
        if not isinstance(value, str) or not value:
            raise errors.ProviderRejected(
                f"the token endpoint of {_where(client.issuer)} returned no access_token"
            )
        expires_in = body.get("expires_in")
        try:
            lifetime = float(expires_in) if isinstance(expires_in, int | float | str) else 300.0
        except ValueError:
            lifetime = 300.0
        return Token(value, now, now + lifetime)

    def _discover(self, issuer: str, deadline: float) -> tuple[str, float]:
        url = issuer.rstrip("/") + "/.well-known/openid-configuration"
        endpoint = self._call("discovery", "GET", url, deadline).get("token_endpoint")
        if not isinstance(endpoint, str) or not endpoint:
            raise errors.ProviderRejected(
                f"the discovery document of {_where(issuer)} has no token_endpoint"
            )
        scheme = urlsplit(endpoint).scheme
        if scheme != "https" and not (scheme == "http" and self._allow_insecure):
            # permanent until the issuer's document changes: remembered like any failure
            raise errors.ProviderRejected(
                f"the discovery document of {_where(issuer)} names a token endpoint that is not "
                f"https ({_where(endpoint)}); rotator sends client secrets only over TLS"
            )
        return endpoint, self._clock()

    def _check_scheme(self, url: str, what: str) -> None:
        scheme = urlsplit(url).scheme
        if scheme == "https" or (scheme == "http" and self._allow_insecure):
            return
        if scheme == "http":
            raise InsecureIssuer(
                f"{what} is not https: rotator sends OIDC client secrets only over TLS (a "
                f"controller for local development may allow http with {INSECURE_FLAG})"
            )
        raise InsecureIssuer(f"{what} is not an https URL")

    def _call(
        self, call: str, method: str, url: str, deadline: float, **kwargs: Any
    ) -> dict[str, object]:
        where = _where(url)
        remaining = deadline - self._monotonic()
        if remaining <= 0:
            self._observer.provider_request(provider=PROVIDER, call=call, code="DeadlineExceeded")
            raise errors.ProviderUnavailable(
                f"OIDC {call} at {where} not attempted: the {self._deadline:g} s deadline passed"
            )
        status, body, failure = self._fenced_exchange(method, url, deadline, remaining, **kwargs)
        if failure is not None:
            self._observer.provider_request(provider=PROVIDER, call=call, code=failure)
            if failure == "DeadlineExceeded":
                raise errors.ProviderUnavailable(
                    f"OIDC {call} at {where} got no complete answer within {self._deadline:g} s"
                )
            if failure == "ResponseTooLarge":
                raise errors.ProviderUnavailable(
                    f"OIDC {call} at {where} answered more than {self._max_body} bytes"
                )
            raise errors.ProviderUnavailable(f"OIDC {call} at {where} failed: {failure}")
        self._observer.provider_request(provider=PROVIDER, call=call, code=str(status))
        if status >= 500 or status == 429:
            raise errors.ProviderUnavailable(f"OIDC {call} at {where}: HTTP {status}")
        if 300 <= status < 400:
            raise errors.ProviderRejected(
                f"OIDC {call} at {where} answered HTTP {status}: redirects are not followed"
            )
        parsed = _json(body)
        if status >= 400:
            why = _oauth_error(parsed)
            raise errors.ProviderRejected(
                f"OIDC {call} at {where} refused: HTTP {status} {why}".rstrip()
            )
        if parsed is None:
            raise errors.ProviderUnavailable(f"OIDC {call} at {where} did not return JSON")
        if not isinstance(parsed, dict):
            raise errors.ProviderUnavailable(f"OIDC {call} at {where} did not return a JSON object")
        return parsed

    def _fenced_exchange(
        self, method: str, url: str, deadline: float, remaining: float, **kwargs: Any
    ) -> tuple[int, bytes, str | None]:
        """:meth:`_exchange` in a slot of the host's bulkhead, on a thread of its own, waited for
        until the deadline. The watch of :meth:`_exchange` cuts a socket that trickles, but the
        name lookup before it has no socket to cut (``getaddrinfo`` blocks for the resolver's
        timeouts and retries, tens of seconds with Kubernetes' ``ndots:5`` search list), so the
        caller stops waiting at the deadline; the abandoned exchange keeps its slot until it
        ends, so a host whose name does not resolve holds at most its own slots."""
        bulkhead = self._bulkheads.of(_host(url))
        bulkhead.acquire(wait=min(SLOT_WAIT, remaining))
        future = providercalls.start(
            lambda: self._exchange(method, url, deadline, **kwargs),
            release=bulkhead.release,
            name=f"OIDC {_host(url)}",
        )
        while True:
            left = deadline - self._monotonic()
            try:
                # a little past the deadline: the watch reports a cut exchange itself
                return future.result(timeout=max(0.0, left) + DEADLINE_GRACE)
            except concurrent.futures.TimeoutError:
                if deadline - self._monotonic() <= 0:
                    return 0, b"", "DeadlineExceeded"

    def _exchange(
        self, method: str, url: str, deadline: float, **kwargs: Any
    ) -> tuple[int, bytes, str | None]:
        """One HTTP exchange that ends by ``deadline``: (status, body, None), or (0, b"", what
        went wrong) — ``DeadlineExceeded``, ``ResponseTooLarge``, ``CompressedResponse`` or an
        exception's type name (never its text, which may quote the response)."""
        remaining = max(0.001, deadline - self._monotonic())
        watch = _Watch()
        timer = threading.Timer(remaining, watch.expire)
        timer.daemon = True
        _current.watch = watch
        timer.start()
        try:
            response = self._session.request(
                method,
                url,
                timeout=(remaining, remaining),
                stream=True,
                allow_redirects=False,
                headers={"Accept": "application/json", "Accept-Encoding": "identity"},
                **kwargs,
            )
            try:
                body = _read_capped(response, self._max_body, watch)
            finally:
                response.close()
        except _Unusable as exc:
            return 0, b"", exc.code
        except (
            requests.RequestException,
            urllib3.exceptions.HTTPError,
            http.client.HTTPException,
            OSError,
            ValueError,
        ) as exc:
            return 0, b"", "DeadlineExceeded" if watch.expired else type(exc).__name__
        finally:
            _current.watch = None
            timer.cancel()
            watch.finish()
        if watch.expired:  # the shut-down socket read as the end of a complete body
            return 0, b"", "DeadlineExceeded"
        return response.status_code, body, None


T = TypeVar("T")


@dataclass(frozen=True)
class _Failure:
    error: type[errors.CredentialError]
    message: str
    count: int
    retry_at: float
    """Monotonic time before which the failure is reported instead of fetching again."""

    def raised(self, note: str) -> errors.CredentialError:
        exc = self.error(f"{self.message}; {note}")
        exc.remembered = self.message  # type: ignore[attr-defined]
        return exc


class _SingleFlight(Generic[T]):
    """Per key: the value while it is fresh, at most one fetch at a time, and the last failure.

    A caller finding a fetch in flight waits for it until its deadline and takes its result —
    or its failure, which stays remembered for a backoff, so the queue behind a failing fetch
    drains at once instead of fetching again one by one. Once a key has failed, callers do not
    queue behind its next attempt either: they fail at once with the remembered failure."""

    def __init__(
        self,
        *,
        fresh: Callable[[T], bool],
        backoff: float,
        clock: Callable[[], float],
        monotonic: Callable[[], float],
    ) -> None:
        self._fresh = fresh
        self._backoff = backoff
        self._clock = clock
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._values: dict[tuple[str, ...], T] = {}
        self._failures: dict[tuple[str, ...], _Failure] = {}
        self._gates: dict[tuple[str, ...], threading.Lock] = {}

    def get(self, key: tuple[str, ...], fetch: Callable[[], T], *, deadline: float, what: str) -> T:
        with self._lock:
            found = self._remembered(key)
            if found is not None:
                return found
            gate = self._gates.setdefault(key, threading.Lock())
            failed = self._failures.get(key)
        if not gate.acquire(blocking=False):
            if failed is not None:
                raise failed.raised("a retry is in flight") from None
            if not gate.acquire(timeout=max(0.0, deadline - self._monotonic())):
                raise errors.ProviderUnavailable(
                    f"{what} did not arrive in time: another request for it has been in flight "
                    "for the whole deadline (the issuer is slow)"
                )
        try:
            with self._lock:
                found = self._remembered(key)  # what the fetch we waited for got, or its failure
                if found is not None:
                    return found
            try:
                value = fetch()
            except errors.CredentialError as exc:
                with self._lock:
                    self._remember_failure(key, exc)
                raise
            with self._lock:
                self._values[key] = value
                self._failures.pop(key, None)
            return value
        finally:
            gate.release()

    def _remembered(self, key: tuple[str, ...]) -> T | None:
        """The fresh value, None, or raises the failure still within its backoff."""
        value = self._values.get(key)
        if value is not None and self._fresh(value):
            return value
        failure = self._failures.get(key)
        if failure is not None and self._monotonic() < failure.retry_at:
            retry = self._clock() + (failure.retry_at - self._monotonic())
            raise failure.raised(f"not retried before {_hms(retry)}") from None
        return None

    def _remember_failure(self, key: tuple[str, ...], exc: errors.CredentialError) -> None:
        previous = self._failures.get(key)
        count = previous.count + 1 if previous is not None else 1
        delay = min(FAILURE_BACKOFF_CAP, self._backoff * 2 ** min(count - 1, 16))
        # a failure re-raised from another key's memory (discovery's, in a token fetch) keeps
        # its first message, so notes do not pile up
        message = str(getattr(exc, "remembered", exc))
        self._failures[key] = _Failure(type(exc), message, count, self._monotonic() + delay)


# --- HTTP with a wall-clock deadline ---------------------------------------------------------


class _Unusable(Exception):
    """A response rotator will not read further; ``code`` names why."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


class _Watch:
    """The sockets of one HTTP exchange; :meth:`expire` (from the timer thread) shuts them down,
    which ends a blocked read at once — a read then sees the end of the stream."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._finished = False
        self.expired = False

    def add(self, sock: socket.socket) -> None:
        with self._lock:
            if self._finished:
                return
            if self.expired:
                _shut(sock)
            elif all(s is not sock for s in self._sockets):
                self._sockets.append(sock)

    def expire(self) -> None:
        with self._lock:
            if self._finished:  # the connection may be back in the pool, serving someone else
                return
            self.expired = True
            for sock in self._sockets:
                _shut(sock)

    def finish(self) -> None:
        with self._lock:
            self._finished = True
            self._sockets.clear()


def _shut(sock: socket.socket) -> None:
    # The plain socket's shutdown even for a TLS socket: SSLSocket.shutdown would also drop its
    # TLS state under the reading thread's feet.
    with contextlib.suppress(OSError, TypeError, ValueError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


_current = threading.local()
"""The :class:`_Watch` of the exchange this thread is making, for the connections it uses."""


def _watch_current(sock: socket.socket | None) -> None:
    watch: _Watch | None = getattr(_current, "watch", None)
    if watch is not None and sock is not None:
        watch.add(sock)


class _Watched(urllib3.connection.HTTPConnection):
    """Hands its socket to the current exchange's watch: once connected (the connect itself is
    bounded by the connect timeout, the TLS handshake by one socket timeout in all), and at each
    response (a pooled connection is reused without connecting). Mixed into both connection
    classes, before them in the MRO."""

    def connect(self) -> None:
        super().connect()
        _watch_current(self.sock)

    def getresponse(self) -> urllib3.response.HTTPResponse:  # type: ignore[override]
        _watch_current(self.sock)
        return super().getresponse()


class _WatchedHTTPConnection(_Watched):
    pass


class _WatchedHTTPSConnection(_Watched, urllib3.connection.HTTPSConnection):
    pass


class _WatchedHTTPPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


_POOLS = {"http": _WatchedHTTPPool, "https": _WatchedHTTPSPool}


class _WatchedAdapter(requests.adapters.HTTPAdapter):
    """requests' adapter with connections a :class:`_Watch` can cut (proxies included; a SOCKS
    proxy keeps its own classes, and its exchanges are bounded between reads only)."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _POOLS

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if manager.pool_classes_by_scheme is urllib3.poolmanager.pool_classes_by_scheme:
            manager.pool_classes_by_scheme = _POOLS
        return manager


def _read_capped(response: requests.Response, cap: int, watch: _Watch) -> bytes:
    """The body, up to ``cap`` bytes; uncompressed only (a small gzip body can inflate to far
    more than the cap, and rotator asked for ``identity``)."""
    encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise _Unusable("CompressedResponse")
    length = response.headers.get("Content-Length", "")
    if length.isdigit() and int(length) > cap:
        raise _Unusable("ResponseTooLarge")
    chunks: list[bytes] = []
    size = 0
    for chunk in response.raw.stream(16384, decode_content=False):
        size += len(chunk)
        if size > cap:
            raise _Unusable("ResponseTooLarge")
        if watch.expired:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _json(body: bytes) -> object | None:
    try:
        parsed: object = json.loads(body)
    except ValueError:
        return None
    return parsed


def _oauth_error(body: object | None) -> str:
    """The OAuth ``error`` code (never the description, which some servers fill with input)."""
    code = body.get("error") if isinstance(body, dict) else None
    return str(code) if isinstance(code, str) and code.replace("_", "").isalnum() else ""


def _host(url: str) -> str:
    """host:port — the key of a bulkhead (userinfo left out: it may hold a password)."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    default = 443 if parts.scheme == "https" else 80
    return f"{(parts.hostname or '').lower()}:{port or default}"


def _where(url: str) -> str:
    """A URL for messages: without userinfo, query or fragment."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return f"{parts.scheme}://{netloc}{parts.path}"


def _hms(t: float) -> str:
    return time.strftime("%H:%M:%SZ", time.gmtime(t))
