"""rotator.oidc against a local issuer that can trickle, fail, redirect or answer too much:
every call ends within its deadline, failures are remembered, slow hosts keep to their own
bulkhead, and client secrets go only over https unless http is explicitly allowed."""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from rotator import errors, oidc
from rotator.bulkhead import Bulkheads
from rotator.oidc import grant
from rotator.oidc.cache import Remembered
from rotator.oidc.failures import Unusable
from rotator_devkit.devenv.standins.azure import tls_context
from tests.support.polling import wait_for

SECRET = "client-secret-never-shown-7f3a"
DEADLINE = 2.0
SLACK = 1.5  # scheduling on a loaded 2-core machine; far below what a trickle would take


FIXED: dict[tuple[str, bool | None], tuple[int, bytes]] = {
    # (mode, discovery or token request, None: both) -> the answer
    ("fail", None): (503, b'{"error": "temporarily_unavailable"}'),
    ("refuse", False): (
        401,
        b'{"error": "invalid_client", "error_description": "%s"}' % SECRET.encode(),
    ),
    ("not-json", None): (200, b"<html>" + SECRET.encode()),
    ("no-token", False): (200, b'{"token_type": "Bearer"}'),
    ("no-endpoint", True): (200, b'{"issuer": "x"}'),
}


class Issuer:
    """An OIDC issuer on 127.0.0.1 whose behaviour is the first path segment of the issuer URL
    (``{url}/trickle-body`` trickles its discovery document one byte a second); every request
    is logged."""

    def __init__(self, tls: ssl.SSLContext | None = None, *, keep_alive: bool = False) -> None:
        self.log: list[tuple[str, str]] = []
        self.peers: list[tuple[str, int]] = []
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                issuer.serve(self, "GET")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                issuer.serve(self, "POST")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        if keep_alive:
            Handler.protocol_version = "HTTP/1.1"
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.scheme = "http"
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
            self.scheme = "https"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server.server_address[1]}"

    def issuer(self, mode: str) -> str:
        return f"{self.url}/{mode}"

    def count(self, method: str | None = None, suffix: str = "") -> int:
        with self._lock:
            return sum(
                1 for m, p in self.log if (method is None or m == method) and p.endswith(suffix)
            )

    def stop(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()

    def serve(self, h: BaseHTTPRequestHandler, method: str) -> None:
        with self._lock:
            self.log.append((method, h.path))
            self.peers.append(h.client_address)
        mode = h.path.strip("/").split("/")[0]
        discovery = h.path.endswith("/.well-known/openid-configuration")
        token_scheme = "http" if mode == "http-token" else self.scheme
        port = self.server.server_address[1]
        doc = {"token_endpoint": f"{token_scheme}://127.0.0.1:{port}/{mode}/token"}
        body = json.dumps(doc if discovery else {"access_token": "tok", "expires_in": 300})
        payload = body.encode()
        fixed = FIXED.get((mode, discovery), FIXED.get((mode, None)))
        if fixed is not None:
            self.reply(h, *fixed)
        elif mode == "trickle-headers":
            self.trickle(h, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
        elif mode == "trickle-body" or (mode == "trickle-token" and not discovery):
            self.head(h, 200, len(payload))
            self.trickle(h, payload)
        elif mode == "redirect":
            h.send_response(302)
            h.send_header("Location", f"{self.url}/ok{h.path.removeprefix('/redirect')}")
            h.send_header("Content-Length", "0")
            h.end_headers()
        elif mode == "big":
            self.reply(h, 200, b" " * (oidc.MAX_BODY + 1))
        elif mode == "big-unsized":  # no Content-Length: the body ends when the server closes
            h.send_response(200)
            h.end_headers()
            try:
                for _ in range(oidc.MAX_BODY // 65536 + 2):
                    h.wfile.write(b" " * 65536)
            except OSError:
                return  # the client stopped reading at the cap
        elif mode == "hostile-error" and not discovery:  # a new, long OAuth error every time
            error = f"e{len(self.log)}_" + "x" * 200
            self.reply(h, 400, json.dumps({"error": error}).encode())
        elif mode == "gzip":
            h.send_response(200)
            h.send_header("Content-Encoding", "gzip")
            h.send_header("Content-Length", "0")
            h.end_headers()
        else:
            self.reply(h, 200, payload)

    @staticmethod
    def head(h: BaseHTTPRequestHandler, status: int, length: int) -> None:
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(length))
        h.end_headers()
        h.wfile.flush()

    def reply(self, h: BaseHTTPRequestHandler, status: int, payload: bytes) -> None:
        self.head(h, status, len(payload))
        h.wfile.write(payload)

    def trickle(self, h: BaseHTTPRequestHandler, data: bytes) -> None:
        """One byte a second: a socket read timeout of more than a second never fires."""
        for i in range(len(data)):
            if self.stopping.wait(1.0):
                return
            try:
                h.wfile.write(data[i : i + 1])
                h.wfile.flush()
            except OSError:
                return  # the client gave up


class Calls:
    """An observer that keeps what it was told."""

    def __init__(self) -> None:
        self.codes: list[tuple[str, str]] = []
        self.providers: set[str] = set()

    def provider_request(self, *, provider: str, call: str, code: str, seconds: float) -> None:
        self.codes.append((call, code))
        self.providers.add(provider)


class FakeMonotonic:
    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    server = Issuer()
    yield server
    server.stop()


@pytest.fixture
def other_host() -> Iterator[Issuer]:
    server = Issuer()
    yield server
    server.stop()


@pytest.fixture
def tls_issuer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Issuer]:
    """An issuer over https, trusted through REQUESTS_CA_BUNDLE (which requests prefers to a
    session's own ``verify``)."""
    context, ca_file = tls_context(tmp_path)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca_file))
    server = Issuer(tls=context)
    yield server
    server.stop()


