"""Serving HTTP over TLS: the certificate, and a server that handshakes off the accept loop.

The certificate comes from a folder with ``tls.crt`` and ``tls.key`` (cert-manager's, or a
Secret's, layout), re-read when the files change — checked at most every 10 seconds, on a new
connection, as controller-runtime's ``certwatcher`` polls — so a renewed certificate is served
without a restart, and a half-written one is skipped until it is whole. Without a folder, a
self-signed certificate for ``localhost`` and 127.0.0.1 is made at start (controller-runtime's
fallback, and kubebuilder's default for metrics), by a child process (:mod:`.selfsigned`): the
traffic is encrypted, and scrapers either skip verification or pin it. Its private key lives in
memory, and in a private temporary file only for the moment :mod:`ssl` needs to load it.

TLS 1.2 at least, HTTP/1.1 only (kubebuilder turns HTTP/2 off on its metrics endpoint). The
handshake runs on the request's own thread with a timeout, so a silent client holds only that
thread, never the accept loop; a plain-HTTP request gets Go's answer, ``400 Client sent an HTTP
request to an HTTPS server.``, instead of a bare reset.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol

import structlog

from controllers.runtime.clock import Clock, RealClock

log = structlog.get_logger(__name__)

CERT_NAME = "tls.crt"
KEY_NAME = "tls.key"
_CHILD_TIMEOUT = 10.0
"""Seconds the child that makes the self-signed certificate may take (about 0.3 s; a cold start
of Python and ``cryptography`` on a throttled CPU takes a few), before the fallback: well within
the liveness probe's first 10 s delay and three 20 s periods, which the probe server, started
after the metrics server, must answer."""
_KEY_MARKER = b"-----BEGIN PRIVATE KEY-----"
_KEY_END = b"-----END PRIVATE KEY-----\n"
_TLS_HANDSHAKE = 0x16  # the content type of the first record a TLS client sends
_PLAIN_HTTP_REPLY = (
    b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Connection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
)


class Certificates(Protocol):
    """The server context to use for the next connection."""

    def context(self) -> ssl.SSLContext: ...


def self_signed_pem(
    host: str = "localhost", ips: tuple[str, ...] = ("127.0.0.1",)
) -> tuple[bytes, bytes]:
    """``(certificate PEM, private key PEM)`` of :func:`.selfsigned.pem`, made in a child
    process (see :mod:`.selfsigned` for why); in this one if the child cannot run or fails —
    the same certificate, at the cost of the memory."""
    try:
        # -P and this process's own path: the child imports from where this process imports
        # (the image's site-packages), not from the working directory as `-m` would add it; a
        # process itself started with `python -m` has that directory in its path already
        child = subprocess.run(
            [sys.executable, "-P", "-m", "controllers.runtime.selfsigned", host, *ips],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_CHILD_TIMEOUT,
            check=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
        )
        cert, marker, key = child.stdout.partition(_KEY_MARKER)
        whole = cert.startswith(b"-----BEGIN CERTIFICATE-----") and key.endswith(_KEY_END)
        if not marker or not whole:  # a child cut short: what it wrote is not a pair
            raise ValueError("the output holds no whole certificate and key")
        return cert, marker + key
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        # the exception's type only: a failed child's output is not shown (it may hold a key)
        log.warning("tls.self_signed_in_process", reason=type(exc).__name__)
        from controllers.runtime import selfsigned  # noqa: PLC0415 - cryptography, as a fallback

        return selfsigned.pem(host, ips)


def server_context(cert_file: str | Path, key_file: str | Path) -> ssl.SSLContext:
    """A server context with these files: TLS 1.2 or later, HTTP/1.1."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    context.load_cert_chain(cert_file, key_file)
    return context


class SelfSigned:
    """A self-signed certificate made once, at construction."""

    def __init__(self) -> None:
        cert, key = self_signed_pem()
        with tempfile.TemporaryDirectory(prefix="serving-cert-") as folder:  # mode 0700
            cert_file, key_file = Path(folder, CERT_NAME), Path(folder, KEY_NAME)
            cert_file.write_bytes(cert)
            key_file.touch(mode=0o600)
            key_file.write_bytes(key)
            self._context = server_context(cert_file, key_file)
        self.certificate_pem = cert
        """Public: what a client may pin or trust."""

    def context(self) -> ssl.SSLContext:
        return self._context


class CertificateDir:
    """``tls.crt`` and ``tls.key`` from ``folder``, re-read when they change.

    Raises :class:`OSError` or :class:`ssl.SSLError` at construction if they cannot be loaded; a
    later failed reload keeps the certificate in use, logs a warning, and is retried.
    """

    def __init__(
        self,
        folder: str | Path,
        *,
        cert_name: str = CERT_NAME,
        key_name: str = KEY_NAME,
        recheck: float = 10.0,
        clock: Clock | None = None,
    ) -> None:
        self._cert = Path(folder, cert_name)
        self._key = Path(folder, key_name)
        self._recheck = recheck
        self._clock = clock or RealClock()
        self._lock = threading.Lock()
        self._stamp = self._files_stamp()
        self._context = server_context(self._cert, self._key)
        self._checked = self._clock.monotonic()

    def context(self) -> ssl.SSLContext:
        with self._lock:
            now = self._clock.monotonic()
            if now - self._checked < self._recheck:
                return self._context
            self._checked = now
            try:
                stamp = self._files_stamp()
                if stamp != self._stamp:
                    self._context = server_context(self._cert, self._key)
                    self._stamp = stamp
                    log.info("tls.certificate_reloaded", cert=str(self._cert))
            except (OSError, ssl.SSLError) as exc:
                log.warning("tls.certificate_reload_failed", cert=str(self._cert), error=str(exc))
            return self._context

    def _files_stamp(self) -> tuple[tuple[int, int, int], ...]:
        # stat follows symlinks: a Secret volume swaps its ..data link, which changes the inode
        stats = (os.stat(self._cert), os.stat(self._key))
        return tuple((s.st_ino, s.st_mtime_ns, s.st_size) for s in stats)


class TLSServer(ThreadingHTTPServer):
    """A threaded HTTP server that speaks only TLS, with ``certificates`` for each connection."""

    handshake_timeout = 10.0
    """Seconds a client gets for the handshake, and for each read or write after it."""

    def __init__(self, address: tuple[str, int], handler: Any, certificates: Certificates) -> None:
        self.certificates = certificates
        super().__init__(address, handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        """Runs on the request's thread: TLS first, then the handler on the TLS socket."""
        sock: socket.socket = request
        sock.settimeout(self.handshake_timeout)
        try:
            first = sock.recv(1, socket.MSG_PEEK)
            if not first:
                return
            if first[0] != _TLS_HANDSHAKE:
                _refuse_plain_http(sock)
                return
            # wrap_socket takes the descriptor over and shakes hands at once (with the timeout)
            tls = self.certificates.context().wrap_socket(sock, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            log.debug("tls.handshake_failed", client=str(client_address[0]), error=str(exc))
            return
        try:
            super().finish_request(tls, client_address)
        finally:
            with contextlib.suppress(OSError):
                tls.close()


def _refuse_plain_http(sock: socket.socket) -> None:
    """Answers 400, then reads (a little of) what the client sent: closing with unread data
    would reset the connection before the client reads the answer."""
    with contextlib.suppress(OSError):
        sock.sendall(_PLAIN_HTTP_REPLY)
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(1.0)
        for _ in range(16):
            if not sock.recv(64 * 1024):
                break
