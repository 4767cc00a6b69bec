"""A TLS-terminating proxy on 127.0.0.1 in front of the API server, that can break chosen
requests — for fault tests of what a client does when a connection fails mid-response.

It serves HTTPS with a certificate of its own CA (:attr:`APIProxy.ca_file`, for the kubeconfig)
and forwards each client connection over its own TLS connection to the API server, trusting the
control plane's CA. Bearer tokens pass through untouched, so a ServiceAccount kubeconfig pointed
at the proxy authenticates as before. HTTP/1.1 requests are parsed only as far as their request
line and ``Content-Length``; responses are forwarded as bytes. Clients do not pipeline, so the
bytes that come back after a request belong to it.

Faults, applied to requests that ``matches`` (by default: PUTs to one Lease, i.e. renewals):

* ``cut``   forwards the status line, the headers and half of the body, then drops the
            connection (no TLS close): the client sees the response break while reading it;
* ``stall`` forwards the request but never the response: the client waits for its timeout.

The request reaches the API server either way, so a renewal still lands there: only the client
does not learn it did.

It also counts the response bytes it forwards (status line, headers and body as HTTP/1.1 carries
them, after TLS, uncompressed: the client asks for no gzip), by what the request was
(:func:`request_kind`: ``list``, ``watch``, ``leases`` or ``other``): what one client receives from the API
server, for the shards benchmark (tests/bench/shards.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from rotator_devkit.controlplane import pki

Matcher = Callable[[str, str], bool]


def never(method: str, target: str) -> bool:
    """Matches nothing: a proxy that only forwards (and counts)."""
    return False


def request_kind(method: str, target: str) -> str:
    """``leases`` (any request on Leases: renewals, and a sharded replica's list of them every
    retry period), ``watch`` (a GET with ``watch=true``), ``list`` (a GET of a collection:
    ``/api/v1/secrets``, ``/apis/G/V/namespaces/NS/R``) or ``other`` (a GET of one object, a
    write), from the request line alone."""
    url = urlsplit(target)
    if url.path.startswith("/apis/coordination.k8s.io/"):
        return "leases"
    if method != "GET":
        return "other"
    if parse_qs(url.query).get("watch", [""])[0] in ("true", "1"):
        return "watch"
    parts = url.path.strip("/").split("/")
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:] if parts[:1] == ["apis"] else []
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]  # a namespaced resource: what follows namespaces/NS
    return "list" if len(rest) == 1 else "other"


def lease_renewals(namespace: str, name: str) -> Matcher:
    """Matches PUTs to one Lease: renewals (and releases)."""
    path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
    return lambda method, target: method == "PUT" and target.split("?")[0] == path


class _Connection:
    def __init__(self) -> None:
        self.fault = "none"  # the fault for the response to the latest request
        self.kind = "other"  # request_kind of the latest request: its response bytes count there


class APIProxy:
    def __init__(
        self, upstream: str, upstream_ca: Path, workdir: Path, matches: Matcher = never
    ) -> None:
        url = urlsplit(upstream)
        self._host, self._port = url.hostname or "127.0.0.1", url.port or 443
        self.matches = matches
        self.fault = "none"
        """``none``, ``cut`` or ``stall``; read as each request arrives."""
        self.counts: Counter[str] = Counter()
        self._received: Counter[str] = Counter()
        self._lock = threading.Lock()
        ca = pki.CertificateAuthority("rotator-test-proxy-ca")
        serving = ca.issue("127.0.0.1", ip_addresses=["127.0.0.1"], server=True)
        workdir.mkdir(parents=True, exist_ok=True)
        self.ca_file = workdir / "proxy-ca.crt"
        self.ca_file.write_bytes(ca.cert_pem)
        (workdir / "proxy.crt").write_bytes(serving.cert)
        (workdir / "proxy.key").write_bytes(serving.key)
        self._server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._server_tls.load_cert_chain(workdir / "proxy.crt", workdir / "proxy.key")
        self._upstream_tls = ssl.create_default_context(cafile=str(upstream_ca))
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.port = 0

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def count(self, what: str) -> int:
        with self._lock:
            return self.counts[what]

    def received(self) -> dict[str, int]:
        """Response bytes forwarded to clients so far, by :func:`request_kind`."""
        with self._lock:
            return dict(self._received)

    def start(self) -> APIProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self._server_tls), self._loop
        ).result(10)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def _counted(self, what: str) -> None:
        with self._lock:
            self.counts[what] += 1

    async def _serve(
        self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter
    ) -> None:
        try:
            upstream_in, upstream_out = await asyncio.open_connection(
                self._host, self._port, ssl=self._upstream_tls, server_hostname=self._host
            )
        except (OSError, asyncio.CancelledError):  # cancelled: the proxy is stopping
            client_out.transport.abort()
            return
        conn = _Connection()
        pumps = [
            asyncio.ensure_future(self._requests(client_in, upstream_out, conn)),
            asyncio.ensure_future(self._responses(upstream_in, client_out, conn)),
        ]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            pass  # the proxy is stopping: close quietly
        finally:
            for pump in pumps:
                pump.cancel()
            for writer in (client_out, upstream_out):
                writer.transport.abort()

    async def _requests(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: _Connection
    ) -> None:
        """Client → API server: forwards bytes, noting each request's fault before sending it."""
        buffer = b""
        body_left = 0
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            while chunk := await reader.read(64 * 1024):
                buffer += chunk
                while True:
                    if body_left:
                        skipped = min(body_left, len(buffer))
                        buffer, body_left = buffer[skipped:], body_left - skipped
                        if body_left:
                            break
                    end = buffer.find(b"\r\n\r\n")
                    if end < 0:
                        break
                    head, buffer = buffer[:end].decode("latin-1"), buffer[end + 4 :]
                    lines = head.split("\r\n")
                    method, target = [*lines[0].split(" "), "", ""][:2]
                    for line in lines[1:]:
                        key, _, value = line.partition(":")
                        if key.strip().lower() == "content-length":
                            body_left = int(value.strip() or 0)
                    fault = self.fault if self.matches(method, target) else "none"
                    if fault != "none":
                        self._counted("matched")
                    conn.fault = fault
                    conn.kind = request_kind(method, target)
                writer.write(chunk)
                await writer.drain()

    async def _responses(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: _Connection
    ) -> None:
        """API server → client: forwards bytes, or breaks the response as the fault says."""
        pending = b""
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            while chunk := await reader.read(64 * 1024):
                if conn.fault == "stall":
                    if not pending:
                        self._counted("stalled")
                    pending += chunk  # held back: the client waits until it gives up
                    continue
                if conn.fault == "cut":
                    pending += chunk
                    end = pending.find(b"\r\n\r\n")
                    if end < 0 or len(pending) <= end + 4:
                        continue  # not a byte of the body yet
                    body = pending[end + 4 :]
                    writer.write(pending[: end + 4] + body[: max(1, len(body) // 2)])
                    await writer.drain()
                    self._counted("cut")
                    writer.transport.abort()  # a TCP reset mid-body, no TLS close_notify
                    return
                with self._lock:
                    self._received[conn.kind] += len(chunk)
                writer.write(chunk)
                await writer.drain()
