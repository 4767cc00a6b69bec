"""The chain Secret → BackendSecurityPolicy → ServiceBackend → Route against the real control
plane, with the controller as its own process under its shipped RBAC."""

from __future__ import annotations

import base64
import functools

import pytest

from controllers.reconcilers import api as rapi
from rotator_devkit.devenv import manifests
from tests.support.chain import Chain
from tests.support.polling import wait_for

pytestmark = pytest.mark.oldest_kubernetes

KEY_1 = "sk-test-first-key-0123456789"
KEY_2 = "sk-test-second-key-9876543210"


def build_api_key_chain(chain: Chain, value: str = KEY_1) -> None:
    chain.secret("openai-key", apiKey=value)
    chain.api_key_policy("openai", secret="openai-key", targets=["openai"])
    chain.backend("openai")
    chain.route("chat", ["openai"])


def credential_value(chain: Chain, route: str, backend: str) -> str | None:
    creds = chain.backend_credentials(route).get(backend)
    return None if creds is None else creds["data"].get("apiKey")


def test_source_secret_change_reaches_the_route_config(chain: Chain) -> None:
    build_api_key_chain(chain)
    wait_for(
        lambda: credential_value(chain, "chat", "openai") == KEY_1,
        what="first key in the route config",
    )
    first_hash = chain.config_hash("chat")

    ready = chain.wait_condition("policy", "openai", "Ready", "True", "CredentialsReady")
    policy = chain.get("policy", "openai")
    assert policy is not None
    assert ready["observedGeneration"] == policy["metadata"]["generation"]
    assert policy["status"]["derivedSecretName"] == "rotator-bsp-openai"
    chain.wait_condition("backend", "openai", "ResolvedRefs", "True", "ResolvedRefs")
    chain.wait_condition("route", "chat", "Programmed", "True")
    chain.wait_condition("route", "chat", "ResolvedRefs", "True")

    derived = chain.get("secret", "rotator-bsp-openai")
    assert derived is not None
    md = derived["metadata"]
    assert md["labels"][rapi.MANAGED_BY_LABEL] == "rotator"
    assert rapi.CREDENTIAL_HASH_ANNOTATION in md["annotations"]
    assert rapi.EXPIRATION_ANNOTATION not in md["annotations"], "API keys never expire"
    (owner,) = md["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == (
        "BackendSecurityPolicy",
        "openai",
        True,
    )
    assert base64.b64decode(derived["data"]["apiKey"]).decode() == KEY_1

    config_secret = chain.get("secret", "rotator-route-chat")
    assert config_secret is not None
    (owner,) = config_secret["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Route", "chat")
    config = chain.route_config("chat")
    assert config is not None
    (rule,) = config["rules"]
    assert rule["matches"] == [{"modelName": "gpt-4o"}]
    (backend,) = rule["backends"]
    assert backend["endpoint"] == {"host": "api.openai.com", "port": 443, "tls": {"enabled": True}}
    assert (backend["schema"], backend["weight"], backend["priority"]) == ("OpenAI", 1, 0)

    chain.secret("openai-key", apiKey=KEY_2)
    wait_for(
        lambda: credential_value(chain, "chat", "openai") == KEY_2,
        what="second key in the route config",
    )
    assert chain.config_hash("chat") != first_hash
    wait_for(lambda: "CredentialsRotated" in chain.event_reasons("openai"), what="rotation event")


def test_aws_credentials_file_is_rewritten_as_profile_default_with_region(chain: Chain) -> None:
    secret_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    chain.secret(
        "aws",
        credentials=f"[default]\naws_access_key_id = AKIAOLD\naws_secret_access_key = old-{secret_key}\n\n"
        f"[bedrock]\naws_access_key_id = AKIAEXAMPLE\naws_secret_access_key = {secret_key}\n",
    )
    chain.remember(secret_key)
    chain.aws_file_policy(
        "bedrock", secret="aws", targets=["bedrock"], region="eu-west-1", profile="bedrock"
    )
    chain.backend("bedrock", schema="AWSBedrock", host="bedrock-runtime.eu-west-1.amazonaws.com")
    chain.route("claude", ["bedrock"], model="anthropic.claude")
    chain.wait_condition("policy", "bedrock", "Ready", "True")
    derived = chain.secret_data("rotator-bsp-bedrock")
    assert derived == {
        "credentials": f"[default]\naws_access_key_id = AKIAEXAMPLE\naws_secret_access_key = {secret_key}\nregion = eu-west-1\n"
    }
    wait_for(
        lambda: (
            (chain.backend_credentials("claude").get("bedrock") or {}).get("type")
            == "AWSCredentials"
        ),
        what="route config",
    )


def test_creating_in_reverse_order_converges(chain: Chain) -> None:
    chain.route("chat", ["openai"])
    chain.wait_condition("route", "chat", "ResolvedRefs", "False", "BackendNotFound")
    assert chain.backend_credentials("chat") == {}, "a missing backend is left out"
    chain.backend("openai")
    wait_for(
        lambda: chain.backend_credentials("chat") == {"openai": None}, what="backend without policy"
    )
    chain.wait_condition("backend", "openai", "ResolvedRefs", "True", "NoPolicy")
    chain.api_key_policy("openai", secret="openai-key", targets=["openai"])
    chain.wait_condition("policy", "openai", "Ready", "False", "SecretNotFound")
    chain.wait_condition("backend", "openai", "ResolvedRefs", "False", "PolicyNotReady")
    wait_for(
        lambda: chain.backend_credentials("chat") == {},
        what="a backend that cannot authenticate is left out",
    )
    chain.secret("openai-key", apiKey=KEY_1)
    wait_for(lambda: credential_value(chain, "chat", "openai") == KEY_1, what="converged")
    chain.wait_condition("route", "chat", "ResolvedRefs", "True")


