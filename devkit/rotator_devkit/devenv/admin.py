"""``rotator dev``'s admin endpoint: what a user (through ``rotator standins``, :mod:`.control`)
or a test asks of the running stand-ins and gateways, in JSON over HTTP on loopback — the
provider's side of an operator's work, which nothing in the cluster can do: accept a new API
key, revoke an old one, make a provider fail or heal.

* ``GET /status`` — ``gateways`` (:meth:`DevGateways.status`: address, proxies, per model its
  backend and last rotation), ``modes`` (each stand-in's), ``openaiKeys`` (labels of the keys
  the OpenAI stand-in accepts, never the keys);
* ``POST /keys`` — ``{"accept": [...], "retire": [...]}``: API keys the OpenAI stand-in accepts
  from now on besides those it does (a rotation's overlap begins), and keys it refuses from now
  on (the overlap is over; a request with one is recorded ``expired``);
* ``POST /held`` — ``{"key": "..."}``: ``{"held": true}`` while a gateway proxy that may still
  serve a request carries the key (the rollout off it has not finished);
* ``POST /mode`` — ``{"standIn": "sts", "mode": "ok" | "fail"}``: ``fail`` answers every call 503
  until ``ok`` (any of :data:`providers.STAND_INS` but moto);
* ``GET /upstreams`` — every request the model API stand-ins received, by name: rows ``[at, path,
  verdict, credential]``, the credential a label (:meth:`ModelUpstream.label`);
* ``GET /issued`` — ``{"values": [...]}``, every secret value the stand-ins issued or were given
  (for the tests' leak scans; it serves loopback only, in a development run).

Keys travel in request bodies, never in a URL, and nothing here logs a request. A request must
name the endpoint in its ``Host`` header as ``127.0.0.1:<port>`` or ``localhost:<port>`` (403
otherwise: a web page whose name was made to resolve to loopback sends its own), and a POST must
be ``Content-Type: application/json`` (415 otherwise: a page's form cannot send that without
asking first).
"""

from __future__ import annotations

from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from rotator_devkit.devenv.gateways import DevGateways
from rotator_devkit.devenv.providers import ProviderStandIns
from rotator_devkit.devenv.standins.httpstub import Stub

DEFAULT_PORT = 4001
"""The admin endpoint's port, when free (:data:`gateways.DEFAULT_PORT` plus one)."""
MODES = ("ok", "fail")


class DevAdmin(Stub):
    def __init__(self, standins: ProviderStandIns, gateways: DevGateways | None) -> None:
        super().__init__()
        self.standins = standins
        self.gateways = gateways

    def status(self) -> dict[str, Any]:
        return {
            "gateways": self.gateways.status() if self.gateways is not None else {},
            "modes": {name: stub.mode for name, stub in self.standins.stubs().items()},
            "openaiKeys": self.standins.openai.accepted(),
        }

    def handle(self, handler: BaseHTTPRequestHandler, method: str, body: bytes) -> None:
        port = self._server.server_address[1]
        if (handler.headers.get("Host") or "").lower() not in (
            f"127.0.0.1:{port}",
            f"localhost:{port}",
        ):
            self.reply_json(
                handler, 403, {"error": f"Host must be 127.0.0.1:{port} or localhost:{port}"}
            )
            return
        content_type = (handler.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if method == "POST" and content_type != "application/json":
            self.reply_json(handler, 415, {"error": "Content-Type must be application/json"})
            return
        reads: dict[str, Callable[[], Any]] = {
            "/status": self.status,
            "/upstreams": lambda: {n: u.seen_json() for n, u in self.standins.upstreams().items()},
            "/issued": lambda: {"values": sorted(self.standins.issued())},
        }
        writes: dict[str, Callable[[dict[str, Any]], Any]] = {
            "/keys": self._keys,
            "/held": self._held,
            "/mode": self._mode,
        }
        self.answer_admin(handler, method, body, reads=reads, writes=writes)

    def _keys(self, request: dict[str, Any]) -> dict[str, Any]:
        accept, retire = _keys(request, "accept"), _keys(request, "retire")
        self.standins.openai.add_keys(*accept)
        self.standins.openai.retire_keys(*retire)
        return {"accepted": len(accept), "retired": len(retire)}

    def _held(self, request: dict[str, Any]) -> dict[str, Any]:
        key = request["key"]
        if not isinstance(key, str) or not key:
            raise TypeError("key is not a non-empty string")
        return {"held": self.gateways is not None and self.gateways.holds(key)}

    def _mode(self, request: dict[str, Any]) -> dict[str, Any]:
        name, mode = str(request["standIn"]), str(request["mode"])
        stubs = self.standins.stubs()
        if name not in stubs:
            raise KeyError(f"no stand-in {name!r}: {', '.join(sorted(stubs))}")
        if mode not in MODES:
            raise ValueError(f"no mode {mode!r}: {', '.join(MODES)}")
        stubs[name].set_mode(mode)
        return {"standIn": name, "mode": mode}


def _keys(request: dict[str, Any], field: str) -> list[str]:
    keys = request.get(field) or []
    if not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys):
        raise TypeError(f"{field} is not a list of non-empty strings")
    return keys
