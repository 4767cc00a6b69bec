"""The route configuration in LiteLLM proxy's own ``config.yaml`` form (``spec.output.format:
LiteLLM``): a ``model_list`` its proxy loads as it is, rendered deterministically from the same
inputs as rotator's own (:mod:`.own`).

How LiteLLM 1.106 reads it (litellm/proxy/proxy_server.py, ``ProxyConfig.load_config``, and
litellm/router.py; read, not guessed):

- Once, at start. Nothing watches the file, and ``os.environ/NAME`` references in
  ``litellm_params`` are resolved to their values as the file is loaded (``get_secret``), so
  neither a changed file nor a changed environment reaches a running proxy (an admin API that
  changes models exists only with a database, ``store_model_in_db``). A new credential therefore
  needs new proxy processes: the Route names the proxy's Deployment in ``rolloutRestartTargets``
  and rotator rolls it out (rolling, so some replica always serves). Credentials are inlined:
  an environment reference would still be read once, and adds a second Secret to keep in step.
- ``model_name`` is what clients ask for; ``litellm_params.model`` is ``<provider>/<model>``.
  ``model_name: "*"`` with ``model: <provider>/*`` takes every model name (its wildcard routes).
- Among the deployments of one ``model_name``, the lowest ``order`` is used and higher orders are
  fallbacks on failure (``get_order_filtered_deployments``, order-based fallbacks); within one
  order, ``simple-shuffle`` (the default strategy) picks by ``weight``.

- A ``litellm_params`` string that starts with ``os.environ/`` is replaced by that environment
  variable of the proxy (``Router._create_deployment``'s loop; ``get_secret``, which also takes
  ``oidc/``); Azure exchanges an ``azure_ad_token`` of ``oidc/…`` itself; and LiteLLM's pointer
  fields take ``hashicorp_vault/``, ``aws_secret_manager/`` and ``google_secret_manager/``
  (``_POINTER_REF_PREFIXES``). A tenant's value of that form would make the proxy send its own
  secret (its master key, say) to the tenant's host: :data:`SECRET_REFERENCES`.
- An empty or absent ``api_key`` is not "no credential": the providers fall back to the proxy's
  own (``api_key or … or get_secret("OPENAI_API_KEY")`` in ``litellm.main``; Anthropic's
  ``ANTHROPIC_API_KEY``/``ANTHROPIC_AUTH_TOKEN``; Azure's ``AZURE_OPENAI_API_KEY``,
  ``AZURE_API_KEY``, ``AZURE_AD_TOKEN`` and Entra ID settings; Bedrock boto's default chain).
  Any non-empty ``api_key`` stops the OpenAI and Anthropic fallbacks: a backend without a policy
  gets :data:`NO_CREDENTIAL`. No value stops all of Azure's, nor boto's: such a backend is a gap.
- LiteLLM matches ``model_name`` exactly first and falls back to its wildcard patterns (a name
  holding ``*``) only when no exact name matches.

So a rule's ``modelName`` matches become model groups (a rule without matches, ``"*"``), a
backend's ``priority`` its ``order`` (plus one: LiteLLM's orders start at 1), its ``weight`` its
``weight``. A backend of weight 0 gets no traffic, and LiteLLM, where every weight of an order is
0, would pick at random: it is left out, which is what weight 0 means. The first rule to name a
model wins, as in rotator's own format; a later rule's same name is unreachable and left out, and
so is every rule after one without matches (it takes every model in rotator's format, while in
LiteLLM an exact name would win over its ``"*"``). Those are not gaps: the configuration routes
every request as rotator's own format would. A ``modelName`` holding ``*`` is an exact name in
rotator and a pattern in LiteLLM: a gap.

What LiteLLM cannot express is returned as gaps (:class:`.base.Gap`) and never silently dropped:
the Route reports them (``Translated=False``, ``NotExpressible``). LiteLLM routes by model name
only, so a ``pathPrefix`` match cannot be rendered; nor can a credential its provider would
send in another header than the one the policy asks for, nor a ``GCPAnthropic`` backend, nor a
value LiteLLM would read as a secret reference.

Vertex AI (``GCPVertexAI``) goes through LiteLLM's ``openai`` provider, to Vertex AI's
OpenAI-compatible endpoint (``/v1/projects/{project}/locations/{region}/endpoints/openapi``, the
model named ``google/<model>``), with the minted access token as ``api_key`` (sent as
``Authorization: Bearer``). Not through its ``vertex_ai`` provider: that one takes no access
token. Its every request gets one from ``vertex_credentials`` through google-auth
(``VertexBase.get_access_token`` → ``load_auth``), which refreshes whatever it loads before the
first use (``refresh_auth``): a service-account key or an ``external_account`` configuration
would hand the gateway the long-lived identity rotator exists to keep from it, and an
``authorized_user`` file carrying the token (``from_authorized_user_info`` reads ``token`` and
``expiry``) is refreshed at Google's token endpoint, which its ``token_uri`` cannot change.
``GCPAnthropic`` (Claude's ``rawPredict`` on Vertex AI) has no OpenAI-compatible endpoint and
only that provider: a gap.
"""

