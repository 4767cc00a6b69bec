"""The route configuration a gateway loads: rendered from a Route, its backends and their
credentials, deterministically, so the same inputs always give the same bytes and hash."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from controllers.reconcilers import api

FORMAT_VERSION = "rotator.dev/v1alpha1"


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
