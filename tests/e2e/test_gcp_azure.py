"""GCP and Azure credentials against the local stand-ins of their token services, with the
OIDC issuer and the API server's TokenRequest as subject-token sources."""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

from controllers.reconcilers import api as rapi
from rotator.providers.gcp import federation
from rotator_devkit.controlplane.cluster import SERVICE_ACCOUNT_ISSUER
from rotator_devkit.devenv.standins.azure import App, AzureStandIn
from rotator_devkit.devenv.standins.gcp import GCPStandIn
from rotator_devkit.devenv.standins.oidc import OIDCIssuer
from tests.support import backoff
from tests.support.chain import AWSChain
from tests.support.controller import ControllerProcess
from tests.support.history import SecretHistory
from tests.support.polling import wait_for

PROJECT_NUMBER = "123456789"
IMPERSONATED = "gateway@test-project.iam.gserviceaccount.com"
CLIENT_SECRET = "oidc-client-secret-gcp-azure-77"
AZURE_SECRET = "azure-app-secret-value-1234567"
TENANT = "11111111-2222-3333-4444-555555555555"


def wif(
    pool: str, provider: str, subject: dict[str, Any], impersonate: bool = False
) -> dict[str, Any]:
    spec = {
        "projectID": PROJECT_NUMBER,
        "workloadIdentityPoolName": pool,
        "workloadIdentityProviderName": provider,
        **subject,
    }
    if impersonate:
        spec["serviceAccountImpersonation"] = {"serviceAccountName": IMPERSONATED}
    return spec


def gcp_policy(chain: AWSChain, name: str, source: dict[str, Any]) -> None:
    chain.create(
        "policy",
        name,
        {
            "type": "GCPCredentials",
            "gcpCredentials": {"projectName": "test-project", "region": "us-central1", **source},
        },
    )


def azure_policy(chain: AWSChain, name: str, client_id: str, source: dict[str, Any]) -> None:
    chain.create(
        "policy",
        name,
        {
            "type": "AzureCredentials",
            "azureCredentials": {"clientID": client_id, "tenantID": TENANT, **source},
        },
    )


def token(chain: AWSChain, policy: str, key: str) -> str | None:
    data = chain.secret_data(rapi.derived_secret_name(policy))
    if data is None:
        return None
    chain.remember(data[key])
    return data[key]


def setup_gcp(chain: AWSChain, gcp: GCPStandIn, issuer: OIDCIssuer) -> None:
    audience = federation.audience(PROJECT_NUMBER, "pool", "provider")
    gcp.add_provider(audience, {"https:" + audience})
    gcp.service_accounts.add(IMPERSONATED)
    client = f"gcp-{chain.ns}"
    issuer.register(client, CLIENT_SECRET)
    chain.secret("oidc-client", **{"client-secret": CLIENT_SECRET})
    oidc = {
        "issuer": issuer.issuer,
        "clientID": client,
        "clientSecretRef": {"name": "oidc-client"},
        "audience": "https:" + audience,
    }
    gcp_policy(
        chain,
        "gcp-oidc",
        {
            "workloadIdentityFederation": wif(
                "pool", "provider", {"oidcExchangeToken": {"oidc": oidc}}, impersonate=True
            )
        },
    )
    gcp_policy(
        chain,
        "gcp-sa",
        {
            "workloadIdentityFederation": wif(
                "pool", "provider", {"serviceAccountToken": {"serviceAccountName": "default"}}
            )
        },
    )
    key = gcp.service_account_key(f"key-{chain.ns}@test-project.iam.gserviceaccount.com")
    chain.secret("sa-key", **{"service_account.json": json.dumps(key)})
    chain.remember(key["private_key"].splitlines()[1])
    gcp_policy(chain, "gcp-key", {"credentialsFile": {"secretRef": {"name": "sa-key"}}})


