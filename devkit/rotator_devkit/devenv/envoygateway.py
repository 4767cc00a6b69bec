"""``rotator dev``'s Envoy gateway: for a sample Route marked ``dev.rotator.dev/gateway: Envoy``
(``spec.output.format: Envoy``), one Envoy on loopback that serves the whole run from the route
config Secret's files, never restarted.

The dev kit plays the kubelet: each time the config Secret changes, its data is laid into a folder
exactly as a Secret volume is (:class:`.secretvolume.AtomicWriter`, the ``..data`` swap), and Envoy
reloads what changed by itself. Envoy starts once the first configuration is there; its address is
printed, with a curl line per model, once a chat completion of every model through it succeeds.
A model's credential "went into service" when its backend's credential file changed in the folder
(Envoy reads it within a second: its ``watched_directory``).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controllers.reconcilers import api as rapi
from controllers.reconcilers.route.formats import envoy as envoyformat
from controllers.runtime import client as clients
from controllers.runtime import errors, objects
from rotator_devkit.devenv.envoyproc import EnvoyProcess
from rotator_devkit.devenv.secretvolume import AtomicWriter

HISTORY = 100


class EnvoyGateway:
    """One Route's Envoy: its folder, its process, and when each model's credential changed."""

    def __init__(
        self,
        route: str,
        folder: Path,
        *,
        port: int,
        models: dict[str, str],
        now: Callable[[], float],
        say: Callable[[str], None],
    ) -> None:
        """``route``: ``namespace/name``; ``models``: model → the backend its rule names first;
        ``say``: prints to the user."""
        self.route = route
        self.folder = folder
        self.url = f"http://127.0.0.1:{port}"
        self.models = models
        self.now = now
        self.say = say
        self.mount = folder / "config"
        self.mount.mkdir(parents=True, exist_ok=True)
        self.writer = AtomicWriter(self.mount)
        self.process: EnvoyProcess | None = None
        self.digest = ""
        self.printed = False
        self.fingerprints: dict[str, str] | None = None
        self.rotated: dict[str, float] = {}
        self.history: dict[str, list[float]] = {}
        self.lock = threading.Lock()

    @property
    def serving(self) -> bool:
        return self.printed and self.process is not None and self.process.alive()

    def reconcile(self, api: clients.Client) -> bool:
        """Lays out a changed configuration, starts Envoy on the first, and prints the address
        once every model answers; True when a model took a new credential into service."""
        namespace, name = self.route.split("/", 1)
        try:
            secret = api.get(
                objects.SECRETS, rapi.route_config_secret_name(name), namespace=namespace
            )
        except errors.NotFound:
            return False
        annotations = secret["metadata"].get("annotations") or {}
        digest = str(annotations.get(rapi.CONFIG_HASH_ANNOTATION))
        changed = False
        data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
        if digest != self.digest and envoyformat.LISTENERS in data:
            self.writer.write(data)
            self.digest = digest
            changed = self._note(data)
            if self.process is None:
                self.process = EnvoyProcess(self.mount, log=self.folder / "envoy.log").start()
        if self.process is not None and not self.printed and self._answers():
            self.printed = True
            lines = "\n".join(f"  {curl(self.url, m)}" for m in self.models)
            listing = "\n".join(f"    {m}  ({b})" for m, b in self.models.items())
            self.say(
                f"\ngateway for Route {self.route} (Envoy): {self.url}, one Envoy for the whole "
                f"run that reloads each rotated credential with no restart; its models:\n"
                f"{listing}\ntry:\n{lines}\n"
            )
        return changed

    def holds(self, value: str) -> bool:
        """Whether a file Envoy reads now holds ``value`` (an API key): once False after a
        rotation, Envoy sends it no more (it reloads a changed file within a second)."""
        encoded = value.encode()
        return any(
            encoded in path.read_bytes()
            for path in self.mount.iterdir()
            if not path.name.startswith("..") and path.is_file()
        )

    def stop(self) -> None:
        if self.process is not None:
            with contextlib.suppress(Exception):
                self.process.stop()

    def status(self) -> dict[str, Any]:
        process = self.process
        return {
            "route": self.route,
            "serving": self.serving,
            "pid": process.pid if process is not None else None,
            "starts": 0 if process is None else 1,
        }

    def _note(self, data: dict[str, bytes]) -> bool:
        """Records which models' credential files changed; True if any did."""
        prints = {
            model: hashlib.sha256(
                b"".join(data.get(f, b"") for f in envoyformat.credential_files(backend))
            ).hexdigest()
            for model, backend in self.models.items()
        }
        now = self.now()
        changed = False
        with self.lock:
            before, self.fingerprints = self.fingerprints, prints
            if before is not None:
                for model, value in prints.items():
                    if before.get(model) != value:
                        self.rotated[model] = now
                        self.history[model] = [*self.history.get(model, [])[-HISTORY + 1 :], now]
                        changed = True
        return changed

    def _answers(self) -> bool:
        """Whether a chat completion of every model through Envoy succeeds."""
        for model in self.models:
            body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]})
            request = urllib.request.Request(  # noqa: S310 - http on loopback
                f"{self.url}/v1/chat/completions",
                data=body.encode(),
                headers={"Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310
                    if answer.status != 200:
                        return False
            except (urllib.error.URLError, OSError):
                return False
        return True


def curl(url: str, model: str) -> str:
    """A shell line that sends a chat request for ``model`` through Envoy at ``url`` (no key:
    Envoy sends each backend the credential rotator minted for it, and removes any sent)."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]})
    return f"curl -sS {url}/v1/chat/completions -H 'Content-Type: application/json' -d '{body}'"
