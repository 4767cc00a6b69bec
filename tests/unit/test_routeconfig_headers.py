"""API keys in provider-native headers (``spec.apiKey.header``): the route configuration states the
header and the value's format for ``api-key`` (Azure OpenAI) and ``x-api-key`` (Anthropic), and
leaves the default, ``Authorization: Bearer``, implicit — byte for byte the configuration rotator
wrote before the field existed, so no existing Route's config hash changes."""

from __future__ import annotations

from typing import Any, cast, get_args

import pytest
import yaml

from controllers.reconcilers import api, routeconfig
from tests.unit.test_api_schema import schema_of

GOLDEN = """apiVersion: rotator.dev/v1alpha1
kind: RouteConfig
route:
  namespace: team-a
  name: chat
rules:
- matches:
  - modelName: gpt-4o
  backends:
  - name: openai
    schema: OpenAI
    endpoint:
      host: api.openai.com
      port: 443
      tls:
        enabled: true
    weight: 1
    priority: 0
    credentials:
      type: APIKey
      policy: openai-key
      data:
        apiKey: sk-golden-1
  - name: bedrock
    schema: AWSBedrock
    endpoint:
      host: bedrock
      port: 443
      tls:
        enabled: true
        sni: b.example
    weight: 2
    priority: 0
    credentials:
      type: AWSCredentials
      policy: aws
      expiresAt: '2026-01-01T12:00:00Z'
      data:
        credentials: '[default]

          aws_access_key_id = AKIA

          '
  - name: vertex
    schema: GCPVertexAI
    endpoint:
      host: v
      port: 443
      tls:
        enabled: true
    weight: 1
    priority: 1
    credentials:
      type: GCPCredentials
      policy: gcp
      expiresAt: '2026-01-01T12:00:00Z'
      data:
        gcpAccessToken: ya29.golden
  - name: azure
    schema: AzureOpenAI
    endpoint:
      host: a
      port: 8443
      tls:
        enabled: false
    weight: 1
    priority: 1
    credentials:
      type: AzureCredentials
      policy: az
      expiresAt: '2026-01-01T13:00:00Z'
      data:
        azureAccessToken: eyJ.golden
  - name: plain
    schema: OpenAI
    endpoint:
      host: api.openai.com
      port: 443
      tls:
        enabled: true
    weight: 1
    priority: 2
"""
"""``render`` of :func:`route` and :func:`backends` by rotator before ``header`` existed (commit
cb58908), every credential type and a backend without credentials."""
GOLDEN_HASH = "942c6f3d71f572555489c51c692e7cbfb0f059557cb99c9089cb15ce515d1b1c"

SPECS: dict[str, dict[str, Any]] = {
    "openai-key": {"type": "APIKey", "apiKey": {"secretRef": {"name": "s", "key": "apiKey"}}},
    "aws": {"type": "AWSCredentials", "awsCredentials": {"region": "us-east-1"}},
    "gcp": {"type": "GCPCredentials", "gcpCredentials": {"projectName": "p", "region": "r"}},
    "az": {"type": "AzureCredentials", "azureCredentials": {"clientID": "c", "tenantID": "t"}},
}
"""Policy specs as the Route reconciler reads them (the credential blocks trimmed)."""


def route() -> api.Route:
    refs = [
        ("openai", 1, 0),
        ("bedrock", 2, 0),
        ("vertex", 1, 1),
        ("azure", 1, 1),
        ("plain", 1, 2),
    ]
    return cast(
        api.Route,
        {
            "metadata": {"name": "chat", "namespace": "team-a"},
            "spec": {
                "rules": [
                    {
                        "matches": [{"modelName": "gpt-4o"}],
                        "backendRefs": [
                            {"name": n, "weight": w, "priority": p} for n, w, p in refs
                        ],
                    }
                ]
            },
        },
    )


def credentials(
    policy: str, data: dict[str, str], expires: str | None, specs: dict[str, dict[str, Any]]
) -> routeconfig.ResolvedCredentials:
    """What the Route reconciler resolves for ``policy``: the header from its spec."""
    spec = specs[policy]
    return routeconfig.ResolvedCredentials(
        policy, spec["type"], data, expires, header=routeconfig.api_key_header(spec)
    )


