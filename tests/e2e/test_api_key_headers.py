"""``spec.apiKey.header`` against the real API server and controller: the API server refuses a
header outside the enum and fills in the default; the route configuration states a
provider-native header (Anthropic's ``x-api-key``, Azure OpenAI's ``api-key``) with the key, and
leaves the default ``Authorization`` implicit; changing the header rewrites the configuration
and leaves the derived Secret's data as it is."""

from __future__ import annotations

from typing import Any

import pytest

from controllers.reconcilers import api as rapi
from controllers.runtime import client as clients
from controllers.runtime import errors
from rotator_devkit.devenv import manifests
from tests.support.chain import Chain
from tests.support.polling import wait_for

ANTHROPIC_KEY = "sk-ant-e2e-header-key-0123456789"
OPENAI_KEY = "sk-e2e-bearer-key-9876543210"


def api_key_policy(header: str | None) -> dict[str, Any]:
    api_key: dict[str, Any] = {"secretRef": {"name": "s"}}
    if header is not None:
        api_key["header"] = header
    return {
        "apiVersion": rapi.API_VERSION,
        "kind": "BackendSecurityPolicy",
        "metadata": {"name": "p"},
        "spec": {"type": "APIKey", "apiKey": api_key},
    }


@pytest.mark.oldest_kubernetes
@pytest.mark.parametrize("header", ["X-Api-Key", "Bearer", "api_key", ""])
def test_a_header_outside_the_enum_is_refused_naming_the_supported_values(
    api: clients.Client, namespace: str, installed: None, header: str
) -> None:
    with pytest.raises(errors.Invalid) as raised:
        api.create(rapi.POLICIES, api_key_policy(header), namespace=namespace)
    message = str(raised.value)
    assert "spec.apiKey.header" in message
    assert f'Unsupported value: "{header}"' in message
    assert 'supported values: "Authorization", "api-key", "x-api-key"' in message


@pytest.mark.oldest_kubernetes
def test_the_api_server_defaults_the_header_to_authorization(
    api: clients.Client, namespace: str, installed: None
) -> None:
    created = api.create(rapi.POLICIES, api_key_policy(None), namespace=namespace)
    assert created["spec"]["apiKey"]["header"] == "Authorization"


def claude_credentials(chain: Chain) -> dict[str, Any] | None:
    return chain.backend_credentials("chat").get("claude")


def test_x_api_key_reaches_the_route_config_and_a_header_change_rewrites_it(
    chain: Chain,
) -> None:
    chain.secret("anthropic-key", apiKey=ANTHROPIC_KEY)
    chain.secret("openai-key", apiKey=OPENAI_KEY)
    chain.api_key_policy(
        "anthropic", secret="anthropic-key", targets=["claude"], header="x-api-key"
    )
    chain.api_key_policy("openai", secret="openai-key", targets=["openai"])
    chain.backend("claude", schema="Anthropic", host="api.anthropic.com")
    chain.backend("openai")
    chain.route("chat", ["claude", "openai"])

    wait_for(
        lambda: (
            set(chain.backend_credentials("chat")) == {"claude", "openai"}
            and all(chain.backend_credentials("chat").values())
        ),
        what="both backends with credentials in the route config",
    )
    credentials = chain.backend_credentials("chat")
    assert credentials["claude"] == {
        "type": "APIKey",
        "policy": "anthropic",
        "header": {"name": "x-api-key", "format": "Raw"},
        "data": {"apiKey": ANTHROPIC_KEY},
    }
    assert credentials["openai"] == {
        "type": "APIKey",
        "policy": "openai",
        "data": {"apiKey": OPENAI_KEY},
    }, "the default header stays implicit, as before the field existed"

    derived = chain.get("secret", rapi.derived_secret_name("anthropic"))
    assert derived is not None
    chain.api.patch(
        rapi.POLICIES,
        "anthropic",
        {"spec": {"apiKey": {"header": "api-key"}}},
        namespace=chain.ns,
    )
    wait_for(
        lambda: (
            (claude_credentials(chain) or {}).get("header") == {"name": "api-key", "format": "Raw"}
        ),
        what="the new header in the route config",
    )
    chain.api.patch(
        rapi.POLICIES,
        "anthropic",
        {"spec": {"apiKey": {"header": "Authorization"}}},
        namespace=chain.ns,
    )
    wait_for(
        lambda: "header" not in (claude_credentials(chain) or {"header": None}),
        what="the default header implicit again",
    )
    assert claude_credentials(chain) == {
        "type": "APIKey",
        "policy": "anthropic",
        "data": {"apiKey": ANTHROPIC_KEY},
    }
    after = chain.get("secret", rapi.derived_secret_name("anthropic"))
    assert after is not None
    assert after["data"] == derived["data"], "a header change needs no new credential"


def test_the_provider_native_header_sample_states_its_headers(chain: Chain) -> None:
    """config/samples/apikey_headers.yaml, as a user applies it: each Route's configuration
    names the header its provider expects."""
    docs = manifests.load_file(manifests.CONFIG / "samples" / "apikey_headers.yaml")
    manifests.apply(chain.api, docs, namespace=chain.ns)
    expected = {
        ("anthropic", "anthropic"): {"name": "x-api-key", "format": "Raw"},
        ("gpt-azure-key", "azure-openai-key"): {"name": "api-key", "format": "Raw"},
    }

    def stated() -> dict[tuple[str, str], Any]:
        return {
            (route, backend): (chain.backend_credentials(route).get(backend) or {}).get("header")
            for route, backend in expected
        }

    wait_for(lambda: stated() == expected, what="each sample Route's header in its configuration")
