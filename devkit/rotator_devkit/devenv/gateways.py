"""``rotator dev``'s gateways: for each sample Route marked for it (annotation :data:`MARK`), a
LiteLLM gateway on loopback that reads the route configuration rotator writes, in front of the
model API stand-ins, which accept only the credentials the providers' stand-ins issued.

Before the samples are applied, :meth:`DevGateways.prepare` points the marked Routes'
ServiceBackends at the stand-in of their schema (OpenAI, Bedrock runtime, Azure OpenAI, Vertex
AI; plain HTTP on loopback) and tells the OpenAI one the API keys of the sample Secrets. Then
a thread watches each marked Route's config Secret and, when its ``config.yaml`` changes, rolls
the Route's LiteLLM proxy (LiteLLM reads its configuration only when it starts:
:class:`gateway.RollingGateway`). A new proxy takes the traffic once a chat completion of every
model through it succeeds. Clients never see the proxies' ports: each Route has one address for
the whole run (:class:`front.FrontDoor`, the first on the port asked for), printed with a curl
line once its first proxy serves. :meth:`DevGateways.rows` feeds the live table: per model, its
backend, when a new credential last went into service, and the last request its stand-in
accepted.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import yaml

from controllers.reconcilers import api as rapi
from controllers.runtime import client as clients
from controllers.runtime import clock as clocks
from controllers.runtime import errors, objects
from rotator_devkit.devenv import envoygateway, front, gateway
from rotator_devkit.devenv.envoyproc import envoy_binary
from rotator_devkit.devenv.providers import ProviderStandIns
from rotator_devkit.devenv.standins import upstreams

MARK = "dev.rotator.dev/gateway"
"""On a sample Route: ``LiteLLM`` runs a LiteLLM gateway for it under ``rotator dev``, ``Envoy``
an Envoy (:mod:`.envoygateway`)."""
LITELLM = "LiteLLM"
ENVOY = "Envoy"

STAND_INS = {
    "OpenAI": "openai",
    "AWSBedrock": "bedrock",
    "AzureOpenAI": "azure-openai",
    "GCPVertexAI": "vertex-ai",
}
"""Backend schema → the model API stand-in (:meth:`ProviderStandIns.upstreams`) serving it."""

HISTORY = 100
SETTLE = 15.0
"""Seconds a configuration lacking some of the Route's models must stay the newest to be rolled
(:meth:`DevGateways._settled`)."""
DEFAULT_PORT = 4000
"""The gateway's port (LiteLLM's own default), when free."""
DEFAULT_ENVOY_PORT = 10000
"""The Envoy gateway's port (Envoy's customary one), when free."""


@dataclass(frozen=True)
class Row:
    """One model of a gateway, as the live table shows it."""

    gateway: str
    """The gateway's address."""
    model: str
    backend: str
    rotated: float | None
    """When the gateway last took a new credential for this model into service."""
    last_request: float | None
    """When this model's stand-in last accepted a request (any gateway's, or a probe's)."""


@dataclass
class _Gateway:
    route: str
    models: dict[str, str]
    """Model → the backend its rule names first."""
    proxies: gateway.RollingGateway
    door: front.FrontDoor
    digest: str = ""
    printed: bool = False
    fingerprints: dict[str, str] | None = None
    rotated: dict[str, float] | None = None
    history: dict[str, list[float]] = field(default_factory=dict)
    partial: str = ""
    """The newest configuration seen that lacks some of the Route's models, and since when."""
    partial_since: float = 0.0
    """Model → when each new credential went into service, the latest :data:`HISTORY`."""


