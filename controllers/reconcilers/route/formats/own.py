"""rotator's own route configuration format (``spec.output.format: rotator.dev/v1alpha1``, the
default): rendered from a Route, its backends and their credentials, deterministically, so the
same inputs always give the same bytes and hash. It expresses every spec: no gaps.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import orjson

from controllers.reconcilers import api
from controllers.reconcilers.route.formats.base import (
    Backends,
    Gap,
    Rendered,
    ResolvedBackend,
    ResolvedCredentials,
    dump,
)

FORMAT_VERSION = "rotator.dev/v1alpha1"


def render(route: api.Route, backends: Backends) -> str:
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
    return dump(config)


RENDER_REVISION = 1
"""Part of :func:`inputs_hash`: raise it with any change to what a configuration *says* for
the same inputs, so that those recorded as up to date are rendered again. Not for a change of
layout alone (PyYAML's version, libyaml or not): the text written then is the same YAML, and a
record of its inputs stays true."""


def inputs_hash(route: api.Route, backends: Backends) -> str:
    """SHA-256 of everything :func:`render` reads (the route's name and rules, each resolved
    backend's spec and credentials, the format and :data:`RENDER_REVISION`): equal hashes
    render the same configuration. Whole specs and rules go in, not only the fields read, so a
    change elsewhere in them renders again (and writes nothing, the text being the same).

    Why: rendering is the costly part of a reconcile that changes nothing (PyYAML builds its
    representation in Python: ~0.3 ms a route, a third of a restart's reconciling), and this is
    a few microseconds (orjson, keys sorted). The route config Secret records it
    (:mod:`..configsecret`), so a restart renders only the routes whose inputs changed."""
    md = route["metadata"]
    resolved = {
        name: [backend.spec, _credentials_inputs(backend.credentials)]
        for name, backend in backends.items()
    }
    canonical = orjson.dumps(
        [
            FORMAT_VERSION,
            RENDER_REVISION,
            md.get("namespace", ""),
            md.get("name", ""),
            route["spec"]["rules"],
            resolved,
        ],
        option=orjson.OPT_SORT_KEYS,
    )
    return hashlib.sha256(canonical).hexdigest()


def _credentials_inputs(c: ResolvedCredentials | None) -> list[Any] | None:
    if c is None:
        return None
    header = None if c.header is None else [c.header.name, c.header.format]
    return [c.policy, c.type, dict(c.data), c.expires_at, header]


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
        if c.header is not None:
            creds["header"] = {"name": c.header.name, "format": c.header.format}
        creds["data"] = {k: c.data[k] for k in sorted(c.data)}
        out["credentials"] = creds
    return out


class OwnFormat:
    """:class:`.base.Format` of rotator's own configuration."""

    name = api.DEFAULT_OUTPUT_FORMAT
    reports_gaps = False

    def inputs_hash(self, route: api.Route, backends: Backends) -> str:
        return inputs_hash(route, backends)

    def gaps(self, route: api.Route, backends: Backends) -> Sequence[Gap]:
        return ()

    def render(self, route: api.Route, backends: Backends) -> Rendered:
        return Rendered(render(route, backends), ())


FORMAT = OwnFormat()
