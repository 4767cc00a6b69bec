"""The route configuration for an Envoy proxy (``spec.output.format: Envoy``): stock Envoy 1.40
filters only, laid out as files a running Envoy reloads when the kubelet updates the mounted
config Secret, so a rotated credential reaches it with no restart and no rollout.

The Secret's keys are the files of one directory, which Envoy runs in (its working directory; every
path in the configuration is relative to it):

- ``config.yaml`` — the bootstrap (``envoy -c config.yaml``): a node, and listeners and clusters
  from the two files below, each watched (``path_config_source`` with ``watched_directory: .``).
  The kubelet writes a Secret volume as links through ``..data``, swapped by a rename; the rename
  is the event Envoy watches for, and it then reads every file again.
- ``lds.yaml`` and ``cds.yaml`` — the listener with its routes, and one cluster per backend. They
  hold no credential: they change only when routing does (a Route, a backend, a policy's region
  or project), never on a rotation.
- one credential file per backend that has one, which is what a rotation changes:
  ``sds-<backend>.yaml``, a generic secret by file-based SDS, which the cluster's
  ``envoy.filters.http.credential_injector`` puts in the policy's header (an API key, or an Azure
  or Google access token as ``Authorization: Bearer``); ``aws-<backend>.credentials``, an AWS
  credentials file the cluster's ``envoy.filters.http.aws_request_signing`` signs with (SigV4,
  with the session token), watched the same way. ``cds.yaml`` names them through ``..data/``
  (:data:`VERSION_LINK`), the version the rename installed: the kubelet links a new key's
  top-level name only after the rename, and Envoy reads ``cds.yaml`` on the rename, so a new
  backend's file named at the top level may not exist yet — Envoy then refuses the whole
  cluster update (``paths must refer to an existing path``) and waits for the next swap, which for
  an API key may never come (seen under load: the new backend answered 503).

How a request is routed (checked against the envoy 1.40.0 binary, not only its docs):

- Clients speak the OpenAI API (``POST /v1/chat/completions``, the model in the JSON body), as with
  the LiteLLM format. ``envoy.filters.http.json_to_metadata`` copies the body's ``model`` into
  dynamic metadata (namespace :data:`METADATA_NAMESPACE`), and a ``modelName`` match is a route
  match on it; a ``pathPrefix`` match is Envoy's own path prefix. Routes are tried in order, so
  the first rule to match wins, as in rotator's own format.
- Weights: Envoy's ``weighted_clusters`` cannot rewrite the path per cluster, and backends of
  different types need different paths. So each backend of a match is its own route, all but the
  last with a ``runtime_fraction`` of the cumulative weight: Envoy draws one random value per
  request and offers it to every route (measured: three routes at 1/3, 2/3 and the rest got
  215/193/192 of 600 requests), so the first route whose fraction holds it takes the request and
  each backend gets its weight's share exactly.
- Priorities: Envoy fails over between the priorities of one cluster's endpoints, not between
  clusters with different credentials and paths: the lowest priority of a match is rendered, and
  each backend of a higher one is a gap.
- Each route rewrites the OpenAI API root ``/v1/`` to the backend type's (:data:`API_ROOTS`;
  Vertex AI's names the policy's project and region) and sets ``Host`` to the backend's host.
- Credentials a client sends (``Authorization``, ``api-key``, ``x-api-key``, AWS's headers) are
  removed: a backend gets only what rotator minted for it, or nothing.
- A match whose backends all fail to resolve answers 503: the request must not fall through to a
  later rule, which rotator's own format would never route it to.

What Envoy cannot express is a gap (:class:`.base.Gap`), named in ``Translated``: a higher
priority, a ``GCPAnthropic`` backend (Claude on Vertex AI has no OpenAI-compatible endpoint), a
credential type its backend cannot take, a credential that is not a valid header value, a
Vertex AI model not named ``<publisher>/<model>`` (Envoy sends the body as it is, and that
endpoint takes only such names), a Vertex AI or Bedrock backend without the policy that says where
its requests go. Messages name fields and types, never values.
"""

from __future__ import annotations

