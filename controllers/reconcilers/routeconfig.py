"""The route configuration a gateway loads: rendered from a Route, its backends and their
credentials, deterministically, so the same inputs always give the same bytes and hash.

The configuration is YAML text, so a credential goes in only if it is text: :func:`credentials_text`
turns a derived Secret's data into text or says which key is not (never what it holds), and the
Route reconciler leaves that one backend out. A configuration larger than a Secret can hold
(:data:`MAX_SECRET_BYTES`) cannot be written at all: :func:`secret_size` lets the reconciler refuse
it with a condition instead of sending a request the API server would reject.

How a gateway presents a credential is stated in the configuration, not left to knowledge of
providers: an API key's :class:`CredentialHeader` says which header it goes in and whether its
value is ``Bearer <key>`` or the key alone. The default, ``Authorization: Bearer``, is left
implicit (no ``header`` block), as it was before the block existed, so the configurations of
existing policies keep their bytes and hash.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
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


BEARER = "Bearer"
"""Header value format: ``Bearer <key>`` (RFC 6750's scheme)."""
RAW = "Raw"
"""Header value format: the key alone, no scheme (Azure OpenAI's ``api-key``, Anthropic's
``x-api-key``)."""


@dataclass(frozen=True)
class CredentialHeader:
    """The HTTP header a gateway sends an API key in: its name, and the value's format
    (:data:`BEARER` or :data:`RAW`). Never holds the key."""

    name: str
    format: str


IMPLICIT_HEADER = CredentialHeader(api.DEFAULT_API_KEY_HEADER, BEARER)
"""What an ``APIKey`` credential without a ``header`` block means: ``Authorization: Bearer
<key>``, the only behaviour before the block existed."""


def api_key_header(spec: Mapping[str, Any]) -> CredentialHeader | None:
    """The header block of a policy's credentials, from its ``spec``; None when there is none to
    state: a type other than ``APIKey`` (their ``type`` says how they are used), or
    :data:`IMPLICIT_HEADER` (left implicit, so existing configurations keep their bytes).

    ``Authorization`` carries the ``Bearer`` scheme; the other headers carry the key as it is.
    """
    if spec.get("type") != "APIKey":
        return None
    name = str((spec.get("apiKey") or {}).get("header") or api.DEFAULT_API_KEY_HEADER)
    header = CredentialHeader(name, BEARER if name == "Authorization" else RAW)
    return None if header == IMPLICIT_HEADER else header


@dataclass(frozen=True)
class GCPLocation:
    """A ``GCPCredentials`` policy's ``projectName`` and ``region``: where its Vertex AI
    requests go, which their URL path names. Read by a format that builds that path (LiteLLM's,
    :mod:`litellmconfig`); rotator's own leaves the path to the gateway and renders neither."""

    project: str
    region: str


def gcp_location(spec: Mapping[str, Any]) -> GCPLocation | None:
    """The :class:`GCPLocation` of a policy's ``spec``; None for a type other than
    ``GCPCredentials``."""
    gcp = spec.get("gcpCredentials") if spec.get("type") == "GCPCredentials" else None
    if not gcp:
        return None
    return GCPLocation(str(gcp.get("projectName") or ""), str(gcp.get("region") or ""))


@dataclass(frozen=True)
class ResolvedCredentials:
    policy: str
    type: str
    data: Mapping[str, str] = field(repr=False)
    expires_at: str | None = None
    header: CredentialHeader | None = None
    """Stated in the configuration when set; see :func:`api_key_header`."""
    gcp: GCPLocation | None = None
    """Of a ``GCPCredentials`` policy; not in :func:`inputs_digest` (rotator's own format does
    not render it), in :func:`litellmconfig.inputs_digest` (which does)."""


DUMPER: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
"""libyaml's emitter when PyYAML has it (its wheels do): every route's configuration is rendered
on every reconcile, a restart included, to compare with what is written, and PyYAML's Python
emitter took 2.5 ms a route (a third of a restart's CPU), libyaml's takes 0.5. The two write the
same text for printable-ASCII configurations (tests/unit/test_routeconfig.py) but for a key
longer than 128 characters, which PyYAML writes as a complex key (``? key``), and where they fold
a long escaped string (non-ASCII or control characters) at the line width: the same YAML either
way, so a consumer reads the same configuration; only such a route's Secret is rewritten once,
on the upgrade (and, its hash changed, its ``rolloutRestartTargets`` rolled out once)."""


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
    return yaml.dump(config, Dumper=DUMPER, sort_keys=False, default_flow_style=False)


RENDER_REVISION = 1
"""Part of :func:`inputs_digest`: raise it with any change to what a configuration *says* for
the same inputs, so that those recorded as up to date are rendered again. Not for a change of
layout alone (PyYAML's version, libyaml or not): the text written then is the same YAML, and a
record of its inputs stays true."""


def inputs_digest(route: api.Route, backends: Mapping[str, ResolvedBackend]) -> str:
    """SHA-256 of everything :func:`render` reads (the route's name and rules, each resolved
    backend's spec and credentials, the format and :data:`RENDER_REVISION`): equal digests
    render the same configuration. Whole specs and rules go in, not only the fields read, so a
    change elsewhere in them renders again (and writes nothing, the text being the same).

    Why: rendering is the costly part of a reconcile that changes nothing (PyYAML builds its
    representation in Python: ~0.3 ms a route, a third of a restart's reconciling), and this is
    a few microseconds (orjson, keys sorted). The route config Secret records it (see
    ``RouteReconciler``), so a restart renders only the routes whose inputs changed."""
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
        if c.header is not None:
            creds["header"] = {"name": c.header.name, "format": c.header.format}
        creds["data"] = {k: c.data[k] for k in sorted(c.data)}
        out["credentials"] = creds
    return out