class DevGateways:
    def __init__(
        self,
        folder: Path,
        standins: ProviderStandIns,
        *,
        out: TextIO,
        port: int = DEFAULT_PORT,
        envoy_port: int = DEFAULT_ENVOY_PORT,
        now: Callable[[], float] = time.time,
    ) -> None:
        """``standins``: started, with their model API stand-ins; ``port``: the first LiteLLM
        gateway's, ``envoy_port`` the first Envoy's (0: a free one; a taken one falls back to a
        free one, which is printed)."""
        self.folder = folder
        self.out = out
        self.port = port
        self.envoy_port = envoy_port
        self.now = now
        self.master_key = "sk-dev-" + secrets.token_urlsafe(16)
        self.standins = standins
        self.on_change: Callable[[], None] | None = None
        """Called when a gateway takes a new configuration into service (the table's refresh)."""
        self._routes: dict[str, dict[str, str]] = {}  # marked Route → model → backend
        self._schemas: dict[str, str] = {}  # backend → schema
        self._gateways: dict[str, _Gateway] = {}
        self._envoy_routes: dict[str, tuple[dict[str, str], int]] = {}  # route → models, port
        self._envoys: dict[str, envoygateway.EnvoyGateway] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def prepare(self, docs: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
        """Points the marked Routes' backends at the stand-ins, and registers the API keys of
        the samples' Secrets with the OpenAI one; returns ``docs``, changed in place."""
        available = {LITELLM: gateway.executable() is not None, ENVOY: envoy_binary() is not None}
        marked = [
            d
            for d in docs
            if d["kind"] == "Route"
            and available.get((d["metadata"].get("annotations") or {}).get(MARK, ""), False)
        ]
        if not marked:
            return docs
        names = {
            ref["name"]
            for r in marked
            for rule in r["spec"]["rules"]
            for ref in rule["backendRefs"]
        }
        ups = self.standins.upstreams()
        for doc in docs:
            backend = doc["kind"] == "ServiceBackend" and doc["metadata"]["name"] in names
            if backend and doc["spec"]["schema"] in STAND_INS:
                url = ups[STAND_INS[doc["spec"]["schema"]]].url
                doc["spec"]["endpoint"] = {
                    "host": "127.0.0.1",
                    "port": int(url.rsplit(":", 1)[1]),
                    "tls": {"enabled": False},
                }
                self._schemas[doc["metadata"]["name"]] = doc["spec"]["schema"]
        keys = [
            str(value)
            for d in docs
            if d["kind"] == "Secret"
            for value in (d.get("stringData") or {}).values()
            if str(value).startswith("sk-")
        ]
        self.standins.openai.accept(*keys)
        for route in marked:
            models: dict[str, str] = {}
            for rule in route["spec"]["rules"]:
                for match in rule.get("matches") or [{"modelName": "*"}]:
                    if "modelName" in match:
                        models.setdefault(match["modelName"], rule["backendRefs"][0]["name"])
            key = f"{namespace}/{route['metadata']['name']}"
            if route["metadata"]["annotations"][MARK] == ENVOY:
                wanted = self.envoy_port if not self._envoy_routes else 0
                port = wanted if wanted and _free(wanted) else _free_port()
                output = route["spec"].setdefault("output", {})
                output["envoy"] = {"address": "127.0.0.1", "port": port}
                self._envoy_routes[key] = ({m: b for m, b in models.items() if m != "*"}, port)
            else:
                self._routes[key] = models
        return docs

    def start(self, api: clients.Client) -> None:
        """Opens each gateway's address (503 until its first proxy serves) and starts watching
        the route configurations."""
        if not self._routes and not self._envoy_routes:
            return
        for route, (models, port) in sorted(self._envoy_routes.items()):
            self._envoys[route] = envoygateway.EnvoyGateway(
                route,
                self.folder / route.split("/", 1)[1],
                port=port,
                models=models,
                now=self.now,
                say=self._print,
            )
        for n, (route, models) in enumerate(sorted(self._routes.items())):
            folder = self.folder / route.split("/", 1)[1]
            folder.mkdir(parents=True, exist_ok=True)
            proxies = gateway.RollingGateway(
                folder,
                master_key=self.master_key,
                ready_models=served_models,
                on_switch=functools.partial(self._switched, route),
                drain_timeout=front.UPSTREAM_TIMEOUT,
            )
            door = front.FrontDoor(proxies, port=self.port if n == 0 else 0).start()
            self._gateways[route] = _Gateway(route, models, proxies, door)
        self._thread = threading.Thread(
            target=self._loop, args=(api,), name="gateways", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Closes every address, then stops the proxies (their requests answered first)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)
        for g in self._gateways.values():
            g.door.stop()
        for g in self._gateways.values():
            with contextlib.suppress(Exception):
                g.proxies.stop()
        for e in self._envoys.values():
            e.stop()

    def rows(self) -> list[Row]:
        """Every model of every gateway, for the live table."""
        ups = self.standins.upstreams()
        last: dict[str, float | None] = {}
        for name, up in ups.items():
            last[name] = next(
                (s.at for s in reversed(up.seen_snapshot()) if s.verdict == upstreams.CURRENT),
                None,
            )
        out = []
        with self._lock:
            for _, g in sorted(self._gateways.items()):
                for model, backend in g.models.items():
                    stand_in = STAND_INS.get(self._schemas.get(backend, ""), "")
                    out.append(
                        Row(
                            gateway=g.door.url,
                            model=model,
                            backend=backend,
                            rotated=(g.rotated or {}).get(model),
                            last_request=last.get(stand_in),
                        )
                    )
            for _, e in sorted(self._envoys.items()):
                for model, backend in e.models.items():
                    stand_in = STAND_INS.get(self._schemas.get(backend, ""), "")
                    out.append(Row(e.url, model, backend, e.rotated.get(model), last.get(stand_in)))
        return out

    def holds(self, value: str) -> bool:
        """Whether a proxy that may still serve a request carries ``value`` (an API key):
        once it is False after a rotation, no request can carry the old key any more."""
        return any(
            value in p.config_text for g in self._gateways.values() for p in g.proxies.running()
        ) or any(e.holds(value) for e in self._envoys.values())

    def status(self) -> dict[str, Any]:
        """Each gateway: its address, proxies started and running, and per model its backend,
        when a new credential last went into service (RFC 3339, and as seconds since the epoch
        in ``lastRotationAt``) and each time one did (``rotationsAt``)."""
        answer: dict[str, Any] = {}
        for row in self.rows():
            g = answer.setdefault(row.gateway, {"models": {}})
            g["models"][row.model] = {
                "backend": row.backend,
                "lastRotation": _rfc3339(row.rotated),
                "lastRotationAt": row.rotated,
                "lastRequest": _rfc3339(row.last_request),
            }
        for route, gw in self._gateways.items():
            for model, times in gw.history.items():
                answer[gw.door.url]["models"][model]["rotationsAt"] = list(times)
            answer[gw.door.url].update(
                route=route,
                serving=gw.proxies.current is not None,
                proxiesStarted=gw.proxies.rolls,
                proxiesRunning=len(gw.proxies.running()),
            )
        for e in self._envoys.values():
            for model, times in e.history.items():
                answer[e.url]["models"][model]["rotationsAt"] = list(times)
            answer[e.url].update(e.status())
        return answer

    def _loop(self, api: clients.Client) -> None:
        while not self._stop.is_set():
            for g in self._gateways.values():
                with contextlib.suppress(errors.ApiError, OSError, RuntimeError, TimeoutError):
                    self._reconcile(api, g)
            for e in self._envoys.values():
                with contextlib.suppress(errors.ApiError, OSError, RuntimeError, TimeoutError):
                    if e.reconcile(api) and self.on_change is not None:
                        self.on_change()
            self._stop.wait(0.5)

    def _reconcile(self, api: clients.Client, g: _Gateway) -> None:
        namespace, name = g.route.split("/", 1)
        try:
            secret = api.get(
                objects.SECRETS, rapi.route_config_secret_name(name), namespace=namespace
            )
        except errors.NotFound:
            return
        digest = str((secret["metadata"].get("annotations") or {}).get(rapi.CONFIG_HASH_ANNOTATION))
        if g.digest == digest:
            return
        text = base64.b64decode(secret["data"][rapi.ROUTE_CONFIG_KEY]).decode()
        if "model_list:" not in text:
            return  # not (yet) a LiteLLM configuration
        missing = set(g.models) - set(served_models(text)) - {"*"}
        if missing and not self._settled(g, digest):
            return
        g.digest = digest
        g.proxies.roll(text, wait=False)

    def _settled(self, g: _Gateway, digest: str) -> bool:
        """Whether a configuration that lacks some of the Route's models has been the newest
        for :data:`SETTLE` seconds. rotator renders one while a backend's credential is not
        there yet (the first seconds of a run, a renewal under way) and the complete one right
        after; a proxy started on it would answer 400 for those models once ready (its
        readiness covers only the models it has), and every start delays the next. One that
        stays is rolled all the same: the Route's other models need their new credentials."""
        now = self.now()
        if g.partial != digest:
            g.partial, g.partial_since = digest, now
        return now - g.partial_since >= SETTLE

    def _switched(
        self, route: str, proxy: gateway.LiteLLMProxy, _: gateway.LiteLLMProxy | None
    ) -> None:
        """A new proxy serves ``route``: notes which models got a new credential with it, and
        prints the gateway's address the first time."""
        g = self._gateways[route]
        now = self.now()
        prints = fingerprints(proxy.config_text)
        with self._lock:
            before, g.fingerprints = g.fingerprints, prints
            g.rotated = dict(g.rotated or {})
            if before is not None:
                for model, value in prints.items():
                    if model in before and before[model] != value:  # not a model appearing
                        g.rotated[model] = now
                        g.history[model] = [*g.history.get(model, [])[-HISTORY + 1 :], now]
        if not g.printed:
            g.printed = True
            models = "\n".join(f"    {m}  ({b})" for m, b in g.models.items())
            line = curl(g.door.url, self.master_key, next(iter(g.models)))
            self._print(
                f"\ngateway for Route {route} (LiteLLM): {g.door.url}, the same address for the "
                f"whole run; its models:\n{models}\ntry:\n  {line}\n"
            )
        if self.on_change is not None:
            self.on_change()

    def _print(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()


def served_models(config_text: str) -> list[str]:
    """The model names of a LiteLLM configuration, but wildcards: what a new proxy must complete
    before it takes the traffic."""
    doc = yaml.safe_load(config_text) or {}
    names = [str(m.get("model_name")) for m in doc.get("model_list") or []]
    return [n for n in dict.fromkeys(names) if "*" not in n]


def fingerprints(config_text: str) -> dict[str, str]:
    """Model name → a digest of its deployments' parameters (credentials included): it changes
    exactly when what the model is served with does. A digest, never the values."""
    doc = yaml.safe_load(config_text) or {}
    by_model: dict[str, list[Any]] = {}
    for m in doc.get("model_list") or []:
        by_model.setdefault(str(m.get("model_name")), []).append(m.get("litellm_params"))
    return {
        model: hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()
        for model, params in by_model.items()
    }


def curl(url: str, master_key: str, model: str) -> str:
    """A shell line that sends a chat request for ``model`` through the gateway at ``url``."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]})
    return (
        f"curl -sS {url}/v1/chat/completions -H 'Authorization: Bearer {master_key}' "
        f"-H 'Content-Type: application/json' -d '{body}'"
    )


def _free(port: int) -> bool:
    """Whether ``port`` of 127.0.0.1 can be bound now (Envoy binds its listener later, from the
    configuration rendered with it)."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rfc3339(at: float | None) -> str | None:
    return None if at is None else clocks.rfc3339(at)