from __future__ import annotations

import configparser
import hashlib
from collections.abc import Sequence
from typing import Any

import orjson

from controllers.reconcilers import api
from controllers.reconcilers.route.formats import own
from controllers.reconcilers.route.formats.base import (
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

FORMAT = "LiteLLM"
"""``spec.output.format`` of a Route rendered by this module."""

RENDER_REVISION = 3
"""As :data:`.own.RENDER_REVISION`, for this format."""

WILDCARD = "*"

SECRET_REFERENCES = (
    "os.environ/",
    "oidc/",
    "hashicorp_vault/",
    "aws_secret_manager/",
    "google_secret_manager/",
)
"""Prefixes that make LiteLLM 1.106 read a ``litellm_params`` value as a reference to a secret of
its own (see the module's docstring). A value rotator would write that starts with one (leading
blanks ignored, to be safe) is refused: its backend is left out and named, never the value."""

NO_CREDENTIAL = "rotator-no-credential"
"""``api_key`` of an OpenAI or Anthropic backend without a policy: any non-empty key stops those
providers from sending the proxy's own (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``); this one
says what it is to whoever logs it."""

_PROVIDERS = {
    "OpenAI": "openai",
    "AzureOpenAI": "azure",
    "AWSBedrock": "bedrock",
    "Anthropic": "anthropic",
    "GCPVertexAI": "openai",
}
"""ServiceBackend ``schema`` → LiteLLM provider prefix. ``GCPVertexAI``'s parameters are
:func:`_vertex`'s; ``GCPAnthropic`` is absent (see the module's docstring)."""

VERTEX = "GCPVertexAI"
VERTEX_PUBLISHER = "google"
"""Vertex AI's OpenAI-compatible endpoint names a model ``<publisher>/<model>``; a Route's
``modelName`` for a ``GCPVertexAI`` backend is the model's own name (``gemini-2.0-flash``), as
the publisher's path in Vertex AI's own API (``publishers/google/models/{model}``)."""


def build(route: api.Route, backends: Backends) -> tuple[dict[str, Any], list[Gap]]:
    """The configuration as data, and what it leaves out. Cheap (no YAML): the reconciler calls
    it for the gaps alone when the configuration in place is up to date (:meth:`LiteLLM.gaps`),
    and :meth:`LiteLLM.render` dumps the data it returns, once."""
    md = route["metadata"]
    prefix = f"{md.get('namespace', '')}/{md.get('name', '')}"
    model_list: list[dict[str, Any]] = []
    gaps: list[Gap] = []
    taken: set[str] = set()
    for index, rule in enumerate(route["spec"]["rules"]):
        if WILDCARD in taken:
            break  # an earlier rule without matches takes every model: the rest is unreachable
        names = _model_names(index, rule, gaps)
        for model in dict.fromkeys(names):
            if model in taken:
                continue  # an earlier rule takes this model name: unreachable here
            taken.add(model)
            for position, ref in enumerate(rule["backendRefs"]):
                backend = backends.get(ref["name"])
                if backend is None or ref["weight"] == 0:
                    continue  # unresolved (ResolvedRefs says so), or no share of traffic
                params, problem = _params(backend, model)
                if problem is not None:
                    gaps.append(Gap(index, backend.name, problem))
                    continue
                params["weight"] = ref["weight"]
                params["order"] = ref["priority"] + 1
                model_list.append(
                    {
                        "model_name": model,
                        "litellm_params": params,
                        # the backendRef's position: a backend listed twice in a rule (another
                        # priority, say) is two deployments, and LiteLLM indexes them by id
                        "model_info": {"id": f"{prefix}/{index}/{model}/{position}/{backend.name}"},
                    }
                )
    config = {"model_list": model_list, "router_settings": {"routing_strategy": "simple-shuffle"}}
    return config, _unique(gaps)


def _model_names(index: int, rule: api.Rule, gaps: list[Gap]) -> list[str]:
    """The LiteLLM ``model_name`` values of a rule (``"*"`` for a rule without matches), each match
    that has none added to ``gaps``."""
    names: list[str] = []
    for match in rule.get("matches") or []:
        if "pathPrefix" in match:
            gaps.append(
                Gap(
                    index,
                    None,
                    f"pathPrefix {match['pathPrefix']}: LiteLLM routes by model "
                    "name only; the match is left out",
                )
            )
        elif "modelName" in match:
            name = match["modelName"]
            problem = _name_problem(name)
            if problem is None:
                names.append(name)
            else:
                gaps.append(Gap(index, None, f"{problem}; the match is left out"))
    if not rule.get("matches"):
        names.append(WILDCARD)
    return names


def render(route: api.Route, backends: Backends) -> str:
    config, _ = build(route, backends)
    return dump(config)


def inputs_hash(route: api.Route, backends: Backends) -> str:
    """As :func:`.own.inputs_hash`, with this format's name and revision in front, so the two
    formats of the same inputs never hash alike."""
    inner = own.inputs_hash(route, backends)
    # what this format reads beyond rotator's own: the GCP policies' project and region
    gcp = gcp_locations(backends)
    return hashlib.sha256(orjson.dumps([FORMAT, RENDER_REVISION, inner, gcp])).hexdigest()


def _url(backend: ResolvedBackend, path: str = "") -> str:
    endpoint = backend.spec["endpoint"]
    tls = (endpoint.get("tls") or {}).get("enabled", True)
    host = endpoint["host"]
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    return f"{'https' if tls else 'http'}://{host}:{endpoint['port']}{path}"


def _name_problem(name: str) -> str | None:
    """Why a ``modelName`` cannot be a LiteLLM ``model_name``, if it cannot. A reference-shaped
    name is not quoted: what follows the prefix may name a secret of the proxy's."""
    if _is_reference(name):
        return "modelName starting with a LiteLLM secret reference prefix"
    if WILDCARD in name:
        return f"modelName {name}: holding *, an exact name in rotator, a pattern in LiteLLM"
    return None


def _is_reference(value: str) -> bool:
    return value.lstrip().startswith(SECRET_REFERENCES)


def _params(backend: ResolvedBackend, model: str) -> tuple[dict[str, Any], str | None]:
    """``litellm_params`` of one deployment, or why there can be none."""
    params, problem = _unchecked_params(backend, model)
    if problem is not None:
        return {}, problem
    refs = [k for k, v in params.items() if isinstance(v, str) and _is_reference(v)]
    if refs:
        return {}, (
            f"{', '.join(refs)}: a value starting with a LiteLLM secret reference prefix "
            f"({', '.join(SECRET_REFERENCES)}), which the proxy would replace by its own secret"
        )
    return params, None


def _unchecked_params(backend: ResolvedBackend, model: str) -> tuple[dict[str, Any], str | None]:
    schema = backend.spec["schema"]
    provider = _PROVIDERS.get(schema)
    if provider is None:
        return {}, f"schema {schema}: not rendered for LiteLLM"
    if "sni" in (backend.spec["endpoint"].get("tls") or {}):
        return {}, "tls.sni: LiteLLM has no setting for the TLS server name"
    if schema == VERTEX:
        return _vertex(backend, provider, model)
    params: dict[str, Any] = {"model": f"{provider}/{model}"}
    if provider == "bedrock":
        params["aws_bedrock_runtime_endpoint"] = _url(backend)
    else:
        params["api_base"] = _url(backend, "/v1" if provider == "openai" else "")
    c = backend.credentials
    if c is None:
        if provider in ("openai", "anthropic"):
            params["api_key"] = NO_CREDENTIAL
            return params, None
        return params, (
            f"no credential: LiteLLM's {provider} provider would send the proxy's own "
            "credentials from its environment instead"
        )
    problem = _credentials(params, provider, c)
    return (params, None) if problem is None else ({}, problem)


_SENT_AS: dict[tuple[str, str, str | None], tuple[str, str]] = {
    ("openai", "APIKey", "Authorization"): ("api_key", "apiKey"),
    # the OpenAI client sends api_key as ``Authorization: Bearer``: an access token fits too
    ("openai", "AzureCredentials", None): ("api_key", "azureAccessToken"),
    ("openai", "GCPCredentials", None): ("api_key", "gcpAccessToken"),
    ("azure", "AzureCredentials", None): ("azure_ad_token", "azureAccessToken"),
    ("azure", "APIKey", "api-key"): ("api_key", "apiKey"),
    ("anthropic", "APIKey", "x-api-key"): ("api_key", "apiKey"),
}
"""(provider, credential type, API key header) → (``litellm_params`` key, derived data key):
every pairing whose wire form LiteLLM's provider sends as the policy asks. ``AWSCredentials``
with ``bedrock`` is :func:`_aws`."""


def _credentials(params: dict[str, Any], provider: str, c: ResolvedCredentials) -> str | None:
    """Puts ``c`` into ``params`` the way ``provider`` sends it; or says why it cannot. Messages
    name types, headers and keys, never values."""
    if (provider == "bedrock") != (c.type == "AWSCredentials"):
        return f"credential type {c.type}: LiteLLM's {provider} provider cannot send it"
    if provider == "bedrock":
        return _aws(params, c)
    header = (c.header or IMPLICIT_HEADER).name if c.type == "APIKey" else None
    sent = _SENT_AS.get((provider, c.type, header))
    if sent is None:
        with_header = f" with header {header}" if header else ""
        return (
            f"credential type {c.type}{with_header}: LiteLLM's {provider} provider cannot send it"
        )
    value = c.data.get(sent[1], "")
    if not value:
        return (
            f"credential type {c.type}: data.{sent[1]} is empty, and LiteLLM's {provider} "
            "provider would send the proxy's own credentials instead"
        )
    params[sent[0]] = value
    return None


def _aws(params: dict[str, Any], c: ResolvedCredentials) -> str | None:
    """The derived ``credentials`` file's ``[default]`` keys and region as LiteLLM's ``aws_*``
    parameters (configparser, as botocore reads that file)."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(c.data.get("credentials", ""))
    except configparser.Error:
        return "credential type AWSCredentials: data.credentials is not an AWS credentials file"
    section = parser["default"] if parser.has_section("default") else None
    keys = ("aws_access_key_id", "aws_secret_access_key", "region")
    if section is None or any(not section.get(k) for k in keys):
        return (
            "credential type AWSCredentials: data.credentials lacks a [default] profile with "
            "aws_access_key_id, aws_secret_access_key and region"
        )
    params["aws_access_key_id"] = section["aws_access_key_id"].strip()
    params["aws_secret_access_key"] = section["aws_secret_access_key"].strip()
    if token := (section.get("aws_session_token") or "").strip():
        params["aws_session_token"] = token
    params["aws_region_name"] = section["region"].strip()
    return None


def _vertex(
    backend: ResolvedBackend, provider: str, model: str
) -> tuple[dict[str, Any], str | None]:
    """A ``GCPVertexAI`` deployment: LiteLLM's ``openai`` provider at Vertex AI's
    OpenAI-compatible endpoint of the policy's project and region, the access token its
    ``api_key`` (see the module's docstring). Messages name fields, never their values: a
    project or region that is not one may be anything."""
    c = backend.credentials
    if c is None:
        return {}, (
            "no credential: a Vertex AI request's project and region come from its "
            "GCPCredentials policy"
        )
    if c.type != "GCPCredentials":
        return {}, (
            f"credential type {c.type}: Vertex AI's OpenAI-compatible endpoint takes a Google "
            "access token (GCPCredentials) only"
        )
    if c.gcp is None:  # the CRD requires the block (rule R2); said all the same
        return {}, "credential type GCPCredentials: the policy has no gcpCredentials block"
    if (problem := _location_problem(c.gcp)) is not None:
        return {}, problem
    path = f"/v1/projects/{c.gcp.project}/locations/{c.gcp.region}/endpoints/openapi"
    params = {"model": f"{provider}/{VERTEX_PUBLISHER}/{model}", "api_base": _url(backend, path)}
    problem = _credentials(params, provider, c)  # the token as an OpenAI api_key
    return (params, None) if problem is None else ({}, problem)


def _location_problem(gcp: GCPLocation) -> str | None:
    """Why a policy's project or region cannot be put in a Vertex AI path, if so (naming the
    field, never the value)."""
    if GCP_PROJECT.fullmatch(gcp.project) is None:
        return (
            "gcpCredentials.projectName is not a Google Cloud project ID (6 to 30 lowercase "
            "letters, digits and hyphens) or number: the Vertex AI path cannot name it"
        )
    if GCP_REGION.fullmatch(gcp.region) is None:
        return (
            "gcpCredentials.region is not a Vertex AI location (lowercase letters, digits and "
            "hyphens): the Vertex AI path cannot name it"
        )
    return None


def _unique(gaps: list[Gap]) -> list[Gap]:
    """One gap per rule, backend and problem (a backend named under several model names of a rule
    fails the same way for each)."""
    return list(dict.fromkeys(gaps))


class LiteLLM:
    """:class:`.base.Format` of LiteLLM's ``config.yaml``: its gaps are ``Translated``."""

    name = FORMAT
    reports_gaps = True

    def inputs_hash(self, route: api.Route, backends: Backends) -> str:
        return inputs_hash(route, backends)

    def gaps(self, route: api.Route, backends: Backends) -> Sequence[Gap]:
        return build(route, backends)[1]

    def render(self, route: api.Route, backends: Backends) -> Rendered:
        config, gaps = build(route, backends)
        return Rendered(dump(config), gaps)


LITELLM = LiteLLM()
