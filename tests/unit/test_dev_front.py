"""The dev gateway's parts that need no LiteLLM: the front door (a real HTTP server in front of
a real one), the readiness list and per-model fingerprints of a configuration, the OpenAI
stand-in's overlap of keys, and the live table's gateway block."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from rotator_devkit.devenv import front, gateways, table
from rotator_devkit.devenv.standins import upstreams
from tests.support.polling import wait_for

CONFIG = """
model_list:
- model_name: gpt
  litellm_params: {model: openai/gpt, api_key: KEY1}
- model_name: claude
  litellm_params: {model: bedrock/claude, aws_access_key_id: AKIA1}
- model_name: '*'
  litellm_params: {model: openai/*, api_key: KEY1}
"""


class Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    release = threading.Event()
    received: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Upstream.received.append(self.path)
        if self.path == "/hangup":  # no answer at all
            self.close_connection = True
            return
        if self.path == "/garbage":  # not HTTP
            self.close_connection = True
            self.wfile.write(b"nonsense\r\n\r\n")
            return
        if self.path == "/short":  # fewer bytes than announced, then gone
            self.close_connection = True
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            self.wfile.write(b"0123456789")
            return
        if self.path == "/slow":
            Upstream.release.wait(10)
        if self.path == "/stream":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (b"data: 1\n\n", b"data: 2\n\n"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
            return
        answer = json.dumps({"body": body.decode(), "auth": self.headers["Authorization"]})
        self.send_response(201)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer.encode())

    def log_message(self, format: str, *args: Any) -> None:
        pass


@dataclass
class Proxy:
    port: int


class Proxies:
    """RollingGateway's enter/leave, counting requests in flight per proxy."""

    def __init__(self, proxy: Proxy | None) -> None:
        self.current = proxy
        self.in_flight = 0
        self.lock = threading.Lock()

    def enter(self) -> Proxy | None:
        with self.lock:
            self.in_flight += self.current is not None
            return self.current

    def leave(self, proxy: Proxy) -> None:
        with self.lock:
            self.in_flight -= 1


@pytest.fixture
def upstream() -> Iterator[Proxy]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield Proxy(int(server.server_address[1]))
    Upstream.release.set()
    server.shutdown()
    server.server_close()


def post(port: int, path: str, conn: http.client.HTTPConnection | None = None) -> tuple[int, bytes]:
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", path, body=b'{"m": 1}', headers={"Authorization": "Bearer k"})
    response = conn.getresponse()
    return response.status, response.read()


def test_front_door_passes_requests_whole_and_counts_them_in_flight(upstream: Proxy) -> None:
    proxies = Proxies(upstream)
    door = front.FrontDoor(proxies, port=0).start()  # type: ignore[arg-type]
    try:
        conn = http.client.HTTPConnection("127.0.0.1", door.port, timeout=10)
        status, body = post(door.port, "/v1/chat/completions", conn)
        assert status == 201
        assert json.loads(body) == {"body": '{"m": 1}', "auth": "Bearer k"}
        assert post(door.port, "/stream", conn) == (200, b"data: 1\n\ndata: 2\n\n")  # kept alive
        Upstream.release.clear()
        slow = threading.Thread(target=post, args=(door.port, "/slow"))
        slow.start()
        # the request is counted on its proxy until answered
        wait_for(lambda: proxies.in_flight == 1, timeout=10, what="the request in flight")
        Upstream.release.set()
        slow.join(10)
        # counted out by the handler's thread, after the answer reached the client
        wait_for(lambda: proxies.in_flight == 0, timeout=10, what="the request counted out")
    finally:
        door.stop()


def test_front_door_says_starting_before_a_proxy_serves_and_frees_its_port() -> None:
    door = front.FrontDoor(Proxies(None), port=0).start()  # type: ignore[arg-type]
    port = door.port
    assert post(port, "/v1/chat/completions")[0] == 503
    taken = front.FrontDoor(Proxies(None), port=port)  # type: ignore[arg-type]
    assert taken.port not in (0, port), "a taken port falls back to a free one"
    taken.stop()
    door.stop()
    again = front.FrontDoor(Proxies(None), port=port)  # type: ignore[arg-type]
    assert again.port == port
    again.stop()


def test_readiness_models_leave_wildcards_out_and_fingerprints_follow_credentials() -> None:
    assert gateways.served_models(CONFIG) == ["gpt", "claude"]
    before = gateways.fingerprints(CONFIG)
    after = gateways.fingerprints(CONFIG.replace("AKIA1", "AKIA2"))
    assert before["gpt"] == after["gpt"]
    assert before["claude"] != after["claude"]
    assert "AKIA" not in json.dumps(after)


def test_openai_standin_overlaps_keys_then_retires_the_old_one() -> None:
    up = upstreams.OpenAIStandIn()
    up.accept("sk-old")
    up.add_keys("sk-new")
    assert up.accepted() == sorted(up.label(k) for k in ("sk-old", "sk-new"))
    up.retire_keys("sk-old")
    assert up.accepted() == [up.label("sk-new")]
    up.add_keys("sk-old")  # accepted again: no longer retired
    assert len(up.accepted()) == 2


def test_table_shows_each_gateway_model_with_backend_and_last_rotation() -> None:
    now = 1_800_000_000.0
    rows = [
        gateways.Row("http://127.0.0.1:4000", "gpt", "openai", None, now - 5),
        gateways.Row("http://127.0.0.1:4000", "claude", "bedrock", now - 65, None),
    ]
    lines = table.render([], now, rows).splitlines()
    header = next(x for x in lines if x.startswith("GATEWAY"))
    assert header.split() == ["GATEWAY", "MODEL", "BACKEND", "LAST", "ROTATION", "LAST", "REQUEST"]
    gpt = next(x for x in lines if " gpt " in x)
    assert gpt.split()[:4] == ["http://127.0.0.1:4000", "gpt", "openai", "-"]
    assert gpt.endswith("(5s ago)")
    claude = next(x for x in lines if " claude " in x)
    assert "07:58:55 (65s ago)" in claude
    assert claude.endswith("-")


def raw(port: int, data: bytes, *, shut: bool = False) -> bytes:
    """What a connection to ``port`` receives for ``data``, until the server closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        if shut:
            s.shutdown(socket.SHUT_WR)  # the client gone mid-body
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def test_front_door_answers_502_when_the_proxy_breaks_before_answering_without_traceback(
    upstream: Proxy, capfd: pytest.CaptureFixture[str]
) -> None:
    proxies = Proxies(upstream)
    door = front.FrontDoor(proxies, port=0).start()  # type: ignore[arg-type]
    try:
        for path in ("/hangup", "/garbage"):
            assert post(door.port, path)[0] == 502, path
        # mid-answer: the client's connection is closed, the answer left incomplete
        with pytest.raises(http.client.IncompleteRead):
            post(door.port, "/short")
        wait_for(lambda: proxies.in_flight == 0, timeout=10, what="every request counted out")
    finally:
        door.stop()
    assert "Traceback" not in capfd.readouterr().err


def test_front_door_refuses_bodies_it_cannot_frame_and_forwards_no_short_one(
    upstream: Proxy,
) -> None:
    door = front.FrontDoor(Proxies(upstream), port=0).start()  # type: ignore[arg-type]
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
    try:
        Upstream.received.clear()
        for length in (b"abc", b"-5"):
            answer = raw(door.port, head + b"Content-Length: " + length + b"\r\n\r\n{}")
            assert answer.startswith(b"HTTP/1.1 400 "), answer  # and closed: raw() returned
        chunked = raw(door.port, head + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n")
        assert chunked.startswith(b"HTTP/1.1 411 "), chunked  # and closed
        short = raw(door.port, head + b"Content-Length: 100\r\n\r\n{}", shut=True)
        assert short == b"", short
        assert Upstream.received == [], "nothing forwarded"
    finally:
        door.stop()
