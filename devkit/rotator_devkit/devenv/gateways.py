"""``rotator dev``'s gateways: a LiteLLM proxy on loopback for each sample Route marked for it
(annotation :data:`MARK`), reading the route configuration rotator writes, in front of local
model stand-ins that accept only the credentials rotator serves.

Before the samples are applied, :meth:`DevGateways.prepare` points the marked Routes'
ServiceBackends at the stand-ins (an OpenAI-compatible one; plain HTTP on loopback) and tells
each stand-in the API keys of the sample Secrets. Then a thread watches each marked Route's
config Secret and, when its ``config.yaml`` changes, rolls the Route's proxy (LiteLLM reads its
configuration only when it starts: :class:`gateway.RollingGateway`). Each proxy's ``curl`` line
is printed once it serves; :meth:`DevGateways.rows` feeds the live table the last request each
Route's upstream answered.
"""

from __future__ import annotations

import base64
import contextlib
import secrets
import threading
from pathlib import Path
from typing import Any, TextIO

from controllers.reconcilers import api as rapi
from controllers.runtime import client as clients
from controllers.runtime import errors, objects
from rotator_devkit.devenv import gateway
from rotator_devkit.devenv.standins import upstreams

MARK = "dev.rotator.dev/gateway"
"""On a sample Route: ``LiteLLM`` runs a LiteLLM proxy for it under ``rotator dev``."""

_SCHEMAS = {"OpenAI"}
"""Backend schemas with a stand-in here."""


class DevGateways:
    def __init__(self, folder: Path, openai: upstreams.OpenAIStandIn, *, out: TextIO) -> None:
        """``openai``: the provider stand-ins' OpenAI-compatible upstream (started with them)."""
        self.folder = folder
        self.out = out
        self.master_key = "sk-dev-" + secrets.token_urlsafe(16)
        self.openai = openai
        self._routes: dict[str, list[str]] = {}  # marked Route → the models its rules name
        self._gateways: dict[str, gateway.RollingGateway] = {}
        self._hashes: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def prepare(self, docs: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
        """Points the marked Routes' backends at the stand-ins, and registers the API keys of
        the samples' Secrets with them; returns ``docs``, changed in place."""
        marked = [
            d
            for d in docs
            if d["kind"] == "Route"
            and (d["metadata"].get("annotations") or {}).get(MARK) == "LiteLLM"
        ]
        if not marked or gateway.executable() is None:
            return docs
        names = {
            ref["name"]
            for r in marked
            for rule in r["spec"]["rules"]
            for ref in rule["backendRefs"]
        }
        port = int(self.openai.url.rsplit(":", 1)[1])
        for doc in docs:
            backend = doc["kind"] == "ServiceBackend" and doc["metadata"]["name"] in names
            if backend and doc["spec"]["schema"] in _SCHEMAS:
                doc["spec"]["endpoint"] = {
                    "host": "127.0.0.1",
                    "port": port,
                    "tls": {"enabled": False},
                }
        keys = [
            str(value)
            for d in docs
            if d["kind"] == "Secret"
            for value in (d.get("stringData") or {}).values()
            if str(value).startswith("sk-")
        ]
        self.openai.accept(*keys)
        for route in marked:
            models = [
                m["modelName"]
                for rule in route["spec"]["rules"]
                for m in rule.get("matches") or []
                if "modelName" in m
            ]
            self._routes[f"{namespace}/{route['metadata']['name']}"] = models or ["*"]
        return docs

    def start(self, api: clients.Client) -> None:
        if not self._routes:
            return
        self._thread = threading.Thread(
            target=self._loop, args=(api,), name="gateways", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)
        for g in self._gateways.values():
            with contextlib.suppress(Exception):
                g.stop()

    def rows(self) -> list[tuple[str, str, float | None]]:
        """(route, gateway URL, when its upstream last answered a request) for the live table."""
        last = next(
            (
                s.at
                for s in reversed(self.openai.seen_snapshot())
                if s.verdict == upstreams.CURRENT and s.path.endswith("/chat/completions")
            ),
            None,
        )
        out = []
        for route in sorted(self._routes):
            g = self._gateways.get(route)
            url = g.current.url if g is not None and g.current is not None else "starting"
            out.append((route, url, last))
        return out

    def _loop(self, api: clients.Client) -> None:
        while not self._stop.is_set():
            for route in self._routes:
                with contextlib.suppress(errors.ApiError, OSError, RuntimeError, TimeoutError):
                    self._reconcile(api, route)
            self._stop.wait(1.0)

    def _reconcile(self, api: clients.Client, route: str) -> None:
        namespace, name = route.split("/", 1)
        try:
            secret = api.get(
                objects.SECRETS, rapi.route_config_secret_name(name), namespace=namespace
            )
        except errors.NotFound:
            return
        digest = str((secret["metadata"].get("annotations") or {}).get(rapi.CONFIG_HASH_ANNOTATION))
        if self._hashes.get(route) == digest:
            return
        text = base64.b64decode(secret["data"][rapi.ROUTE_CONFIG_KEY]).decode()
        if "model_list:" not in text:
            return  # not (yet) a LiteLLM configuration
        g = self._gateways.get(route)
        if g is None:
            folder = self.folder / name
            folder.mkdir(parents=True, exist_ok=True)
            g = self._gateways[route] = gateway.RollingGateway(folder, master_key=self.master_key)
        first = g.current is None
        g.roll(text, wait=first)
        self._hashes[route] = digest
        if first and (proxy := g.current) is not None:
            self._print(
                f"\ngateway for Route {route} (LiteLLM, {proxy.url}); try:\n"
                f"  {proxy.curl(self._routes[route][0])}\n"
            )

    def _print(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()
