"""``/healthz`` and ``/readyz`` probes, and the HTTP servers behind probes and metrics.

A check is a function returning None when healthy or a short reason when not. ``/readyz`` is
meant to fail until the caches have synced (the manager registers that check), so a Service does
not route to, and a rollout does not proceed past, a replica that cannot yet reconcile.
``/healthz`` fails when a thread the process cannot work without has ended — the leader elector,
a controller's workers (:func:`thread_running`, :func:`none_ended`) — so the kubelet restarts a
replica that answers pings but no longer does anything.

Metrics can be served over TLS (:mod:`.tlsserving`) and only to callers the API server
authenticates and authorizes (:mod:`.metricsauth`); probes stay plain HTTP, for the kubelet.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import MetricsHandler

from controllers.runtime import metricsauth, tlsserving

Check = Callable[[], str | None]


def parse_bind_address(address: str) -> tuple[str, int] | None:
    """``":8080"`` → ``("0.0.0.0", 8080)``, ``"127.0.0.1:0"`` → a free port; ``"0"`` → disabled."""
    if address in ("", "0"):
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"bind address {address!r} is not host:port or :port")
    return host or "0.0.0.0", int(port)  # noqa: S104 - ":port" means all interfaces, as in Go


def thread_running(
    thread: Callable[[], threading.Thread | None], *, until: threading.Event
) -> Check:
    """Fails when ``thread()`` has been started and has ended before ``until`` was set."""

    def check() -> str | None:
        t = thread()
        if t is None or t.ident is None or t.is_alive() or until.is_set():
            return None
        return f"thread {t.name} ended"

    return check


def none_ended(ended: Callable[[], Sequence[str]]) -> Check:
    """Fails while ``ended()`` names any thread (e.g. ``Controller.dead_workers``)."""

    def check() -> str | None:
        names = ended()
        return f"threads ended: {', '.join(names)}" if names else None

    return check


class Probes:
    """Named health and readiness checks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._checks: dict[str, dict[str, Check]] = {"/healthz": {}, "/readyz": {}}

    def add_healthz(self, name: str, check: Check) -> None:
        with self._lock:
            self._checks["/healthz"][name] = check

    def add_readyz(self, name: str, check: Check) -> None:
        with self._lock:
            self._checks["/readyz"][name] = check

    def evaluate(self, path: str) -> tuple[bool, list[str]] | None:
        """``(ok, lines)`` for a probe path, None for an unknown path."""
        with self._lock:
            checks = dict(self._checks.get(path) or {}) if path in self._checks else None
        if checks is None:
            return None
        ok, lines = True, []
        for name, check in sorted(checks.items()):
            try:
                problem = check()
            except Exception as exc:
                problem = f"check raised {type(exc).__name__}"
            ok = ok and problem is None
            lines.append(f"[+]{name} ok" if problem is None else f"[-]{name} failed: {problem}")
        return ok, lines


class Server:
    """A threaded HTTP server on its own daemon thread; HTTPS only, when given ``tls``."""

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        *,
        tls: tlsserving.Certificates | None = None,
    ) -> None:
        self._httpd = (
            ThreadingHTTPServer(address, handler)
            if tls is None
            else tlsserving.TLSServer(address, handler, tls)
        )
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def probe_server(address: tuple[str, int], probes: Probes) -> Server:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlsplit(self.path)
            result = probes.evaluate(url.path)
            if result is None:
                self._reply(404, "not found\n")
                return
            ok, lines = result
            verbose = "verbose" in parse_qs(url.query, keep_blank_values=True)
            name = url.path.strip("/")
            summary = f"{name} check passed" if ok else f"{name} check failed"
            body = "\n".join([*lines, summary]) if verbose or not ok else "ok"
            self._reply(200 if ok else 500, body + "\n")

        def _reply(self, status: int, body: str) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass  # probes are polled every few seconds; not worth a log line each

    return Server(address, Handler)


def metrics_server(
    address: tuple[str, int],
    registry: CollectorRegistry,
    *,
    tls: tlsserving.Certificates | None = None,
    auth: metricsauth.Filter | None = None,
) -> Server:
    """Prometheus text for ``registry``; with ``auth``, only to requests it lets through."""

    class Handler(MetricsHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name for the GET handler
            if auth is not None:
                verdict = auth.verdict(
                    self.headers.get("Authorization"),
                    method=self.command,
                    path=urlsplit(self.path).path,
                )
                if not verdict.allowed:
                    self._refuse(verdict)
                    return
            super().do_GET()

        def _refuse(self, verdict: metricsauth.Verdict) -> None:
            data = (verdict.message + "\n").encode()
            self.send_response(verdict.status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    Handler.registry = registry
    return Server(address, Handler, tls=tls)
