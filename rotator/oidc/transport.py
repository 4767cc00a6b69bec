"""HTTP to OIDC issuers that ends by a wall-clock deadline, with bodies of at most ``max_body``.

Why a transport of its own, when :meth:`rotator.providercalls.ProviderCalls.run` already stops
waiting at the deadline: ``run`` can abandon a call, not end it. A socket timeout bounds each
read, not their sum, so an issuer that trickles a byte a second keeps an abandoned exchange
reading — and its slot of the host's bulkhead taken — for minutes; a few such calls and the
host's bulkhead refuses everything (``BulkheadFull``) long after each caller gave up. Only
closing the socket ends a read blocked in ``recv``, and Python offers no way to interrupt a
thread from outside. So each exchange is watched by a timer that shuts its sockets down when the
deadline passes (what urllib3's timeout notes recommend for a wall-clock limit), and the slot is
given back within moments of the deadline. The name lookup before it has no socket to cut
(``getaddrinfo`` blocks for the resolver's timeouts and retries): there ``run``'s abandoning is
what bounds the caller, and the lookup keeps its slot until it ends.

``requests`` is the HTTP client (already a dependency of the kubernetes package): the
client-credentials grant is three form fields, not worth a framework.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import requests
import requests.adapters
import urllib3
import urllib3.connection
import urllib3.exceptions
import urllib3.poolmanager
import urllib3.response

from rotator.oidc.failures import Unusable
from rotator.providercalls import DEADLINE_EXCEEDED, Failure


class Transport:
    """HTTP exchanges on one ``requests`` session, each ended by its deadline (see the module
    docstring). A ``session`` passed in gets rotator's adapters mounted."""

    def __init__(
        self,
        *,
        max_body: int,
        session: requests.Session | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._session = session or requests.Session()
        adapter = _WatchedAdapter()
        self._session.mount("https://", adapter)
        self._session.mount("http://", adapter)
        self.max_body = max_body
        self._monotonic = monotonic

    def exchange(self, method: str, url: str, deadline: float, **kwargs: Any) -> tuple[int, bytes]:
        """One HTTP exchange that ends by ``deadline`` (monotonic): its status and body, or
        :class:`Unusable` — ``DeadlineExceeded``, ``ResponseTooLarge``, ``CompressedResponse``
        or an exception's type name (never its text, which may quote the response)."""
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
                body = _read_capped(response, self.max_body, watch)
            finally:
                response.close()
        except (
            requests.RequestException,
            urllib3.exceptions.HTTPError,
            http.client.HTTPException,
            OSError,
            ValueError,
        ) as exc:
            code = DEADLINE_EXCEEDED if watch.expired else type(exc).__name__
            raise Unusable(Failure(code, transient=True)) from None
        finally:
            _current.watch = None
            timer.cancel()
            watch.finish()
        if watch.expired:  # the shut-down socket read as the end of a complete body
            raise Unusable(Failure(DEADLINE_EXCEEDED, transient=True))
        return response.status_code, body


def _read_capped(response: requests.Response, cap: int, watch: _Watch) -> bytes:
    """The body, up to ``cap`` bytes; uncompressed only (a small gzip body can inflate to far
    more than the cap, and rotator asked for ``identity``)."""
    encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise Unusable(Failure("CompressedResponse", transient=True))
    too_large = Unusable(
        Failure("ResponseTooLarge", transient=True, shown=f"answered more than {cap} bytes")
    )
    length = response.headers.get("Content-Length", "")
    if length.isdigit() and int(length) > cap:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    for chunk in response.raw.stream(16384, decode_content=False):
        size += len(chunk)
        if size > cap:
            raise too_large
        if watch.expired:
            break
        chunks.append(chunk)
    return b"".join(chunks)


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