import configparser
import copy
import hashlib
import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from controllers.reconcilers import api
from controllers.reconcilers.route.formats import own
from controllers.reconcilers.route.formats.base import (
    BEARER,
    GCP_PROJECT,
    GCP_REGION,
    IMPLICIT_HEADER,
    Backends,
    Gap,
    GCPLocation,
    Rendered,
    ResolvedBackend,
    ResolvedCredentials,
    dump,
    gcp_locations,
)

FORMAT = "Envoy"
"""``spec.output.format`` of a Route rendered by this module."""

RENDER_REVISION = 2
"""As :data:`.own.RENDER_REVISION`, for this format (2: credential files named through
:data:`VERSION_LINK`)."""

BOOTSTRAP = api.ROUTE_CONFIG_KEY
"""The bootstrap's key: ``config.yaml``, the key every format's configuration has."""
LISTENERS = "lds.yaml"
CLUSTERS = "cds.yaml"
WATCHED = {"path": "."}
"""``watched_directory`` of every file: Envoy's working directory, the mounted Secret."""
VERSION_LINK = "..data"
"""The link a Secret (or ConfigMap) volume swaps by a rename to publish a version, before it links
the top-level names of new keys: ``cds.yaml`` reads credential files through it."""

DEFAULT_ADDRESS = "0.0.0.0"  # noqa: S104 - the gateway's listener, in its Pod
DEFAULT_PORT = 10000
"""The listener when ``spec.output.envoy`` names none (Envoy's customary port)."""

METADATA_NAMESPACE = "rotator.dev"
"""Where ``json_to_metadata`` puts the request body's ``model``."""
MODEL_KEY = "model"

CA_FILE = "/etc/ssl/certs/ca-certificates.crt"
"""The trust store upstream TLS is verified against: Envoy has none of its own; this is where the
official ``envoyproxy/envoy`` image (Ubuntu) and Debian keep the system's."""

OPENAI_ROOT = "/v1/"
"""The API root clients address: OpenAI's."""
API_ROOTS: Mapping[str, str] = {
    "OpenAI": "/v1/",
    "Anthropic": "/v1/",  # its OpenAI SDK compatibility: /v1/chat/completions
    "AzureOpenAI": "/openai/v1/",  # Azure OpenAI's v1 API: the model in the body
    "AWSBedrock": "/openai/v1/",  # Bedrock runtime's OpenAI-compatible chat completions
}
"""ServiceBackend ``schema`` → what ``/v1/`` becomes upstream. ``GCPVertexAI``'s names the
policy's project and region (:func:`_vertex_root`); ``GCPAnthropic`` has none (a gap)."""
VERTEX = "GCPVertexAI"
VERTEX_ROOT = "/v1/projects/{project}/locations/{region}/endpoints/openapi/"

CLIENT_CREDENTIAL_HEADERS = (
    "authorization",
    "proxy-authorization",
    "cookie",
    "api-key",
    "x-api-key",
    "x-goog-api-key",
    "x-goog-user-project",
    "openai-organization",
    "openai-project",
    "x-amz-security-token",
    "x-amz-date",
    "x-amz-content-sha256",
)
"""Removed from every request: a backend gets only the credential rotator minted for it, and a
client does not pick the organisation, project or billing project it is used against."""

JSON_CONTENT_TYPES = (
    "application/json",
    "application/json; charset=utf-8",
    "application/json;charset=utf-8",
    "application/json; charset=UTF-8",
    "application/json;charset=UTF-8",
)
"""What ``json_to_metadata`` reads (it compares the whole header; no content type is read too). A
body it does not read — another type, not a JSON object, a ``model`` that is not a string — has
no model: it matches no ``modelName`` rule, as a request without a model, and goes to a rule
without matches or a ``pathPrefix`` one, or is answered 404."""

BODY_LIMIT = 32 * 1024 * 1024
"""Per connection buffer: ``json_to_metadata`` reads the whole body before routing, and Envoy's
default (1 MiB) would refuse a chat request with an image in it (413)."""