def test_deleting_at_every_level(chain: Chain) -> None:
    build_api_key_chain(chain)
    wait_for(lambda: credential_value(chain, "chat", "openai") == KEY_1, what="chain built")

    chain.delete("secret", "openai-key")
    chain.wait_condition("policy", "openai", "Ready", "False", "SecretNotFound")
    wait_for(lambda: chain.backend_credentials("chat") == {}, what="credentials withdrawn")
    wait_for(lambda: "SecretNotFound" in chain.event_reasons("openai"), what="event")
    chain.secret("openai-key", apiKey=KEY_2)
    wait_for(
        lambda: credential_value(chain, "chat", "openai") == KEY_2,
        what="recovered without touching the policy",
    )

    chain.delete("policy", "openai")
    wait_for(
        lambda: chain.get("secret", "rotator-bsp-openai") is None,
        timeout=60,
        what="derived Secret garbage-collected",
    )
    wait_for(
        lambda: chain.backend_credentials("chat") == {"openai": None},
        what="credentials removed from the route",
    )
    chain.wait_condition("backend", "openai", "ResolvedRefs", "True", "NoPolicy")

    chain.delete("backend", "openai")
    wait_for(lambda: chain.backend_credentials("chat") == {}, what="backend removed from the route")
    chain.wait_condition("route", "chat", "ResolvedRefs", "False", "BackendNotFound")

    chain.delete("route", "chat")
    wait_for(
        lambda: chain.get("secret", "rotator-route-chat") is None,
        timeout=60,
        what="route config garbage-collected",
    )


def test_many_backends_per_route_and_many_routes_per_backend(chain: Chain) -> None:
    backends = [f"b{i}" for i in range(5)]
    for b in backends:
        chain.secret(f"{b}-key", apiKey=f"sk-{b}-initial-value")
        chain.api_key_policy(b, secret=f"{b}-key", targets=[b])
        chain.backend(b)
    for r in range(4):
        chain.route(f"all-{r}", backends[:3], backends[3:])
    chain.route("only-b4", ["b4"])

    def all_keys(route: str) -> dict[str, str]:
        return {
            b: (c or {}).get("data", {}).get("apiKey", "")
            for b, c in chain.backend_credentials(route).items()
        }

    expected = {b: f"sk-{b}-initial-value" for b in backends}

    def up_to_date(route: str) -> bool:
        return all_keys(route) == expected

    for r in range(4):
        wait_for(functools.partial(up_to_date, f"all-{r}"), what=f"route all-{r}")
    wait_for(lambda: all_keys("only-b4") == {"b4": "sk-b4-initial-value"}, what="route only-b4")
    config = rapi.route_config_secret_name("only-b4")

    def version() -> str:
        return str((chain.get("secret", config) or {})["metadata"]["resourceVersion"])

    untouched = version()  # any write changes it; an equal hash says only the text is the same

    chain.secret("b1-key", apiKey="sk-b1-rotated-value")
    expected["b1"] = "sk-b1-rotated-value"
    for r in range(4):
        wait_for(functools.partial(up_to_date, f"all-{r}"), what=f"route all-{r} updated")
    assert version() == untouched, "a route that does not use b1 is not rewritten"


def test_two_policies_on_one_backend_conflict(chain: Chain) -> None:
    build_api_key_chain(chain)
    wait_for(lambda: credential_value(chain, "chat", "openai") == KEY_1, what="chain built")
    chain.secret("other-key", apiKey=KEY_2)
    chain.api_key_policy("other", secret="other-key", targets=["openai"])
    chain.wait_condition("backend", "openai", "ResolvedRefs", "False", "PolicyConflict")
    wait_for(lambda: chain.backend_credentials("chat") == {}, what="conflicted backend left out")
    wait_for(lambda: "PolicyConflict" in chain.event_reasons("openai"), what="conflict event")
    chain.delete("policy", "other")
    chain.wait_condition("backend", "openai", "ResolvedRefs", "True", "ResolvedRefs")
    wait_for(lambda: credential_value(chain, "chat", "openai") == KEY_1, what="conflict resolved")


RUNNABLE_HERE = ("apikey.yaml", "aws_credentials_file.yaml", "aws_service_account_token.yaml")
"""Samples that work against the test's stand-ins; the OIDC and IAM samples name an example
identity provider and account, and are only validated."""


def test_the_samples_reconcile(chain: Chain) -> None:
    docs = [d for f in RUNNABLE_HERE for d in manifests.load_file(manifests.CONFIG / "samples" / f)]
    for doc in docs:
        if doc["kind"] == "Secret":
            chain.remember(*(v for v in doc["stringData"].values() if "replace-me" not in v))
    manifests.apply(chain.api, docs, namespace=chain.ns)
    for doc in docs:
        name = doc["metadata"]["name"]
        if doc["kind"] == "BackendSecurityPolicy":
            chain.wait_condition("policy", name, "Ready", "True")
        if doc["kind"] == "Route":
            chain.wait_condition("route", name, "Programmed", "True")
            chain.wait_condition("route", name, "ResolvedRefs", "True")


def test_every_sample_is_valid(chain: Chain) -> None:
    for doc in manifests.load(manifests.CONFIG / "samples"):
        if doc["kind"] == "Secret":
            continue
        resource = manifests.KINDS[doc["kind"]]
        chain.api.request(
            "POST", resource.path(namespace=chain.ns), query=[("dryRun", "All")], body=doc
        )
