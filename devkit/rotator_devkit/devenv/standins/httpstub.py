"""A base for the local HTTP stand-ins (OIDC issuer, STS proxy, GCP and Azure endpoints): a
threaded server on a free loopback port (or, :meth:`Stub.place`, on a fixed address under a
public host name: a Pod behind a Service), request counting, and switchable failure modes."""

from __future__ import annotations

import json
import ssl
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


class Stub:
    """``mode`` is ``ok``, ``fail`` (503) or ``hang`` (answers after ``hang_seconds``, or when
    the mode changes back). With ``tls`` it serves HTTPS."""

    def __init__(self, *, tls: ssl.SSLContext | None = None) -> None:
        self.mode = "ok"
        self.hang_seconds = 60.0
        self.counts: Counter[str] = Counter()
        self.issued: set[str] = set()
        """Every secret value this stand-in minted or was given (tokens, secret keys, client
        secrets, keys): none may ever show in the controller's logs, Events, statuses or metrics
        (the e2e leak scan checks). Read it through :meth:`issued_values`."""
        self._lock = threading.Lock()
        self._released = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                stub._dispatch(self, "GET")

            def do_POST(self) -> None:
                stub._dispatch(self, "POST")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._handler = Handler
        self._public_host = "127.0.0.1"
        self._serve(("127.0.0.1", 0), tls)

    def _serve(self, address: tuple[str, int], tls: ssl.SSLContext | None) -> None:
        self._server = ThreadingHTTPServer(address, self._handler)
        self._server.daemon_threads = True
        self._scheme = "http"
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
            self._scheme = "https"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def place(
        self, address: tuple[str, int], public_host: str, *, tls: ssl.SSLContext | None = None
    ) -> Self:
        """Serves on ``address`` instead of a free loopback port, and names ``public_host`` in
        :attr:`url` (what clients elsewhere reach it by: a Service's DNS name); over HTTPS with
        ``tls`` (a certificate for ``public_host``), plain HTTP without. Before :meth:`start`."""
        assert not self._thread.is_alive(), "place() a stand-in before starting it"
        self._server.server_close()
        self._serve(address, tls)
        self._public_host = public_host
        return self

    @property
    def scheme(self) -> str:
        return self._scheme

    @property
    def url(self) -> str:
        return f"{self._scheme}://{self._public_host}:{self._server.server_address[1]}"

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.set_mode("ok")
        self._server.shutdown()
        self._server.server_close()

    def set_mode(self, mode: str, *, hang_seconds: float | None = None) -> None:
        """Switches the mode (and, given, :attr:`hang_seconds`) in one step, so that no call
        is held by a hang with the previous bound; an unknown mode changes nothing."""
        if mode not in ("ok", "fail", "hang"):
            raise ValueError(f"no mode {mode!r}: ok, fail or hang")
        with self._lock:
            if hang_seconds is not None:
                self.hang_seconds = hang_seconds
            self.mode = mode
            if mode == "hang":
                self._released.clear()
            else:
                self._released.set()

    def count(self, what: str) -> int:
        with self._lock:
            return self.counts[what]

    def _dispatch(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        self.counted("received")
        with self._lock:
            mode, hold = self.mode, self.hang_seconds
        if mode == "hang":
            self._released.wait(hold)
        if mode == "fail":
            self.reply(handler, 503, self.failure_body(), self.failure_content_type())
            self.counted("failed")
            return
        self.handle(handler, method, body)

    def counted(self, what: str) -> None:
        with self._lock:
            self.counts[what] += 1

    def counts_snapshot(self) -> dict[str, int]:
        """Every count so far, safe while requests are being served."""
        with self._lock:
            return dict(self.counts)

    def remember(self, *values: str) -> None:
        """Records secret values for :attr:`issued` (empty ones are no secret)."""
        with self._lock:
            self.issued.update(v for v in values if v)

    def issued_values(self) -> frozenset[str]:
        """A snapshot of :attr:`issued`, safe while requests are being served."""
        with self._lock:
            return frozenset(self.issued)

    # --- for subclasses ----------------------------------------------------------------------

    def handle(self, handler: BaseHTTPRequestHandler, method: str, body: bytes) -> None:
        raise NotImplementedError

    def failure_body(self) -> bytes:
        return b'{"error": "temporarily_unavailable"}'

    def failure_content_type(self) -> str:
        return "application/json"

    @staticmethod
    def reply(handler: BaseHTTPRequestHandler, status: int, body: bytes, content_type: str) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    @classmethod
    def reply_json(cls, handler: BaseHTTPRequestHandler, status: int, body: Any) -> None:
        cls.reply(handler, status, json.dumps(body).encode(), "application/json")

    @classmethod
    def answer_admin(
        cls,
        handler: BaseHTTPRequestHandler,
        method: str,
        body: bytes,
        *,
        reads: Mapping[str, Callable[[], Any]],
        writes: Mapping[str, Callable[[dict[str, Any]], Any]],
    ) -> None:
        """A small JSON admin API (the dev kit's and the in-cluster stand-ins'): GET of a path in
        ``reads``; POST of a path in ``writes`` with a JSON object, whose ValueError, KeyError,
        TypeError or AssertionError is a 400 naming it; anything else a 404."""
        path = handler.path.split("?")[0].rstrip("/")
        if method == "GET" and path in reads:
            cls.reply_json(handler, 200, reads[path]())
        elif method == "POST" and path in writes:
            try:
                request = json.loads(body or b"{}")
                if not isinstance(request, dict):
                    raise TypeError("the body is not a JSON object")
                answer = writes[path](request)
            except (ValueError, KeyError, TypeError, AssertionError) as exc:
                cls.reply_json(handler, 400, {"error": f"{type(exc).__name__}: {exc}"})
            else:
                cls.reply_json(handler, 200, answer)
        else:
            cls.reply_json(handler, 404, {"error": f"no {method} {path}"})