TIMEOUT = "300s"
"""A route's upstream timeout: a completion can take minutes (Envoy's default is 15 s)."""

_TYPE = "type.googleapis.com/envoy."
_HEADER_VALUE = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?")
"""A header value Envoy sends as it is: visible ASCII, inner spaces, no CR, LF or NUL (which
would end the header, or be refused by the codec) and no blank at either end."""
_AWS_REGION = re.compile(r"[a-z]{2}(?:-[a-z0-9]+)+")
"""An AWS region (``us-east-1``, ``us-gov-west-1``): it goes into the routing part."""

_HOSTNAME = re.compile(r"(?=.{1,253}\Z)[A-Za-z0-9](?:[-A-Za-z0-9.]*[A-Za-z0-9])?")
_FILE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
_MAX_KEY = 253


@dataclass(frozen=True)
class Listener:
    """``spec.output.envoy``: where the listener binds."""

    address: str
    port: int


LOOPBACK = "127.0.0.1"


def listener(route: api.Route) -> Listener:
    """Where the listener binds; loopback when ``spec.output.envoy.address`` is not an IP address
    (the CRD's pattern lets through ``1.2.3``: a listener Envoy cannot bind would take every
    rule down)."""
    spec = (route["spec"].get("output") or {}).get("envoy") or {}
    address = str(spec.get("address") or DEFAULT_ADDRESS)
    if not _is_ip(address):
        address = LOOPBACK
    return Listener(address, int(spec.get("port") or DEFAULT_PORT))


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class _Upstream:
    """One backend as Envoy reaches it: its cluster, credential file and route settings."""

    cluster: dict[str, Any]
    files: Mapping[str, str]
    root: str
    host: str


@dataclass
class _Built:
    routes: list[dict[str, Any]]
    clusters: dict[str, dict[str, Any]]
    files: dict[str, str]
    gaps: list[Gap]


def build(route: api.Route, backends: Backends) -> _Built:
    """The listener's routes, the clusters and credential files, and what is left out; no YAML
    (the reconciler asks for the gaps alone when the configuration in place is up to date)."""
    out = _Built([], {}, {}, [])
    if (address := _address_problem(route)) is not None:
        out.gaps.append(Gap(0, None, address))
    if (size := _estimated_size(route)) > MAX_ESTIMATE:
        out.gaps.append(
            Gap(
                0,
                None,
                f"the rules would make about {size} bytes of Envoy routes (a route per match "
                f"and backend), over the {MAX_ESTIMATE} a config Secret can hold: no rule is "
                "rendered",
            )
        )
        return out
    upstreams: dict[str, _Upstream | str] = {}
    for index, rule in enumerate(route["spec"]["rules"]):
        for ref in rule["backendRefs"]:
            backend = backends.get(ref["name"])
            if backend is not None and backend.name not in upstreams:
                upstreams[backend.name] = _upstream(backend)
        for match in _matches(rule):
            picks = _picks(
                index, rule, match, backends=backends, upstreams=upstreams, gaps=out.gaps
            )
            out.routes.extend(_routes(index, match, picks, out.gaps))
            for upstream, _, name in picks:
                out.clusters[name] = upstream.cluster
                out.files.update(upstream.files)
        if not rule.get("matches"):
            break  # it takes every request: the rules after it are unreachable
    out.gaps = list(dict.fromkeys(out.gaps))
    return out


def _picks(
    index: int,
    rule: api.Rule,
    match: dict[str, Any],
    *,
    backends: Backends,
    upstreams: Mapping[str, _Upstream | str],
    gaps: list[Gap],
) -> list[tuple[_Upstream, int, str]]:
    """The backends a match routes to, with their weights: those that resolved, have a share
    of traffic and that Envoy can reach for this match, of the lowest priority among them."""
    usable: list[tuple[_Upstream, api.BackendRef]] = []
    for ref in rule["backendRefs"]:
        backend = backends.get(ref["name"])
        if backend is None or ref["weight"] == 0:
            continue  # unresolved (ResolvedRefs says so), or no share of traffic
        upstream = upstreams[backend.name]
        problem = upstream if isinstance(upstream, str) else _model_problem(backend, match)
        if problem is not None:
            gaps.append(Gap(index, backend.name, problem))
            continue
        assert isinstance(upstream, _Upstream)
        usable.append((upstream, ref))
    lowest = min((ref["priority"] for _, ref in usable), default=0)
    for _, ref in usable:
        if ref["priority"] != lowest:
            gaps.append(
                Gap(
                    index,
                    ref["name"],
                    f"priority {ref['priority']}: Envoy fails over between endpoints of one "
                    "cluster, not between backends with their own credentials; only priority "
                    f"{lowest} is rendered",
                )
            )
    return [(u, ref["weight"], ref["name"]) for u, ref in usable if ref["priority"] == lowest]