def backends(specs: dict[str, dict[str, Any]] = SPECS) -> dict[str, routeconfig.ResolvedBackend]:
    openai: Any = {"schema": "OpenAI", "endpoint": {"host": "api.openai.com", "port": 443}}
    bedrock: Any = {
        "schema": "AWSBedrock",
        "endpoint": {"host": "bedrock", "port": 443, "tls": {"enabled": True, "sni": "b.example"}},
    }
    vertex: Any = {"schema": "GCPVertexAI", "endpoint": {"host": "v", "port": 443}}
    azure: Any = {
        "schema": "AzureOpenAI",
        "endpoint": {"host": "a", "port": 8443, "tls": {"enabled": False}},
    }
    at, later = "2026-01-01T12:00:00Z", "2026-01-01T13:00:00Z"
    aws_file = "[default]\naws_access_key_id = AKIA\n"
    b = routeconfig.ResolvedBackend
    return {
        "openai": b(
            "openai", openai, credentials("openai-key", {"apiKey": "sk-golden-1"}, None, specs)
        ),
        "bedrock": b("bedrock", bedrock, credentials("aws", {"credentials": aws_file}, at, specs)),
        "vertex": b(
            "vertex", vertex, credentials("gcp", {"gcpAccessToken": "ya29.golden"}, at, specs)
        ),
        "azure": b(
            "azure", azure, credentials("az", {"azureAccessToken": "eyJ.golden"}, later, specs)
        ),
        "plain": b("plain", openai, None),
    }


def with_header(header: str) -> dict[str, dict[str, Any]]:
    spec = SPECS["openai-key"]
    return {**SPECS, "openai-key": {**spec, "apiKey": {**spec["apiKey"], "header": header}}}


@pytest.mark.parametrize(
    "specs",
    [
        pytest.param(SPECS, id="header-absent"),
        pytest.param(with_header("Authorization"), id="header-Authorization-as-defaulted"),
    ],
)
def test_the_default_header_renders_the_configuration_of_before_byte_for_byte(
    specs: dict[str, dict[str, Any]],
) -> None:
    text = routeconfig.render(route(), backends(specs))
    assert text == GOLDEN
    assert routeconfig.config_hash(text) == GOLDEN_HASH


@pytest.mark.parametrize("header", ["api-key", "x-api-key"])
def test_a_provider_native_header_is_stated_with_a_raw_value(header: str) -> None:
    text = routeconfig.render(route(), backends(with_header(header)))
    creds = yaml.safe_load(text)["rules"][0]["backends"][0]["credentials"]
    assert creds == {
        "type": "APIKey",
        "policy": "openai-key",
        "header": {"name": header, "format": "Raw"},
        "data": {"apiKey": "sk-golden-1"},
    }
    assert list(creds) == ["type", "policy", "header", "data"], "the credential stays last"
    # Only that backend's entry changed: the other types render as before.
    expected = GOLDEN.replace(
        "      policy: openai-key\n",
        f"      policy: openai-key\n      header:\n        name: {header}\n        format: Raw\n",
    )
    assert text == expected


def test_the_header_block_comes_from_the_policy_spec() -> None:
    header = routeconfig.api_key_header(with_header("x-api-key")["openai-key"])
    assert header == routeconfig.CredentialHeader("x-api-key", routeconfig.RAW)
    assert routeconfig.api_key_header(with_header("api-key")["openai-key"]) == (
        routeconfig.CredentialHeader("api-key", routeconfig.RAW)
    )
    implicit = routeconfig.IMPLICIT_HEADER
    assert (implicit.name, implicit.format) == ("Authorization", routeconfig.BEARER)
    for spec in (SPECS["openai-key"], with_header("Authorization")["openai-key"]):
        assert routeconfig.api_key_header(spec) is None, "the default stays implicit"
    assert routeconfig.api_key_header({"type": "APIKey"}) is None, "no apiKey block: default"


@pytest.mark.parametrize("policy", ["aws", "gcp", "az"])
def test_other_credential_types_state_no_header(policy: str) -> None:
    """Their ``type`` says how they are used (docs/api.md); a stray ``header`` cannot leak in."""
    spec = {**SPECS[policy], "apiKey": {"header": "x-api-key"}}
    assert routeconfig.api_key_header(spec) is None


def test_every_enum_value_of_the_crd_is_handled() -> None:
    """The CRD's enum and :data:`api.APIKeyHeader` name the same headers, and each renders as
    documented: ``Authorization`` implicit (Bearer), the others stated with a raw value."""
    header = schema_of("backendsecuritypolicies")["properties"]["spec"]["properties"]["apiKey"][
        "properties"
    ]["header"]
    assert header["enum"] == list(get_args(api.APIKeyHeader))
    assert header["default"] == api.DEFAULT_API_KEY_HEADER
    rendered = {h: routeconfig.api_key_header(with_header(h)["openai-key"]) for h in header["enum"]}
    assert rendered == {
        "Authorization": None,
        "api-key": routeconfig.CredentialHeader("api-key", "Raw"),
        "x-api-key": routeconfig.CredentialHeader("x-api-key", "Raw"),
    }
