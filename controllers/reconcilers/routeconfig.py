"""The route configuration a gateway loads: rendered from a Route, its backends and their
credentials, deterministically, so the same inputs always give the same bytes and hash.

The configuration is YAML text, so a credential goes in only if it is text: :func:`credentials_text`
turns a derived Secret's data into text or says which key is not (never what it holds), and the
Route reconciler leaves that one backend out. A configuration larger than a Secret can hold
(:data:`MAX_SECRET_BYTES`) cannot be written at all: :func:`secret_size` lets the reconciler refuse
it with a condition instead of sending a request the API server would reject.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from controllers.reconcilers import api

FORMAT_VERSION = "rotator.dev/v1alpha1"

MAX_SECRET_BYTES = 1024 * 1024
"""What a Secret's data may hold, keys and decoded values together (the API server's
``MaxSecretSize``, 1 MiB)."""


class InvalidCredentials(ValueError):
    """A derived credential that cannot go into a text configuration. The message names the key
    and the problem, never a byte of the value."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"key {key!r} {problem}")
        self.key = key


@dataclass(frozen=True)
class ResolvedCredentials:
    policy: str
    type: str
    data: Mapping[str, str] = field(repr=False)
    expires_at: str | None = None


@dataclass(frozen=True)
class ResolvedBackend:
    name: str
    spec: api.BackendSpec
    credentials: ResolvedCredentials | None


def render(
    route: api.Route,
    backends: Mapping[str, ResolvedBackend],
) -> str:
    """``config.yaml`` for ``route``: every rule, with the resolvable backends in spec order.

    ``backends`` holds only what resolved; a reference to anything else is left out of the rule,
    so traffic never goes to a backend that is missing or cannot authenticate.
    """
    md = route["metadata"]
    rules = []
    for rule in route["spec"]["rules"]:
        out: list[dict[str, Any]] = []
        for ref in rule["backendRefs"]:
            backend = backends.get(ref["name"])
            if backend is not None:
                out.append(_backend(backend, weight=ref["weight"], priority=ref["priority"]))
        rules.append({"matches": [dict(m) for m in rule.get("matches") or []], "backends": out})
    config = {
        "apiVersion": FORMAT_VERSION,
        "kind": "RouteConfig",
        "route": {"namespace": md.get("namespace", ""), "name": md.get("name", "")},
        "rules": rules,
    }
    return yaml.safe_dump(config, sort_keys=False, default_flow_style=False)


def config_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def secret_size(text: str) -> int:
    """The size the API server checks against :data:`MAX_SECRET_BYTES` for a config Secret
    holding ``text``: its one key plus the UTF-8 bytes of the value."""
    return len(api.ROUTE_CONFIG_KEY.encode()) + len(text.encode())


def credentials_text(data: Mapping[str, str]) -> dict[str, str]:
    """A derived Secret's ``data`` (base64 values) as text; raises :class:`InvalidCredentials`
    for the first key (in sorted order) whose value is not base64 or not UTF-8."""
    out: dict[str, str] = {}
    for key in sorted(data):
        try:
            raw = base64.b64decode(data[key], validate=True)
        except ValueError:  # binascii.Error included
            raise InvalidCredentials(key, "is not base64") from None
        try:
            out[key] = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidCredentials(key, "is not UTF-8 text") from None
    return out


def _backend(backend: ResolvedBackend, *, weight: int, priority: int) -> dict[str, Any]:
    endpoint = backend.spec["endpoint"]
    tls = endpoint.get("tls") or {}
    out: dict[str, Any] = {
        "name": backend.name,
        "schema": backend.spec["schema"],
        "endpoint": {
            "host": endpoint["host"],
            "port": endpoint["port"],
            "tls": {
                "enabled": tls.get("enabled", True),
                **({"sni": tls["sni"]} if "sni" in tls else {}),
            },
        },
        "weight": weight,
        "priority": priority,
    }
    c = backend.credentials
    if c is not None:
        creds: dict[str, Any] = {"type": c.type, "policy": c.policy}
        if c.expires_at:
            creds["expiresAt"] = c.expires_at
        creds["data"] = {k: c.data[k] for k in sorted(c.data)}
        out["credentials"] = creds
    return out