MAX_ESTIMATE = 4 * 1024 * 1024
"""Above this estimate of the routes' bytes nothing is built: the configuration could not be
written anyway (a Secret holds 1 MiB), and building it took 10 s and 540 MB for a 1.4 MB Route
(64 rules of 16 matches and 32 backends), at every reconcile, since it is never in place."""
_ROUTE_BYTES = 400
"""About what one rendered route takes beyond its strings (YAML of match, fraction, action)."""


def _estimated_size(route: api.Route) -> int:
    """The routes' bytes, roughly, from the spec alone: a route per match and backend."""
    total = 0
    for rule in route["spec"]["rules"]:
        refs = rule["backendRefs"]
        names = sum(len(ref["name"]) for ref in refs)
        for match in rule.get("matches") or [{}]:
            strings = len(match.get("modelName", "")) + len(match.get("pathPrefix", ""))
            total += len(refs) * (_ROUTE_BYTES + strings) + 2 * names
    return total


def _address_problem(route: api.Route) -> str | None:
    spec = (route["spec"].get("output") or {}).get("envoy") or {}
    if "address" in spec and not _is_ip(str(spec["address"])):
        return (
            f"spec.output.envoy.address is not an IP address: the listener binds {LOOPBACK} instead"
        )
    return None


def _matches(rule: api.Rule) -> list[dict[str, Any]]:
    """Envoy route matches of a rule (one per match; a rule without matches takes every
    request)."""
    found: list[dict[str, Any]] = []
    for match in rule.get("matches") or [{}]:
        envoy: dict[str, Any] = {"prefix": match.get("pathPrefix", "/")}
        if "modelName" in match:
            envoy["dynamic_metadata"] = [
                {
                    "filter": METADATA_NAMESPACE,
                    "path": [{"key": MODEL_KEY}],
                    "value": {"string_match": {"exact": match["modelName"]}},
                }
            ]
        found.append(envoy)
    return found


def _model_problem(backend: ResolvedBackend, match: Mapping[str, Any]) -> str | None:
    if backend.spec["schema"] != VERTEX or "dynamic_metadata" not in match:
        return None
    model = match["dynamic_metadata"][0]["value"]["string_match"]["exact"]
    if "/" in model.strip("/"):
        return None
    return (
        "modelName without a publisher: Envoy sends the request body as it is, and Vertex AI's "
        "OpenAI-compatible endpoint takes a model named <publisher>/<model> (google/...); the "
        "backend is left out of this match"
    )


