"""The dev gateway's front door: one loopback address for the whole ``rotator dev`` run, in front
of whichever LiteLLM proxy serves now (:class:`gateway.RollingGateway`).

LiteLLM reads its configuration only when it starts, so each rotation means a new proxy process
on a new port. A client cannot follow that: the address it was given must stay true. This is a
small HTTP/1.1 reverse proxy that a roll never touches. Each request is sent, whole, to the
proxy that is :attr:`~gateway.RollingGateway.current` when the request arrives, and is counted
in flight on it (:meth:`~gateway.RollingGateway.enter` / ``leave``) until its answer has been
sent back. The replaced proxy is stopped only once that count is zero, so every request taken
before a switch is answered by the proxy it was sent to. This does what a Service in front of a
Deployment's pods does on a cluster.

Each request is a unit, not each connection: a client that keeps its connection alive sends
its next request to the proxy serving then. Request bodies need a ``Content-Length`` (curl,
the OpenAI clients and LiteLLM's own clients send one). Answers are passed on as they come,
streamed ones included (re-chunked). Before the first proxy serves, a request gets 503.
"""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rotator_devkit.devenv import gateway

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
"""Headers of one connection, not of the request (RFC 9110, 7.6.1): never passed on."""

UPSTREAM_TIMEOUT = 600.0
"""How long a proxy may take to answer (a long completion, streamed or not)."""


class FrontDoor:
    """Serves on ``port`` of 127.0.0.1 (0, or ``port`` taken: a free one; :attr:`port` says
    which) and forwards every request to ``proxies``' current LiteLLM proxy."""

    def __init__(self, proxies: gateway.RollingGateway, *, port: int = 0) -> None:
        self.proxies = proxies
        front = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive for the clients that want it

            def do_GET(self) -> None:
                front._forward(self)

            def do_POST(self) -> None:
                front._forward(self)

            def do_PUT(self) -> None:
                front._forward(self)

            def do_PATCH(self) -> None:
                front._forward(self)

            def do_DELETE(self) -> None:
                front._forward(self)

            def do_HEAD(self) -> None:
                front._forward(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # requests carry the master key in a header; nothing of them is logged

        try:
            self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        except OSError:  # taken (another run, another program): any free port, which is printed
            self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="gateway-front", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FrontDoor:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops taking requests and closes the listening socket (the port is free again)."""
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

    def _forward(self, handler: BaseHTTPRequestHandler) -> None:
        if "chunked" in (handler.headers.get("Transfer-Encoding") or "").lower():
            handler.close_connection = True  # the body's bytes were not read
            _answer(handler, 411, b'{"error": "send a Content-Length"}')
            return
        declared = (handler.headers.get("Content-Length") or "0").strip()
        if not declared.isdigit():  # not a number, or negative
            handler.close_connection = True
            _answer(handler, 400, b'{"error": "Content-Length is not a number of bytes"}')
            return
        length = int(declared)
        try:
            body = handler.rfile.read(length) if length else None
        except OSError:  # reset, or silent for longer than the server's timeout
            body = b""
        if body is not None and len(body) < length:  # the client went away mid-body
            handler.close_connection = True
            return  # nothing forwarded, no one to answer
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in HOP_BY_HOP}
        proxy = self.proxies.enter()
        if proxy is None:
            _answer(handler, 503, b'{"error": "the gateway is starting"}')
            return
        sent = [False]  # whether the answer's status line and headers went to the client
        try:
            try:
                self._relay(handler, proxy, body, headers, sent)
            except (OSError, http.client.HTTPException):
                if sent[0]:
                    raise  # mid-answer: only closing the connection tells the client
                # before any answer (a proxy that died by itself, or that broke the exchange):
                # a replaced one is drained first, so this is no roll's doing
                handler.close_connection = True
                _answer(handler, 502, b'{"error": "the LiteLLM proxy did not answer"}')
        except (OSError, http.client.HTTPException):
            handler.close_connection = True  # the client went away, or the proxy did mid-answer
        finally:
            self.proxies.leave(proxy)

    @staticmethod
    def _relay(
        handler: BaseHTTPRequestHandler,
        proxy: gateway.LiteLLMProxy,
        body: bytes | None,
        headers: dict[str, str],
        sent: list[bool],
    ) -> None:
        upstream = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=UPSTREAM_TIMEOUT)
        try:
            upstream.request(handler.command, handler.path, body=body, headers=headers)
            response = upstream.getresponse()
            sent[0] = True  # from here on, what reaches the client may be partial
            handler.send_response_only(response.status, response.reason)
            for name, value in response.getheaders():
                if name.lower() not in HOP_BY_HOP and name.lower() != "content-length":
                    handler.send_header(name, value)
            length = response.getheader("Content-Length")
            if handler.command == "HEAD" or response.status in (204, 304):
                handler.end_headers()
                return
            if length is not None:
                handler.send_header("Content-Length", length)
                handler.end_headers()
                while chunk := response.read(65536):
                    handler.wfile.write(chunk)
                if response.length:  # the proxy closed before the bytes it announced
                    raise http.client.IncompleteRead(b"", response.length)
                return
            handler.send_header("Transfer-Encoding", "chunked")  # streamed: passed on as it comes
            handler.end_headers()
            while chunk := response.read1(65536):
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                handler.wfile.flush()
            handler.wfile.write(b"0\r\n\r\n")
        finally:
            upstream.close()


def _answer(handler: BaseHTTPRequestHandler, status: int, body: bytes) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)