def setup_azure(chain: AWSChain, azure: AzureStandIn, issuer: OIDCIssuer) -> None:
    azure.apps[f"secret-{chain.ns}"] = App(TENANT, secret=AZURE_SECRET)
    chain.secret("azure-app", **{"client-secret": AZURE_SECRET})
    azure_policy(
        chain, "az-secret", f"secret-{chain.ns}", {"clientSecretRef": {"name": "azure-app"}}
    )
    client = f"az-{chain.ns}"
    issuer.register(client, CLIENT_SECRET)
    chain.secret("oidc-client", **{"client-secret": CLIENT_SECRET})
    azure.apps[f"oidc-{chain.ns}"] = App(TENANT, federated={(issuer.issuer, client)})
    oidc = {
        "issuer": issuer.issuer,
        "clientID": client,
        "clientSecretRef": {"name": "oidc-client"},
        "audience": "api://AzureADTokenExchange",
    }
    azure_policy(chain, "az-oidc", f"oidc-{chain.ns}", {"oidcExchangeToken": {"oidc": oidc}})
    azure.apps[f"sa-{chain.ns}"] = App(
        TENANT, federated={(SERVICE_ACCOUNT_ISSUER, f"system:serviceaccount:{chain.ns}:default")}
    )
    azure_policy(
        chain, "az-sa", f"sa-{chain.ns}", {"serviceAccountToken": {"serviceAccountName": "default"}}
    )


GCP_KINDS = {"gcp-oidc": "impersonated", "gcp-sa": "federated", "gcp-key": "service-account"}
AZURE = ("az-secret", "az-oidc", "az-sa")


def test_gcp_and_azure_tokens_are_the_issued_ones_and_rotate_before_expiry(
    chain: AWSChain, gcp: GCPStandIn, azure: AzureStandIn, oidc_issuer: OIDCIssuer
) -> None:
    with SecretHistory(chain.api, chain.ns) as history:
        setup_gcp(chain, gcp, oidc_issuer)
        setup_azure(chain, azure, oidc_issuer)
        for name in (*GCP_KINDS, *AZURE):
            chain.wait_condition("policy", name, "Ready", "True", "CredentialsReady", timeout=60)
        for name, kind in GCP_KINDS.items():
            value = token(chain, name, "gcpAccessToken")
            assert value is not None
            assert gcp.was_issued(value) == kind, name
        for name in AZURE:
            value = token(chain, name, "azureAccessToken")
            assert value is not None
            assert azure.was_issued(value), name
        policies = (*GCP_KINDS, *AZURE)
        wait_for(
            lambda: all(history.count(p) >= 4 for p in policies),
            timeout=200,
            interval=0.5,
            what="three rotations each",
        )
        for name in policies:
            versions = history.of(name)
            for previous, following in itertools.pairwise(versions):
                assert previous.expires_at is not None
                assert following.seen_at < previous.expires_at, f"{name} replaced before expiry"
            first_expiry = versions[0].expires_at or 0.0
            print(f"{name}: replaced {first_expiry - versions[1].seen_at:.1f} s before expiry")


def test_gcp_outage_then_recovery_and_restart_reuses_tokens(
    chain: AWSChain, gcp: GCPStandIn, oidc_issuer: OIDCIssuer, controller: ControllerProcess
) -> None:
    audience = federation.audience(PROJECT_NUMBER, "pool", "provider")
    gcp.add_provider(audience, {"https:" + audience})
    gcp_policy(
        chain,
        "gcp-sa",
        {
            "workloadIdentityFederation": wif(
                "pool", "provider", {"serviceAccountToken": {"serviceAccountName": "default"}}
            )
        },
    )
    chain.wait_condition("policy", "gcp-sa", "Ready", "True", "CredentialsReady", timeout=60)
    exchanges = gcp.count("exchange")
    controller.restart()
    wait_for(controller.idle, what="settled after restart")
    assert gcp.count("exchange") == exchanges, "no token exchange for a still-valid token"
    gcp.set_mode("fail")
    try:
        chain.wait_condition("policy", "gcp-sa", "Ready", "True", "RotationFailed", timeout=60)
        chain.wait_condition("policy", "gcp-sa", "Ready", "False", "Expired", timeout=60)
    finally:
        gcp.set_mode("ok")
    chain.wait_condition("policy", "gcp-sa", "Ready", "True", "CredentialsReady", timeout=90)


def test_azure_outage_keeps_ready_while_valid(chain: AWSChain, azure: AzureStandIn) -> None:
    azure.apps[f"secret-{chain.ns}"] = App(TENANT, secret=AZURE_SECRET)
    chain.secret("azure-app", **{"client-secret": AZURE_SECRET})
    azure_policy(chain, "az", f"secret-{chain.ns}", {"clientSecretRef": {"name": "azure-app"}})
    chain.wait_condition("policy", "az", "Ready", "True", "CredentialsReady", timeout=60)
    azure.set_mode("fail")
    try:
        failing = chain.wait_condition(
            "policy", "az", "Ready", "True", "RotationFailed", timeout=60
        )
        assert "Azure AD" in failing["message"]
    finally:
        azure.set_mode("ok")
    chain.wait_condition("policy", "az", "Ready", "True", "CredentialsReady", timeout=90)