def _routes(
    index: int,
    match: dict[str, Any],
    picks: Sequence[tuple[_Upstream, int, str]],
    gaps: list[Gap],
) -> list[dict[str, Any]]:
    """One Envoy route per pick, weights as cumulative runtime fractions (see the module's
    docstring); a 503 when nothing is left to route to."""
    if not picks:
        return [
            {
                "name": f"rule-{index}",
                "match": copy.deepcopy(match),
                "direct_response": {
                    "status": 503,
                    "body": {"inline_string": "no backend of this rule resolved\n"},
                },
            }
        ]
    total = sum(weight for _, weight, _ in picks)
    routes: list[dict[str, Any]] = []
    cumulative = 0
    previous = 0
    for position, (upstream, weight, name) in enumerate(picks):
        cumulative += weight
        numerator = cumulative * 1_000_000 // total
        if numerator == previous and position < len(picks) - 1:
            gaps.append(
                Gap(
                    index,
                    name,
                    f"weight {weight}: below a millionth of the match's weights, the finest "
                    "share Envoy draws; it gets no traffic",
                )
            )
        previous = numerator
        envoy_match = copy.deepcopy(match)  # no YAML anchors: each route its own
        if position < len(picks) - 1:
            envoy_match["runtime_fraction"] = {
                "default_value": {
                    "numerator": numerator,
                    "denominator": "MILLION",
                },
                "runtime_key": f"rotator.weights.rule{index}.{position}",
            }
        action: dict[str, Any] = {
            "cluster": name,
            "host_rewrite_literal": upstream.host,
            "timeout": TIMEOUT,
        }
        if upstream.root != OPENAI_ROOT:
            action["regex_rewrite"] = {
                "pattern": {"regex": "^" + re.escape(OPENAI_ROOT)},
                "substitution": upstream.root,
            }
        routes.append({"name": f"rule-{index}/{name}", "match": envoy_match, "route": action})
    return routes


def _upstream(backend: ResolvedBackend) -> _Upstream | str:
    """How Envoy reaches ``backend``, or why it cannot."""
    schema = backend.spec["schema"]
    c = backend.credentials
    root, problem = _root(schema, c)
    if problem is not None:
        return problem
    filters: list[dict[str, Any]] = []
    files: dict[str, str] = {}
    if c is not None:
        problem = _credential(backend.name, schema, c, filters, files)
        if problem is not None:
            return problem
    elif schema in ("AWSBedrock", "AzureOpenAI"):
        return f"no credential: schema {schema} takes none of its requests without one"
    endpoint = backend.spec["endpoint"]
    tls = endpoint.get("tls") or {}
    secure = bool(tls.get("enabled", True))
    host, port = endpoint["host"], int(endpoint["port"])
    if secure and "sni" in tls and _HOSTNAME.fullmatch(str(tls["sni"])) is None:
        # Envoy refuses the cluster (over 255 bytes, a NUL), and with it the listener on start
        return "tls.sni is not a host name (letters, digits, '-' and '.', at most 253)"
    shown = f"[{host}]" if ":" in host else host
    default_port = 443 if secure else 80
    return _Upstream(
        _cluster(backend, filters),
        files,
        root,
        shown if port == default_port else f"{shown}:{port}",
    )


def _root(schema: str, c: ResolvedCredentials | None) -> tuple[str, str | None]:
    """The API root ``/v1/`` becomes for a ``schema`` backend, or why there is none."""
    if schema != VERTEX:
        root = API_ROOTS.get(schema)
        if root is None:
            return "", f"schema {schema}: no OpenAI-compatible endpoint Envoy can route to"
        return root, None
    if c is None or c.gcp is None:
        return "", "no GCPCredentials policy: a Vertex AI request's project and region come from it"
    vertex = _vertex_root(c.gcp)
    if vertex is None:
        return "", (
            "gcpCredentials.projectName or region cannot be put in a Vertex AI path (a project "
            "ID or number, and a location of lowercase letters, digits and hyphens)"
        )
    return vertex, None


def _vertex_root(gcp: GCPLocation) -> str | None:
    if GCP_PROJECT.fullmatch(gcp.project) is None or GCP_REGION.fullmatch(gcp.region) is None:
        return None
    return VERTEX_ROOT.format(project=gcp.project, region=gcp.region)


_BEARER_TYPES = {
    "AzureCredentials": ("azureAccessToken", ("AzureOpenAI", "OpenAI")),
    "GCPCredentials": ("gcpAccessToken", ("GCPVertexAI", "OpenAI")),
}
"""Access tokens, sent as ``Authorization: Bearer``: credential type → (derived data key, the
schemas that take it)."""


