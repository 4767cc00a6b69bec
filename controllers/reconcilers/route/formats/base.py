"""What every route configuration format reads and returns: the resolved inputs
(:class:`ResolvedBackend`), the one interface (:class:`Format`) and its answer
(:class:`Rendered`: the text, and the :class:`Gap`\\ s of what it leaves out).

How a gateway presents a credential is stated in the configuration, not left to knowledge of
providers: an API key's :class:`CredentialHeader` says which header it goes in and whether its
value is ``Bearer <key>`` or the key alone. The default, ``Authorization: Bearer``, is left
implicit (no ``header`` block), as it was before the block existed, so the configurations of
existing policies keep their bytes and hash.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import yaml

from controllers.reconcilers import api

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
    :mod:`.litellm`); rotator's own leaves the path to the gateway and renders neither."""

    project: str
    region: str


def gcp_location(spec: Mapping[str, Any]) -> GCPLocation | None:
    """The :class:`GCPLocation` of a policy's ``spec``; None for a type other than
    ``GCPCredentials``."""
    gcp = spec.get("gcpCredentials") if spec.get("type") == "GCPCredentials" else None
    if not gcp:
        return None
    return GCPLocation(str(gcp.get("projectName") or ""), str(gcp.get("region") or ""))


GCP_PROJECT = re.compile(
    r"(?:[a-z0-9-]{1,63}(?:\.[a-z0-9-]{1,63}){0,8}:)?[a-z][a-z0-9-]{4,28}[a-z0-9]|[0-9]{1,20}"
)
"""A Google Cloud project ID (6 to 30 lowercase letters, digits and hyphens, a letter first,
not a hyphen last), with the ``domain:`` prefix of the older ones, or a project number (which
Vertex AI's paths take too): never a ``/``, ``..``, ``?`` or ``%`` that would take the token to
another path of the host."""
GCP_REGION = re.compile(r"[a-z][a-z0-9-]{0,62}")
"""A Vertex AI location (``us-central1``, ``europe-west4``, ``global``)."""


def gcp_locations(backends: Mapping[str, ResolvedBackend]) -> dict[str, list[str]]:
    """Each GCP backend's project and region, by name: what the formats that build Vertex AI's
    path read beyond rotator's own inputs (their inputs hashes take it)."""
    return {
        name: [b.credentials.gcp.project, b.credentials.gcp.region]
        for name, b in sorted(backends.items())
        if b.credentials is not None and b.credentials.gcp is not None
    }


@dataclass(frozen=True)
class ResolvedCredentials:
    policy: str
    type: str
    data: Mapping[str, str] = field(repr=False)
    expires_at: str | None = None
    header: CredentialHeader | None = None
    """Stated in the configuration when set; see :func:`api_key_header`."""
    gcp: GCPLocation | None = None
    """Of a ``GCPCredentials`` policy; not in :func:`.own.inputs_hash` (rotator's own format
    does not render it), in :func:`.litellm.inputs_hash` (which does)."""


@dataclass(frozen=True)
class ResolvedBackend:
    name: str
    spec: api.BackendSpec
    credentials: ResolvedCredentials | None


Backends = Mapping[str, ResolvedBackend]
"""What resolved, by backend name (:mod:`..resolve`): a format renders only these."""


@dataclass(frozen=True)
class Gap:
    """Something of the Route that a configuration does not hold, and why. Never holds a
    credential."""

    rule: int
    backend: str | None
    what: str

    def __str__(self) -> str:
        where = f"rule {self.rule}" + (f" backend {self.backend}" if self.backend else "")
        return f"{where}: {self.what}"


@dataclass(frozen=True)
class Rendered:
    """A format's configuration: the text the config Secret holds (its ``config.yaml``), its gaps,
    and the further files of a format that needs more than one (Envoy's: keys of the same Secret,
    files of the directory the gateway mounts)."""

    text: str
    gaps: Sequence[Gap]
    files: Mapping[str, str] = field(default_factory=dict)

    def data(self) -> dict[str, str]:
        """The config Secret's data, decoded: ``config.yaml`` and the further files."""
        return {api.ROUTE_CONFIG_KEY: self.text, **self.files}


class Format(Protocol):
    """A route configuration format: ``spec.output.format`` names it (:func:`.of`).

    A new format is a new module with one object of this shape; the reconciler asks nothing
    else. ``gaps`` and ``render`` are never both called in one reconcile: ``gaps`` is for a
    configuration already in place (no text needed), ``render`` for one to write.
    """

    @property
    def name(self) -> str:
        """Its ``spec.output.format`` value."""
        ...

    @property
    def reports_gaps(self) -> bool:
        """Whether the Route carries ``Translated`` for it (False: a format that expresses every
        spec, rotator's own; ``Translated`` is removed)."""
        ...

    def inputs_hash(self, route: api.Route, backends: Backends) -> str:
        """SHA-256 of everything :meth:`render` reads: equal hashes render the same text."""
        ...

    def gaps(self, route: api.Route, backends: Backends) -> Sequence[Gap]:
        """What :meth:`render` would leave out, without rendering the text."""
        ...

    def render(self, route: api.Route, backends: Backends) -> Rendered: ...


DUMPER: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
"""libyaml's emitter when PyYAML has it (its wheels do): every route's configuration is rendered
on every reconcile, a restart included, to compare with what is written, and PyYAML's Python
emitter took 2.5 ms a route (a third of a restart's CPU), libyaml's takes 0.5. The two write the
same text for printable-ASCII configurations (tests/unit/test_routeconfig.py) but for a key
longer than 128 characters, which PyYAML writes as a complex key (``? key``), and where they fold
a long escaped string (non-ASCII or control characters) at the line width: the same YAML either
way, so a consumer reads the same configuration; only such a route's Secret is rewritten once,
on the upgrade (and, its hash changed, its ``rolloutRestartTargets`` rolled out once)."""


def dump(config: Mapping[str, Any]) -> str:
    """``config`` as YAML, keys in the order given: how every format writes its text."""
    return yaml.dump(config, Dumper=DUMPER, sort_keys=False, default_flow_style=False)


def config_hash(text: str, files: Mapping[str, str] | None = None) -> str:
    """The configuration's hash: the config Secret's ``rotator.dev/config-hash`` and what
    ``rolloutRestartTargets`` are rolled out for. Of ``config.yaml`` alone for a format of one file
    (the hash every earlier configuration has); of every file, keys sorted, otherwise."""
    if not files:
        return hashlib.sha256(text.encode()).hexdigest()
    digest = hashlib.sha256()
    for key, value in sorted({api.ROUTE_CONFIG_KEY: text, **files}.items()):
        for part in (key, value):
            encoded = part.encode()
            digest.update(len(encoded).to_bytes(8, "big") + encoded)
    return digest.hexdigest()