def client(issuer: str, client_id: str = "app") -> oidc.Client:
    return oidc.Client(issuer=issuer, client_id=client_id, client_secret=SECRET)


def source(**kwargs: Any) -> oidc.TokenSource:
    kwargs.setdefault("allow_insecure", True)
    kwargs.setdefault("deadline", DEADLINE)
    return oidc.TokenSource(**kwargs)


def timed(call: Callable[[], Any]) -> tuple[float, BaseException | None]:
    """Runs ``call`` in a thread and gives up on it after the deadline and twice the slack (so
    a call that ignores its deadline fails the test instead of hanging it)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(DEADLINE + 2 * SLACK)
    assert not thread.is_alive(), f"still running after {DEADLINE + 2 * SLACK} s"
    return time.monotonic() - started, outcome[0]


@pytest.mark.parametrize("mode", ["trickle-body", "trickle-headers", "trickle-token"])
def test_a_trickling_issuer_is_cut_off_at_the_deadline(issuer: Issuer, mode: str) -> None:
    calls = Calls()
    tokens = source(observer=calls)
    elapsed, exc = timed(lambda: tokens.token(client(issuer.issuer(mode))))
    print(f"\n{mode}: ended after {elapsed:.2f} s (deadline {DEADLINE} s)")
    assert isinstance(exc, errors.ProviderUnavailable)
    assert f"got no answer within {DEADLINE:g} s" in str(exc)
    assert elapsed < DEADLINE + SLACK
    assert calls.codes[-1][1] == "DeadlineExceeded"
    assert SECRET not in str(exc)


def test_a_name_that_does_not_resolve_in_time_is_given_up_at_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The name lookup has no socket the deadline's watch could cut (``getaddrinfo`` blocks for
    the resolver's retries), so the caller stops waiting at the deadline; the abandoned exchange
    keeps its slot of the host's bulkhead until the lookup ends. Mutation caught: running the
    exchange on the caller's thread (the call then lasts as long as the lookup)."""
    resolving = threading.Event()
    answer = threading.Event()
    real = socket.getaddrinfo

    def stuck(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "stuck.invalid":
            resolving.set()
            answer.wait(60)
            raise socket.gaierror("no answer")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", stuck)
    calls = Calls()
    tokens = source(observer=calls, concurrency=1)
    try:
        elapsed, exc = timed(lambda: tokens.token(client("http://stuck.invalid:8080/x")))
        assert resolving.is_set()
        assert isinstance(exc, errors.ProviderUnavailable)
        assert f"got no answer within {DEADLINE:g} s" in str(exc)
        assert elapsed < DEADLINE + SLACK
        assert calls.codes[-1][1] == "DeadlineExceeded"
        assert tokens._bulkheads.of("stuck.invalid:8080").in_flight == 1, "the slot is held"
    finally:
        answer.set()
    wait_for(lambda: tokens._bulkheads.of("stuck.invalid:8080").in_flight == 0, timeout=10)


def test_the_deadline_holds_on_a_reused_connection() -> None:
    server = Issuer(keep_alive=True)
    try:
        elapsed, exc = timed(lambda: source().token(client(server.issuer("trickle-token"))))
        assert server.count() == 2
        assert server.peers[0] == server.peers[1], "the token request reused the connection"
        assert isinstance(exc, errors.ProviderUnavailable)
        assert elapsed < DEADLINE + SLACK
    finally:
        server.stop()


def test_the_deadline_holds_over_tls(tls_issuer: Issuer) -> None:
    server = tls_issuer
    tokens = source(allow_insecure=False)
    assert tokens.token(client(server.issuer("ok"))).value == "tok"
    elapsed, exc = timed(lambda: tokens.token(client(server.issuer("trickle-body"))))
    print(f"\nover TLS: ended after {elapsed:.2f} s")
    assert isinstance(exc, errors.ProviderUnavailable)
    assert elapsed < DEADLINE + SLACK


def test_callers_queued_behind_a_slow_fetch_wait_at_most_the_deadline_and_share_it(
    issuer: Issuer,
) -> None:
    tokens = source()
    outcomes: list[tuple[float, BaseException | None]] = []
    lock = threading.Lock()

    def caller(client_id: str) -> None:
        result = timed(lambda: tokens.token(client(issuer.issuer("trickle-body"), client_id)))
        with lock:
            outcomes.append(result)

    # three callers of one client (one token flight) and three of others (one discovery flight)
    threads = [threading.Thread(target=caller, args=(c,)) for c in ("a", "a", "a", "b", "c", "d")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"\nslowest of 6 callers: {max(e for e, _ in outcomes):.2f} s")
    assert all(isinstance(exc, errors.ProviderUnavailable) for _, exc in outcomes)
    assert all(elapsed < DEADLINE + SLACK for elapsed, _ in outcomes)
    assert issuer.count("GET", "/.well-known/openid-configuration") == 1


def test_a_failure_is_remembered_for_a_backoff_that_grows(issuer: Issuer) -> None:
    clock = FakeMonotonic()
    tokens = source(monotonic=clock)
    failing = client(issuer.issuer("fail"))
    with pytest.raises(errors.ProviderUnavailable, match="HTTP 503"):
        tokens.token(failing)
    assert issuer.count() == 1

    started = time.monotonic()
    with pytest.raises(errors.ProviderUnavailable, match="HTTP 503; not retried before"):
        tokens.token(failing)
    assert time.monotonic() - started < 0.5
    assert issuer.count() == 1, "the second caller did not ask again"

    clock.offset += oidc.FAILURE_BACKOFF + 0.1
    with pytest.raises(errors.ProviderUnavailable, match="HTTP 503"):
        tokens.token(failing)
    assert issuer.count() == 2, "asked again after the backoff"

    clock.offset += oidc.FAILURE_BACKOFF + 0.1  # the backoff doubled: still remembered
    with pytest.raises(errors.ProviderUnavailable, match="not retried before"):
        tokens.token(failing)
    assert issuer.count() == 2
    clock.offset += oidc.FAILURE_BACKOFF
    with pytest.raises(errors.ProviderUnavailable):
        tokens.token(failing)
    assert issuer.count() == 3


def test_redirects_are_refused_and_refusals_remembered_too(issuer: Issuer) -> None:
    tokens = source()
    with pytest.raises(errors.ProviderRejected, match="redirects are not followed"):
        tokens.token(client(issuer.issuer("redirect")))
    assert issuer.count() == 1, "the redirect was not followed"
    with pytest.raises(errors.ProviderRejected, match="not retried before"):
        tokens.token(client(issuer.issuer("redirect")))
    assert issuer.count() == 1


def test_while_a_failed_key_is_retried_other_callers_fail_at_once(issuer: Issuer) -> None:
    clock = FakeMonotonic()
    tokens = source(monotonic=clock)
    slow = client(issuer.issuer("trickle-body"))
    _, first = timed(lambda: tokens.token(slow))
    assert isinstance(first, errors.ProviderUnavailable)
    clock.offset += oidc.FAILURE_BACKOFF + 0.1  # the backoff passes
    retry = threading.Thread(target=lambda: timed(lambda: tokens.token(slow)), daemon=True)
    retry.start()
    wait_for(lambda: issuer.count("GET") == 2, timeout=DEADLINE, what="the retry is in flight")
    elapsed, exc = timed(lambda: tokens.token(client(slow.issuer, "other-client")))
    assert isinstance(exc, errors.ProviderUnavailable)
    assert "a retry is in flight" in str(exc)
    assert elapsed < 0.5
    retry.join()
    assert issuer.count("GET") == 2


def test_a_slow_host_does_not_use_the_slots_of_another(issuer: Issuer, other_host: Issuer) -> None:
    tokens = source(concurrency=1)
    stuck = threading.Thread(
        target=lambda: timed(lambda: tokens.token(client(issuer.issuer("trickle-body")))),
        daemon=True,
    )
    stuck.start()
    wait_for(lambda: issuer.count("GET") == 1, timeout=DEADLINE, what="the slow call in flight")

    # another issuer on the same host: its one slot is taken
    elapsed, exc = timed(lambda: tokens.token(client(issuer.issuer("ok"))))
    assert isinstance(exc, errors.ProviderUnavailable)
    assert f"1 calls to OIDC issuer 127.0.0.1:{issuer.server.server_address[1]}" in str(exc)
    assert elapsed < oidc.SLOT_WAIT + SLACK

    # an issuer on another host is not affected
    started = time.monotonic()
    assert tokens.token(client(other_host.issuer("ok"))).value == "tok"
    assert time.monotonic() - started < 1.0
    assert stuck.is_alive(), "the slow call was still in flight meanwhile"
    stuck.join()


@pytest.mark.parametrize(
    ("mode", "code"),
    [("big", "ResponseTooLarge"), ("big-unsized", "ResponseTooLarge"), ("gzip", "Compressed")],
)
def test_response_bodies_are_capped(issuer: Issuer, mode: str, code: str) -> None:
    calls = Calls()
    tokens = source(observer=calls)
    with pytest.raises(errors.ProviderUnavailable) as caught:
        tokens.token(client(issuer.issuer(mode)))
    assert calls.codes[-1][1].startswith(code)
    if code == "ResponseTooLarge":
        assert f"more than {oidc.MAX_BODY} bytes" in str(caught.value)


def test_http_issuers_are_refused_unless_allowed(issuer: Issuer) -> None:
    with pytest.raises(oidc.InsecureIssuer) as caught:
        oidc.TokenSource().token(client(issuer.issuer("ok")))
    exc = caught.value
    assert isinstance(exc, errors.InvalidInput)
    assert not exc.transient
    assert exc.reason == "InsecureIssuer"
    assert "is not https" in str(exc)
    assert oidc.INSECURE_FLAG in str(exc)
    assert issuer.count() == 0, "nothing was sent"
    with pytest.raises(oidc.InsecureIssuer, match="not an https URL"):
        oidc.TokenSource().token(client("ftp://idp.example.com"))
    assert source(allow_insecure=True).token(client(issuer.issuer("ok"))).value == "tok"


def test_an_https_issuer_may_not_send_the_secret_to_an_http_token_endpoint(
    tls_issuer: Issuer,
) -> None:
    server = tls_issuer
    tokens = source(allow_insecure=False)
    with pytest.raises(errors.ProviderRejected, match="not https"):
        tokens.token(client(server.issuer("http-token")))
    assert server.count("POST") == 0


def test_bulkheads_are_per_key_and_forget_idle_keys() -> None:
    family = Bulkheads("thing", limit=1, wait=0.01, max_keys=2)
    with family.slot("a"):
        with (
            pytest.raises(errors.ProviderUnavailable, match="1 calls to thing a"),
            family.slot("a"),
        ):
            pass
        with family.slot("b"):
            pass
        family.of("c")  # past max_keys: idle "b" is forgotten, busy "a" is kept
        assert len(family) == 2
        with pytest.raises(errors.ProviderUnavailable), family.slot("a"):
            pass


@pytest.mark.parametrize(
    ("mode", "kind", "code", "observed"),
    [
        ("fail", errors.ProviderUnavailable, "503", [("discovery", "503")]),
        ("redirect", errors.ProviderRejected, "302", [("discovery", "302")]),
        (
            "refuse",
            errors.ProviderRejected,
            "401",
            [("discovery", "200"), ("token", "401")],
        ),
        ("not-json", errors.ProviderUnavailable, "NotJSON", [("discovery", "NotJSON")]),
        (
            "big",
            errors.ProviderUnavailable,
            "ResponseTooLarge",
            [("discovery", "ResponseTooLarge")],
        ),
        (
            "gzip",
            errors.ProviderUnavailable,
            "CompressedResponse",
            [("discovery", "CompressedResponse")],
        ),
        (
            "trickle-body",
            errors.ProviderUnavailable,
            "DeadlineExceeded",
            [("discovery", "DeadlineExceeded")],
        ),
        ("no-endpoint", errors.ProviderRejected, "NoTokenEndpoint", [("discovery", "200")]),
        (
            "no-token",
            errors.ProviderRejected,
            "NoAccessToken",
            [("discovery", "200"), ("token", "200")],
        ),
    ],
)
def test_every_oidc_error_carries_its_code_and_each_call_is_observed_once(
    issuer: Issuer,
    mode: str,
    kind: type[errors.CredentialError],
    code: str,
    observed: list[tuple[str, str]],
) -> None:
    """Through the provider fence (rotator.providercalls): one observation per HTTP call, under
    provider "oidc", with the code the error carries — remembered failures keep it too; no
    byte of a response in a message. Mutations caught: a code dropped, an OAuth error
    description quoted, a call observed twice."""
    calls = Calls()
    tokens = source(observer=calls)
    with pytest.raises(kind) as raised:
        tokens.token(client(issuer.issuer(mode)))
    assert type(raised.value) is kind
    assert raised.value.code == code
    assert SECRET not in str(raised.value)
    assert calls.codes == observed
    assert calls.providers == {oidc.PROVIDER}
    with pytest.raises(kind) as remembered:
        tokens.token(client(issuer.issuer(mode)))
    assert "not retried before" in str(remembered.value)
    assert remembered.value.code == code
    assert calls.codes == observed, "a remembered failure calls nobody"


def test_an_issuers_oauth_errors_are_shown_capped_and_never_become_metric_labels(
    issuer: Issuer,
) -> None:
    """A tenant's issuer chooses its OAuth ``error``: one answering a new one every time must
    not grow ``rotator_provider_requests_total`` by a series each (the label and the error's
    code stay the HTTP status), and a long one is cut in the message. Mutations caught: the
    OAuth error as the code or label again, the cap dropped."""
    calls = Calls()
    tokens = source(observer=calls)
    shown: list[str] = []
    for client_id in ("a", "b", "c"):
        with pytest.raises(errors.ProviderRejected) as refused:
            tokens.token(client(issuer.issuer("hostile-error"), client_id))
        assert refused.value.code == "400"
        shown.append(str(refused.value))
    assert {code for call, code in calls.codes if call == "token"} == {"400"}
    assert len(calls.codes) == 4  # one discovery, three token requests
    assert len(set(shown)) == 3, "each message names its own OAuth error"
    for message in shown:
        error = message.split("HTTP 400 ", 1)[1]
        assert error.startswith("e")
        assert len(error) == grant.OAUTH_ERROR_SHOWN


@pytest.mark.parametrize(
    ("status", "code"),
    [(400, "400"), (503, "503"), (307, "307"), (452, "UnknownStatus"), (999, "UnknownStatus")],
)
def test_an_issuers_status_is_a_code_only_when_it_is_a_registered_one(
    status: int, code: str
) -> None:
    """A tenant's issuer may answer any three digits: only a registered HTTP status is the
    code (and metric label), the number itself stays in the message. Mutation caught: the raw
    status as the code (900 series per call)."""
    with pytest.raises(Unusable) as refused:
        grant.answer(status, b'{"error": "invalid_client"}')
    assert refused.value.failure.code == code
    assert f"HTTP {status}" in (refused.value.failure.shown or "")


@pytest.mark.parametrize(
    "error", ["s3cr3tAlnumClientSecret", "s3cr3tAlnum", "x_s3cr3tAlnumClientSecret"]
)
def test_an_oauth_error_that_echoes_the_client_secret_is_not_shown(error: str) -> None:
    """An issuer that puts the secret (or part of it) in ``error`` gets only its status shown.
    Mutation caught: the secret check dropped (the charset check alone lets this one through)."""
    body = json.dumps({"error": error}).encode()
    with pytest.raises(Unusable) as refused:
        grant.answer(401, body, secret="s3cr3tAlnumClientSecret")
    assert (refused.value.failure.code, refused.value.failure.shown) == ("401", "HTTP 401")
    with pytest.raises(Unusable) as shown:
        grant.answer(401, body, secret="another-secret")
    assert shown.value.failure.shown == f"HTTP 401 {error}"


def test_remembered_notes_do_not_pile_up_however_many_clients_share_a_failing_issuer() -> None:
    """A token fetch failing on a discovery failure that is still remembered: the token cache
    keeps the discovery's first message, so a second client (or a token retry before the
    discovery's) reads one note, never "…; not retried before A; not retried before B". The
    code is kept along. Mutation caught: the token cache storing the annotated error."""
    now = [1000.0]
    endpoints: Remembered[str] = Remembered(
        8, backoff=5, clock=lambda: now[0], monotonic=lambda: now[0]
    )
    tokens: Remembered[str] = Remembered(
        8, backoff=5, clock=lambda: now[0], monotonic=lambda: now[0]
    )
    message = "OIDC discovery at https://i failed: HTTP 503"

    def discover() -> tuple[str, float]:
        raise errors.ProviderUnavailable(message, code="503")

    def fetch() -> tuple[str, float]:
        return endpoints.get(("i",), discover, wait=1, what="discovery"), 100

    seen: list[errors.CredentialError] = []
    for key, advance in [("a", 1.0), ("a", 10.0), ("a", 1.0), ("b", 1.0), ("b", 1.0), ("a", 0)]:
        with pytest.raises(errors.ProviderUnavailable) as raised:
            tokens.get((key,), fetch, wait=1, what="token")
        seen.append(raised.value)
        now[0] += advance
    for error in seen:
        assert str(error).startswith(message)
        assert str(error).count("; ") <= 1, str(error)
        assert error.code == "503"


def test_insecure_urls_are_refused_with_their_code(issuer: Issuer, tls_issuer: Issuer) -> None:
    with pytest.raises(oidc.InsecureIssuer) as insecure:
        oidc.TokenSource().token(client(issuer.issuer("ok")))
    assert insecure.value.code == "InsecureIssuer"
    with pytest.raises(errors.ProviderRejected) as endpoint:
        source(allow_insecure=False).token(client(tls_issuer.issuer("http-token")))
    assert endpoint.value.code == "InsecureTokenEndpoint"


def test_a_token_costs_one_observed_call_of_each_kind_then_none_while_cached(
    issuer: Issuer,
) -> None:
    calls = Calls()
    tokens = source(observer=calls)
    for client_id in ("a", "a", "b"):
        assert tokens.token(client(issuer.issuer("ok"), client_id)).value == "tok"
    assert calls.codes == [("discovery", "200"), ("token", "200"), ("token", "200")]
    assert issuer.count() == 3


def test_waiting_for_another_callers_slow_fetch_ends_at_the_deadline_with_its_code(
    issuer: Issuer,
) -> None:
    tokens = source()
    slow = client(issuer.issuer("trickle-body"))
    first = threading.Thread(target=lambda: timed(lambda: tokens.token(slow)), daemon=True)
    first.start()
    wait_for(lambda: issuer.count("GET") == 1, timeout=DEADLINE, what="the first fetch in flight")
    elapsed, exc = timed(lambda: tokens.token(slow))
    first.join()
    assert isinstance(exc, errors.ProviderUnavailable)
    assert exc.code == "DeadlineExceeded"
    assert elapsed < DEADLINE + SLACK
    assert issuer.count("GET") == 1, "the second caller waited for the first fetch"