def _header(schema: str, c: ResolvedCredentials) -> tuple[str, str] | str:
    """The header name and value (scheme included) ``c`` is sent as to a ``schema`` backend, or
    why it cannot be."""
    if c.type == "APIKey":
        if schema in (VERTEX, "AWSBedrock"):
            return f"credential type APIKey: schema {schema} takes no API key through Envoy"
        header = c.header or IMPLICIT_HEADER
        key, bearer, name = "apiKey", header.format == BEARER, header.name
    elif c.type in _BEARER_TYPES:
        key, schemas = _BEARER_TYPES[c.type]
        if schema not in schemas:
            return f"credential type {c.type}: schema {schema} does not take its access token"
        bearer, name = True, "Authorization"
    else:
        return f"credential type {c.type}: not rendered for Envoy"
    value = c.data.get(key, "")
    if _HEADER_VALUE.fullmatch(value) is None:
        return (
            f"credential type {c.type}: data.{key} is empty or not a valid HTTP header value "
            "(visible ASCII, no line break)"
        )
    return name, f"Bearer {value}" if bearer else value


def _credential(
    name: str,
    schema: str,
    c: ResolvedCredentials,
    filters: list[dict[str, Any]],
    files: dict[str, str],
) -> str | None:
    """Adds the upstream filter and the credential file that present ``c``; or says why Envoy
    cannot. Messages name types, headers and keys, never values."""
    if c.type == "AWSCredentials":
        if schema != "AWSBedrock":
            return f"credential type AWSCredentials: schema {schema} takes no SigV4 signature"
        return _aws(name, c, filters, files)
    header = _header(schema, c)
    if isinstance(header, str):
        return header
    header_name, value = header
    sds = _file_name("sds-", name, ".yaml")
    files[sds] = dump(
        {
            "resources": [
                {
                    "@type": _TYPE + "extensions.transport_sockets.tls.v3.Secret",
                    "name": name,
                    "generic_secret": {"secret": {"inline_string": value}},
                }
            ]
        }
    )
    filters.append(
        {
            "name": "envoy.filters.http.credential_injector",
            "typed_config": {
                "@type": _TYPE
                + "extensions.filters.http.credential_injector.v3.CredentialInjector",
                "overwrite": True,
                "credential": {
                    "name": "envoy.http.injected_credentials.generic",
                    "typed_config": {
                        "@type": _TYPE + "extensions.http.injected_credentials.generic.v3.Generic",
                        "credential": {"name": name, "sds_config": _watched(_published(sds))},
                        "header": header_name,
                    },
                },
            },
        }
    )
    return None