def test_bad_gcp_and_azure_input_is_explained_without_hot_loops(
    chain: AWSChain, gcp: GCPStandIn, azure: AzureStandIn
) -> None:
    """Bad keys, pools and client secrets: a precise reason each, and retries on the documented
    schedule (1 s doubling, ±20 %; tests/support/backoff.py). Attempt k of a policy cannot come
    sooner after its creation than the schedule allows, so each policy's attempts, and the
    refused calls to each stand-in, are bounded by the time since the test began — hard
    bounds: a loaded machine only makes fewer attempts.

    Mutations caught: a constant 1 s retry delay, a zero delay (a hot loop)."""
    started = time.time()
    refused = {"gcp": gcp.count("exchange_refused"), "azure": azure.count("refused")}
    chain.secret(
        "broken-key",
        **{
            "service_account.json": '{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\nnot-a-key-but-secret-looking-AAAA\\n-----END PRIVATE KEY-----\\n", "client_email": "x@y", "token_uri": "https://oauth2.example/token"}'
        },
    )
    chain.remember("not-a-key-but-secret-looking-AAAA")
    gcp_policy(chain, "bad-key", {"credentialsFile": {"secretRef": {"name": "broken-key"}}})
    chain.secret(
        "not-json", **{"service_account.json": "this is not json at all, secret=hunter2hunter2"}
    )
    chain.remember("hunter2hunter2")
    gcp_policy(chain, "not-json", {"credentialsFile": {"secretRef": {"name": "not-json"}}})
    gcp_policy(
        chain,
        "bad-pool",
        {
            "workloadIdentityFederation": wif(
                "no-such-pool",
                "provider",
                {"serviceAccountToken": {"serviceAccountName": "default"}},
            )
        },
    )
    azure.apps[f"secret-{chain.ns}"] = App(TENANT, secret="the-real-secret-value-999")
    chain.remember("the-real-secret-value-999")
    chain.secret("wrong", **{"client-secret": "a-wrong-secret-value-000"})
    azure_policy(chain, "bad-secret", f"secret-{chain.ns}", {"clientSecretRef": {"name": "wrong"}})

    assert (
        "cannot be read"
        in chain.wait_condition("policy", "bad-key", "Ready", "False", "InvalidSecretData")[
            "message"
        ]
    )
    assert (
        "is not JSON"
        in chain.wait_condition("policy", "not-json", "Ready", "False", "InvalidSecretData")[
            "message"
        ]
    )
    assert (
        "invalid_target"
        in chain.wait_condition(
            "policy", "bad-pool", "Ready", "False", "ProviderRejected", timeout=60
        )["message"]
    )
    assert (
        "AADSTS7000215"
        in chain.wait_condition(
            "policy", "bad-secret", "Ready", "False", "ProviderRejected", timeout=60
        )["message"]
    )
    for name in ("bad-key", "bad-pool", "bad-secret"):
        wait_for(lambda n=name: "RotationFailed" in chain.event_reasons(n), what=f"{name} event")  # type: ignore[misc]
    bad = ("bad-key", "not-json", "bad-pool", "bad-secret")

    def attempts(name: str) -> int:
        return int((chain.get("policy", name) or {}).get("status", {}).get("failedAttempts", 0))

    wait_for(
        lambda: all(attempts(n) >= 5 for n in bad),
        timeout=backoff.latest(5) + 30,
        what="four retries each",
    )
    counts = {n: attempts(n) for n in bad}
    calls = {
        "gcp": gcp.count("exchange_refused") - refused["gcp"],
        "azure": azure.count("refused") - refused["azure"],
    }
    elapsed = time.time() - started  # the clock read after the counts: an upper bound
    most = backoff.most_attempts(elapsed)
    print(
        f"\n{elapsed:.1f} s: attempts {counts}, refused calls {calls}; the schedule allows {most}"
    )
    assert all(c <= most for c in counts.values()), "no hot loop: retries keep to the schedule"
    assert all(0 < c <= most for c in calls.values()), "one provider call per attempt, no more"
