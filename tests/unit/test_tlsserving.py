"""HTTPS for the metrics endpoint, on real loopback sockets: the self-signed certificate, a
certificate folder re-read when it changes, plain HTTP refused, slow clients contained, and the
authorization filter in front of the Prometheus handler."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from prometheus_client import CollectorRegistry, Counter
from structlog.testing import capture_logs

from controllers.runtime import health, metricsauth, selfsigned, tlsserving
from controllers.runtime.clock import FakeClock
from tests.unit.test_metricsauth import STRANGER, TOKEN, FakeApiServer


def serve(
    certificates: tlsserving.Certificates, auth: metricsauth.Filter | None = None
) -> Iterator[int]:
    registry = CollectorRegistry()
    Counter("rotator_test_scrapes_total", "a sample", registry=registry).inc()
    server = health.metrics_server(("127.0.0.1", 0), registry, tls=certificates, auth=auth)
    server.start()
    try:
        yield server.port
    finally:
        server.stop()


def served_certificate(port: int) -> x509.Certificate:
    return x509.load_pem_x509_certificate(ssl.get_server_certificate(("127.0.0.1", port)).encode())


def get(
    url: str, *, context: ssl.SSLContext | None = None, token: str | None = None
) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, context=context, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def self_signed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tlsserving.SelfSigned:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tlsserving.SelfSigned()


@pytest.fixture
def port(self_signed: tlsserving.SelfSigned) -> Iterator[int]:
    yield from serve(self_signed)


def test_the_self_signed_certificate_verifies_for_localhost_and_loopback_when_pinned(
    self_signed: tlsserving.SelfSigned, port: int, tmp_path: Path
) -> None:
    assert list(tmp_path.iterdir()) == [], "the private key left no file behind"
    pinned = ssl.create_default_context(cadata=self_signed.certificate_pem.decode())
    for host in ("127.0.0.1", "localhost"):
        status, text = get(f"https://{host}:{port}/metrics", context=pinned)
        assert status == 200
        assert "rotator_test_scrapes_total 1.0" in text
    cert = served_certificate(port)
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert 365 <= lifetime.days <= 366
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        get(f"https://127.0.0.1:{port}/metrics")  # not a public CA's: scrapers pin or skip


def test_plain_http_on_the_https_port_gets_a_400_and_no_metrics(port: int) -> None:
    status, text = get(f"http://127.0.0.1:{port}/metrics")
    assert status == 400
    assert text == "Client sent an HTTP request to an HTTPS server.\n"


def test_a_client_that_never_shakes_hands_does_not_hold_up_others(
    self_signed: tlsserving.SelfSigned, port: int
) -> None:
    pinned = ssl.create_default_context(cadata=self_signed.certificate_pem.decode())
    with socket.create_connection(("127.0.0.1", port), timeout=5):  # silent: says nothing
        assert get(f"https://127.0.0.1:{port}/metrics", context=pinned)[0] == 200


def write_pair(folder: Path) -> x509.Certificate:
    cert, key = tlsserving.self_signed_pem()
    (folder / "tls.key").write_bytes(key)
    (folder / "tls.crt").write_bytes(cert)
    return x509.load_pem_x509_certificate(cert)


def test_a_certificate_folder_is_re_read_when_it_changes(tmp_path: Path) -> None:
    first = write_pair(tmp_path)
    clock = FakeClock()
    folder = tlsserving.CertificateDir(tmp_path, clock=clock)
    for port in serve(folder):
        assert served_certificate(port) == first
        second = write_pair(tmp_path)
        clock.advance(9)
        assert served_certificate(port) == first, "looked at most every 10 s"
        clock.advance(1)
        assert served_certificate(port) == second

        (tmp_path / "tls.crt").write_text("-----BEGIN CERTIFICATE-----\nhalf a certif")
        clock.advance(10)
        with capture_logs() as logs:
            assert served_certificate(port) == second, "a broken file keeps the one in use"
        assert [e["event"] for e in logs] == ["tls.certificate_reload_failed"]
        third = write_pair(tmp_path)
        clock.advance(10)
        assert served_certificate(port) == third


def test_a_missing_certificate_folder_fails_at_construction(tmp_path: Path) -> None:
    with pytest.raises(OSError, match=r"tls\.crt"):
        tlsserving.CertificateDir(tmp_path)


def test_the_metrics_server_answers_what_the_filter_decides(
    self_signed: tlsserving.SelfSigned,
) -> None:
    pinned = ssl.create_default_context(cadata=self_signed.certificate_pem.decode())
    api = FakeApiServer()
    for port in serve(self_signed, metricsauth.Filter(api, sleep=lambda _: None)):
        url = f"https://127.0.0.1:{port}/metrics"
        assert get(url, context=pinned) == (401, "Unauthorized\n")
        assert get(url, context=pinned, token=STRANGER) == (
            403,
            "Authorization denied for user system:serviceaccount:default:stranger\n",
        )
        status, text = get(url, context=pinned, token=TOKEN)
        assert status == 200
        assert "rotator_test_scrapes_total 1.0" in text


def _is_pair(cert_pem: bytes, key_pem: bytes) -> bool:
    cert = x509.load_pem_x509_certificate(cert_pem)
    key = serialization.load_pem_private_key(key_pem, password=None)
    public = serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    return cert.public_key().public_bytes(*public) == key.public_key().public_bytes(*public)


def test_the_self_signed_certificate_is_made_without_loading_cryptography_here() -> None:
    """The child process makes it: the controller's own process never imports ``cryptography``
    (its bindings would stay resident, ~8 MiB), and gets a certificate for localhost with its
    key."""
    probe = (
        "import sys\n"
        "from controllers.runtime import tlsserving\n"
        "cert, key = tlsserving.self_signed_pem()\n"
        "assert 'cryptography' not in sys.modules, 'loaded here'\n"
        "sys.stdout.buffer.write(cert + key)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, check=True, timeout=60
    ).stdout
    cert, marker, key = out.partition(b"-----BEGIN PRIVATE KEY-----")
    assert _is_pair(cert, marker + key)
    names = x509.load_pem_x509_certificate(cert).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    assert names.value.get_values_for_type(x509.DNSName) == ["localhost"]


def test_without_a_child_process_the_certificate_is_made_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    with capture_logs() as logs:
        cert, key = tlsserving.self_signed_pem()
    assert _is_pair(cert, key)
    assert [e["reason"] for e in logs if e["event"] == "tls.self_signed_in_process"] == [
        "FileNotFoundError"
    ]


def test_the_child_imports_nothing_from_the_working_directory(tmp_path: Path) -> None:
    """A ``controllers`` package planted in the working directory is not what the child runs
    (``-P``, and this process's path without its empty entry)."""
    planted = tmp_path / "controllers"
    planted.mkdir()
    marker = tmp_path / "hijacked"
    (planted / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    probe = (
        "import sys\n"
        "from controllers.runtime import tlsserving\n"
        "tlsserving.self_signed_pem()\n"
        "assert 'cryptography' not in sys.modules, 'made in the process: the child failed'\n"
    )
    subprocess.run([sys.executable, "-P", "-c", probe], cwd=tmp_path, check=True, timeout=60)
    assert not marker.exists(), "the child imported the planted package"


def test_a_child_cut_short_is_not_taken_for_a_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    """Output that ends inside the key (a child killed while writing) is refused, and the
    certificate is made here instead of failing the start at ``load_cert_chain``."""
    cert, key = selfsigned.pem()
    cut = (cert + key)[:-40]

    def run(argv: list[str], **_: object) -> subprocess.CompletedProcess[bytes]:
        return subprocess.CompletedProcess(argv, 0, stdout=cut, stderr=b"")

    monkeypatch.setattr(subprocess, "run", run)
    with capture_logs() as logs:
        made = tlsserving.self_signed_pem()
    assert _is_pair(*made)
    assert [e["reason"] for e in logs if e["event"] == "tls.self_signed_in_process"] == [
        "ValueError"
    ]