def _aws(
    name: str, c: ResolvedCredentials, filters: list[dict[str, Any]], files: dict[str, str]
) -> str | None:
    """SigV4 by ``aws_request_signing`` from a credentials file of the derived keys (configparser,
    as botocore and Envoy read that file); the region, which is no secret and never rotates, goes
    into the routing part."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(c.data.get("credentials", ""))
    except configparser.Error:
        return "credential type AWSCredentials: data.credentials is not an AWS credentials file"
    section = parser["default"] if parser.has_section("default") else None
    keys = ("aws_access_key_id", "aws_secret_access_key", "region")
    if section is None or any(not (section.get(k) or "").strip() for k in keys):
        return (
            "credential type AWSCredentials: data.credentials lacks a [default] profile with "
            "aws_access_key_id, aws_secret_access_key and region"
        )
    values = {k: (section.get(k) or "").strip() for k in (*keys, "aws_session_token")}
    if any(v and _HEADER_VALUE.fullmatch(v) is None for v in values.values()):
        return "credential type AWSCredentials: data.credentials holds a value that is not one line"
    if _AWS_REGION.fullmatch(values["region"]) is None:
        return "credential type AWSCredentials: the region in data.credentials is not a region"
    lines = ["[default]"] + [
        f"{k} = {values[k]}"
        for k in ("aws_access_key_id", "aws_secret_access_key", "aws_session_token")
        if values[k]
    ]
    file = _file_name("aws-", name, ".credentials")
    files[file] = "\n".join(lines) + "\n"
    filters.append(
        {
            "name": "envoy.filters.http.aws_request_signing",
            "typed_config": {
                "@type": _TYPE + "extensions.filters.http.aws_request_signing.v3.AwsRequestSigning",
                "service_name": "bedrock",
                "region": values["region"],
                "credential_provider": {
                    # only this file: never Envoy's own environment, profile or instance role
                    "custom_credential_provider_chain": True,
                    "credentials_file_provider": {
                        "profile": "default",
                        "credentials_data_source": {
                            "filename": _published(file),
                            "watched_directory": WATCHED,
                        },
                    },
                },
            },
        }
    )
    return None


def _file_name(prefix: str, name: str, suffix: str) -> str:
    """A Secret key for a backend's file: readable when the name is an object name (it always is
    from the API server), a hash otherwise, so no name makes a path (``..``, ``/``) or an
    invalid key."""
    if _FILE_NAME.fullmatch(name) and len(prefix) + len(name) + len(suffix) <= _MAX_KEY:
        return f"{prefix}{name}{suffix}"
    # "_" is in no object name: a hashed file never takes the name of another backend's
    return f"{prefix}_{hashlib.sha256(name.encode()).hexdigest()[:32]}{suffix}"


def credential_files(backend: str) -> tuple[str, str]:
    """The keys a backend's credential can be written under (its SDS file, its AWS credentials
    file): what a rotation of its policy changes, for a consumer that reports rotations."""
    return _file_name("sds-", backend, ".yaml"), _file_name("aws-", backend, ".credentials")


def _published(key: str) -> str:
    """The path of ``key`` in the version the last swap published (:data:`VERSION_LINK`)."""
    return f"{VERSION_LINK}/{key}"


def _watched(path: str) -> dict[str, Any]:
    return {"path_config_source": {"path": path, "watched_directory": WATCHED}}


def _cluster(backend: ResolvedBackend, filters: list[dict[str, Any]]) -> dict[str, Any]:
    """The backend's cluster: its endpoint, upstream TLS (verified: the CA file, and the server's
    name or address among the certificate's), and the credential filter before the codec."""
    name, endpoint = backend.name, backend.spec["endpoint"]
    tls = endpoint.get("tls") or {}
    secure = bool(tls.get("enabled", True))
    host, port, sni = endpoint["host"], int(endpoint["port"]), tls.get("sni")
    try:
        ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    codec = {
        "name": "envoy.filters.http.upstream_codec",
        "typed_config": {
            "@type": _TYPE + "extensions.filters.http.upstream_codec.v3.UpstreamCodec"
        },
    }
    protocol: dict[str, Any] = (
        {"auto_config": {"http_protocol_options": {}, "http2_protocol_options": {}}}
        if secure
        else {"explicit_http_config": {"http_protocol_options": {}}}
    )
    cluster: dict[str, Any] = {
        "@type": _TYPE + "config.cluster.v3.Cluster",
        "name": name,
        "type": "STATIC" if ip else "LOGICAL_DNS",
        "connect_timeout": "10s",
        "dns_lookup_family": "V4_PREFERRED",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [
                {
                    "lb_endpoints": [
                        {
                            "endpoint": {
                                "address": {"socket_address": {"address": host, "port_value": port}}
                            }
                        }
                    ]
                }
            ],
        },
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": _TYPE + "extensions.upstreams.http.v3.HttpProtocolOptions",
                **protocol,
                "http_filters": [*filters, codec],
            }
        },
    }
    if secure:
        server = sni or (None if ip else host)
        san = (
            {"san_type": "DNS", "matcher": {"exact": server}}
            if server
            else {"san_type": "IP_ADDRESS", "matcher": {"exact": host}}
        )
        context: dict[str, Any] = {
            "@type": _TYPE + "extensions.transport_sockets.tls.v3.UpstreamTlsContext",
            "common_tls_context": {
                "validation_context": {
                    "trusted_ca": {"filename": CA_FILE},
                    "match_typed_subject_alt_names": [san],
                }
            },
        }
        if server:
            context["sni"] = server
        cluster["transport_socket"] = {
            "name": "envoy.transport_sockets.tls",
            "typed_config": context,
        }
    return cluster


