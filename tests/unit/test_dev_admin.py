"""``rotator standins`` against ``rotator dev``'s admin endpoint, both real, over loopback: keys
accepted and retired at the OpenAI stand-in, a stand-in made to fail and healed, the wait for a
key no gateway proxy carries, and the answers to what cannot be done."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from controllers import cli
from rotator_devkit.devenv import admin, control
from rotator_devkit.devenv.standins import upstreams
from rotator_devkit.devenv.standins.httpstub import Stub


class StandIns:
    """What the admin endpoint reads of ProviderStandIns: real model stand-ins, unstarted."""

    def __init__(self) -> None:
        self.openai = upstreams.OpenAIStandIn()

    def stubs(self) -> dict[str, Stub]:
        return {"openai": self.openai}

    def upstreams(self) -> dict[str, upstreams.ModelUpstream]:
        return {"openai": self.openai}

    def issued(self) -> frozenset[str]:
        return self.openai.issued_values()


class Gateways:
    def __init__(self) -> None:
        self.carried: set[str] = set()

    def holds(self, value: str) -> bool:
        return value in self.carried

    def status(self) -> dict[str, Any]:
        return {}


@pytest.fixture
def endpoint() -> Iterator[tuple[admin.DevAdmin, StandIns, Gateways]]:
    standins, gateways = StandIns(), Gateways()
    served = admin.DevAdmin(standins, gateways).start()  # type: ignore[arg-type]
    yield served, standins, gateways
    served.stop()


def run(capsys: pytest.CaptureFixture[str], url: str, *argv: str) -> tuple[int, Any, str]:
    code = cli.main(["standins", "--admin", url, *argv])
    out, err = capsys.readouterr()
    return code, json.loads(out) if out.strip() else None, err


def test_a_key_is_accepted_beside_the_others_then_retired(
    endpoint: tuple[admin.DevAdmin, StandIns, Gateways], capsys: pytest.CaptureFixture[str]
) -> None:
    served, standins, _ = endpoint
    standins.openai.accept("sk-first")
    assert run(capsys, served.url, "accept-key", "sk-second")[:2] == (
        0,
        {"accepted": 1, "retired": 0},
    )
    labels = {standins.openai.label(k) for k in ("sk-first", "sk-second")}
    code, status, _ = run(capsys, served.url, "status")
    assert code == 0
    assert set(status["openaiKeys"]) == labels
    assert "sk-first" not in json.dumps(status), "labels, never keys"
    assert run(capsys, served.url, "retire-key", "sk-first")[0] == 0
    assert standins.openai.accepted() == [standins.openai.label("sk-second")]


def test_a_stand_in_fails_until_healed_and_an_unknown_one_is_named(
    endpoint: tuple[admin.DevAdmin, StandIns, Gateways], capsys: pytest.CaptureFixture[str]
) -> None:
    served, standins, _ = endpoint
    assert run(capsys, served.url, "fail", "openai")[:2] == (
        0,
        {"standIn": "openai", "mode": "fail"},
    )
    assert standins.openai.mode == "fail"
    assert run(capsys, served.url, "heal", "openai")[0] == 0
    assert standins.openai.mode == "ok"
    code, _, err = run(capsys, served.url, "fail", "nope")
    assert code == 1
    assert "no stand-in 'nope'" in err


def test_wait_released_returns_once_no_proxy_carries_the_key_and_gives_up_after_its_timeout(
    endpoint: tuple[admin.DevAdmin, StandIns, Gateways], capsys: pytest.CaptureFixture[str]
) -> None:
    served, _, gateways = endpoint
    assert run(capsys, served.url, "wait-released", "sk-old")[:2] == (0, {"held": False})
    gateways.carried.add("sk-old")
    code = control.run("wait-released", "sk-old", url=served.url, timeout=0.2)
    assert code == 1
    assert "still carries the key" in capsys.readouterr().err


def test_usage_without_a_value_and_an_endpoint_that_is_not_there(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["standins", "--admin", "http://127.0.0.1:9", "accept-key"]) == cli.EXIT_USAGE
    code, _, err = run(capsys, "http://127.0.0.1:9", "status")
    assert code == 1
    assert "Connection refused" in err


def test_only_json_posts_addressed_to_loopback_by_name_are_served(
    endpoint: tuple[admin.DevAdmin, StandIns, Gateways],
) -> None:
    """A web page cannot use the endpoint: a form's POST is not JSON (415), and a page whose
    name was made to resolve to 127.0.0.1 sends its own name as Host (403)."""
    served, standins, _ = endpoint
    port = served.url.rsplit(":", 1)[1]

    def ask(method: str, path: str, headers: dict[str, str], body: bytes | None = None) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=10)
        conn.putrequest(method, path, skip_host=True)
        for name, value in headers.items():
            conn.putheader(name, value)
        conn.endheaders(body)
        status = conn.getresponse().status
        conn.close()
        return status

    keys = json.dumps({"accept": ["sk-form"]}).encode()
    length = {"Content-Length": str(len(keys))}
    form = {"Content-Type": "application/x-www-form-urlencoded", **length}
    assert ask("POST", "/keys", {"Host": f"127.0.0.1:{port}", **form}, keys) == 415
    assert ask("POST", "/keys", {"Host": f"127.0.0.1:{port}", **length}, keys) == 415
    assert standins.openai.accepted() == [], "nothing done"
    assert ask("GET", "/issued", {"Host": f"evil.example:{port}"}) == 403
    assert ask("GET", "/issued", {}) == 403
    assert ask("GET", "/issued", {"Host": f"localhost:{port}"}) == 200
    json_post = {"Host": f"localhost:{port}", "Content-Type": "application/json", **length}
    assert ask("POST", "/keys", json_post, keys) == 200


def test_an_answer_that_is_not_json_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    """Another program on the port: a web page, as a 200 and as a 404."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            page = b"<html>hello</html>"
            self.send_response(200 if self.path == "/status" else 404)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def do_POST(self) -> None:
            self.do_GET()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        for argv in (["status"], ["heal", "openai"]):
            code, _, err = run(capsys, url, *argv)
            assert code == 1, argv
            assert "not JSON" in err, err
            assert "Traceback" not in err, err
    finally:
        server.shutdown()
        server.server_close()