def bootstrap(route: api.Route) -> dict[str, Any]:
    md = route["metadata"]
    return {
        "node": {"id": f"{md.get('namespace', '')}/{md.get('name', '')}", "cluster": "rotator"},
        "dynamic_resources": {
            "lds_config": {"resource_api_version": "V3", **_watched(LISTENERS)},
            "cds_config": {"resource_api_version": "V3", **_watched(CLUSTERS)},
        },
    }


def listeners(route: api.Route, routes: list[dict[str, Any]]) -> dict[str, Any]:
    where = listener(route)
    manager = {
        "@type": _TYPE
        + "extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": "rotator",
        # the path as the backend will read it, before matching and the /v1/ rewrite: dot
        # segments and doubled slashes resolved, escaped slashes refused, so no path leaves the
        # API root a route rewrites to (Vertex AI's project and region)
        "normalize_path": True,
        "merge_slashes": True,
        "path_with_escaped_slashes_action": "REJECT_REQUEST",
        "http_filters": [
            {
                "name": "envoy.filters.http.json_to_metadata",
                "typed_config": {
                    "@type": _TYPE + "extensions.filters.http.json_to_metadata.v3.JsonToMetadata",
                    "request_rules": {
                        "rules": [
                            {
                                "selectors": [{"key": MODEL_KEY}],
                                "on_present": {
                                    "metadata_namespace": METADATA_NAMESPACE,
                                    "key": MODEL_KEY,
                                    "type": "STRING",
                                },
                            }
                        ],
                        "allow_content_types": list(JSON_CONTENT_TYPES),
                        "allow_empty_content_type": True,
                    },
                },
            },
            {
                "name": "envoy.filters.http.router",
                "typed_config": {"@type": _TYPE + "extensions.filters.http.router.v3.Router"},
            },
        ],
        "route_config": {
            "name": "rotator",
            # Envoy applies lds.yaml before cds.yaml on a swap: a route to a cluster that arrives
            # a moment later must not refuse the whole listener (it kept the old routes, seen)
            "validate_clusters": False,
            "virtual_hosts": [
                {
                    "name": "rotator",
                    "domains": ["*"],
                    "request_headers_to_remove": list(CLIENT_CREDENTIAL_HEADERS),
                    "routes": routes,
                }
            ],
        },
    }
    return {
        "resources": [
            {
                "@type": _TYPE + "config.listener.v3.Listener",
                "name": "rotator",
                "address": {"socket_address": {"address": where.address, "port_value": where.port}},
                "per_connection_buffer_limit_bytes": BODY_LIMIT,
                "filter_chains": [
                    {
                        "filters": [
                            {
                                "name": "envoy.filters.network.http_connection_manager",
                                "typed_config": manager,
                            }
                        ]
                    }
                ],
            }
        ]
    }


def render(route: api.Route, backends: Backends) -> Rendered:
    built = build(route, backends)
    files = {
        LISTENERS: dump(listeners(route, built.routes)),
        CLUSTERS: dump({"resources": [built.clusters[k] for k in sorted(built.clusters)]}),
        **{k: built.files[k] for k in sorted(built.files)},
    }
    return Rendered(dump(bootstrap(route)), built.gaps, files)


def inputs_hash(route: api.Route, backends: Backends) -> str:
    """As :func:`.litellm.inputs_hash`, with the listener (``spec.output``) too."""
    inner = own.inputs_hash(route, backends)
    gcp = gcp_locations(backends)
    output = route["spec"].get("output") or {}
    return hashlib.sha256(
        orjson.dumps([FORMAT, RENDER_REVISION, inner, gcp, output], option=orjson.OPT_SORT_KEYS)
    ).hexdigest()


class Envoy:
    """:class:`.base.Format` of an Envoy proxy's files: its gaps are ``Translated``."""

    name = FORMAT
    reports_gaps = True

    def inputs_hash(self, route: api.Route, backends: Backends) -> str:
        return inputs_hash(route, backends)

    def gaps(self, route: api.Route, backends: Backends) -> Sequence[Gap]:
        return build(route, backends).gaps

    def render(self, route: api.Route, backends: Backends) -> Rendered:
        return render(route, backends)


ENVOY = Envoy()
