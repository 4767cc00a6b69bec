"""The controller's own cloud identity as a credential source (``controllerIdentity``): an Azure
managed identity from IMDS or App Service's endpoint, an Azure workload identity from a projected
ServiceAccount token file, Google Application Default Credentials from a metadata server. Each
stand-in checks what the real endpoint checks (tests/unit/test_identity_standins.py), and the
SDKs find them only by their documented environment variables. The identity is the controller's,
so only the namespaces of ``--controller-identity-namespaces`` may use it.

The identity lives in the controller's environment, so each test runs a controller of its own in
place of the session's (restarted afterwards), with the environment it needs."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from controllers.reconcilers import api as rapi
from controllers.reconcilers.credentialsources import CONTROLLER_IDENTITY_FLAG
from controllers.runtime import client as clients
from controllers.runtime import clock as clocks
from controllers.runtime import errors, objects
from rotator_devkit.controlplane.cluster import SERVICE_ACCOUNT_ISSUER
from rotator_devkit.devenv import manifests
from rotator_devkit.devenv.standins.azure import App, AzureStandIn
from rotator_devkit.devenv.standins.azure_identity import SYSTEM_ASSIGNED, ManagedIdentityStandIn
from rotator_devkit.devenv.standins.container import ContainerCredentials
from rotator_devkit.devenv.standins.gce_metadata import TOKEN_KIND, GCEMetadataServer
from rotator_devkit.devenv.standins.gcp import GCPStandIn
from rotator_devkit.devenv.standins.sts import ASSUME_ROLE, STSProxy
from tests.e2e.test_aws_identity import (
    POD_IDENTITY_ROLE,
    identity_source,
    pod_identity_env,
    target_role,
)
from tests.e2e.test_aws_identity import pod_identity as pod_identity  # noqa: PLC0414 - a fixture
from tests.support import backoff, leaks
from tests.support.chain import AWSChain
from tests.support.controller import SERVICE_ACCOUNT, ControllerProcess
from tests.support.history import SecretHistory
from tests.support.polling import wait_for

TENANT = "11111111-2222-3333-4444-555555555555"
USER_ASSIGNED = "aaaaaaaa-0000-4000-8000-000000000001"
IMPERSONATED = "vertex@test-project.iam.gserviceaccount.com"
FAST: dict[str, Any] = {"renewBefore": "40s"}
"""60 s tokens renewed 20 s after issue: three rotations in about a minute."""
AZURE_TOKEN, GCP_TOKEN = "azureAccessToken", "gcpAccessToken"

StartController = Callable[[dict[str, str], str], ControllerProcess]


@pytest.fixture(scope="module")
def imds() -> Iterator[ManagedIdentityStandIn]:
    standin = ManagedIdentityStandIn(lifetime=60, user_assigned=(USER_ASSIGNED,)).start()
    leaks.MINTED.add_source("the managed identity stand-in", standin.issued_values)
    yield standin
    standin.stop()


@pytest.fixture(scope="module")
def metadata(gcp: GCPStandIn) -> Iterator[GCEMetadataServer]:
    """Its tokens are the GCP stand-in's (registered with the leak scan there)."""
    gcp.service_accounts.add(IMPERSONATED)
    standin = GCEMetadataServer(gcp, lifetime=60).start()
    yield standin
    standin.stop()


@pytest.fixture
def own_controller(
    chain: AWSChain, controller: ControllerProcess, tmp_path: Path
) -> Iterator[StartController]:
    """Starts ``rotator run`` with extra environment and ``--controller-identity-namespaces``
    in place of the session's controller; afterwards, its logs and metrics hold no secret value
    and the session's controller runs again."""
    started: list[ControllerProcess] = []
    gcloud = tmp_path / "gcloud"  # no developer's gcloud login is Application Default Credentials
    gcloud.mkdir()

    def start(env: dict[str, str], namespaces: str) -> ControllerProcess:
        if controller.proc is not None:
            controller.stop()
        own = ControllerProcess(
            controller.kubeconfig,
            tmp_path,
            env={**controller.env, "CLOUDSDK_CONFIG": str(gcloud), **env},
            args=(*controller.args, f"{CONTROLLER_IDENTITY_FLAG}={namespaces}"),
            lease=controller.lease,
        )
        started.append(own)
        return own.start()

    try:
        yield start
        for own in started:
            if own.proc is not None:
                assert own.proc.popen.poll() is None, f"it exited: {own.logs()[-3000:]}"
                metrics = own.proc.http(own.proc.metrics_port, "/metrics")[1]
                assert not chain.leaks(own.logs(), metrics=metrics)
    finally:
        for own in started:
            if own.proc is not None:
                own.stop()
        if controller.proc is None:
            controller.start()


def imds_env(imds: ManagedIdentityStandIn) -> dict[str, str]:
    return {"AZURE_POD_IDENTITY_AUTHORITY_HOST": imds.authority_host}


def metadata_env(metadata: GCEMetadataServer) -> dict[str, str]:
    return {"GCE_METADATA_HOST": metadata.host, "GCE_METADATA_IP": metadata.host}


def azure_policy(
    chain: AWSChain, name: str, identity: dict[str, str], rotation: dict[str, Any] | None = None
) -> None:
    spec: dict[str, Any] = {
        "type": "AzureCredentials",
        "azureCredentials": {"controllerIdentity": identity},
    }
    chain.create("policy", name, {**spec, **({"rotation": rotation} if rotation else {})})


def gcp_policy(
    chain: AWSChain, name: str, identity: dict[str, str], rotation: dict[str, Any] | None = None
) -> None:
    spec: dict[str, Any] = {
        "type": "GCPCredentials",
        "gcpCredentials": {
            "projectName": "test-project",
            "region": "us-central1",
            "controllerIdentity": identity,
        },
    }
    chain.create("policy", name, {**spec, **({"rotation": rotation} if rotation else {})})


def token(chain: AWSChain, policy: str, key: str) -> str:
    data = chain.secret_data(rapi.derived_secret_name(policy))
    assert data is not None, f"{policy} has no derived Secret"
    chain.remember(data[key])
    return data[key]


def expiration(chain: AWSChain, policy: str) -> float:
    expires = chain.expiration(policy)
    assert expires is not None
    return expires


def rotated_three_times_before_expiry(history: SecretHistory, policies: tuple[str, ...]) -> None:
    wait_for(
        lambda: all(history.count(p) >= 4 for p in policies),
        timeout=150,
        interval=0.5,
        what="three rotations each",
    )
    for name in policies:
        versions = history.of(name)
        for previous, following in itertools.pairwise(versions):
            assert previous.expires_at is not None
            assert following.seen_at < previous.expires_at, f"{name} replaced after expiry"
        lifetimes = [v.expires_at - v.issued_at for v in versions if v.expires_at and v.issued_at]
        assert all(55 <= t <= 61 for t in lifetimes), f"{name}: the tokens' own 60 s {lifetimes}"
        first = versions[0].expires_at or 0.0
        print(f"{name}: replaced {first - versions[1].seen_at:.1f} s before expiry")


AZURE_IDS = {"clientID": "c", "tenantID": "t"}
GCP_BASE = {"projectName": "p", "region": "r"}


@pytest.mark.oldest_kubernetes
@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param(
            {"azureCredentials": {**AZURE_IDS, "controllerIdentity": {}}},
            "not allowed with controllerIdentity",
            id="azure-ids-come-from-the-environment",
        ),
        pytest.param(
            {"azureCredentials": {"clientSecretRef": {"name": "s"}}},
            "clientID and tenantID are required with clientSecretRef",
            id="azure-ids-needed-otherwise",
        ),
        pytest.param(
            {
                "azureCredentials": {
                    **AZURE_IDS,
                    "clientSecretRef": {"name": "s"},
                    "controllerIdentity": {},
                }
            },
            "set exactly one Azure credential source",
            id="one-azure-source",
        ),
        pytest.param(
            {
                "gcpCredentials": {
                    **GCP_BASE,
                    "credentialsFile": {"secretRef": {"name": "s"}},
                    "controllerIdentity": {},
                }
            },
            "set exactly one GCP credential source",
            id="one-gcp-source",
        ),
        pytest.param(
            {
                "gcpCredentials": {
                    **GCP_BASE,
                    "controllerIdentity": {"serviceAccount": "a/../b@p.iam.gserviceaccount.com"},
                }
            },
            "should match",
            id="an-email-not-a-path",
        ),
    ],
)
def test_the_crd_keeps_controller_identity_to_itself(
    api: clients.Client, namespace: str, installed: None, spec: dict[str, Any], message: str
) -> None:
    kind = "AzureCredentials" if "azureCredentials" in spec else "GCPCredentials"
    body = {
        "apiVersion": rapi.API_VERSION,
        "kind": "BackendSecurityPolicy",
        "metadata": {"name": "x"},
        "spec": {"type": kind, **spec},
    }
    with pytest.raises(errors.Invalid) as raised:
        api.create(rapi.POLICIES, body, namespace=namespace)
    assert message in str(raised.value)


def test_imds_and_metadata_server_tokens_rotate_three_times_before_expiry(
    chain: AWSChain,
    imds: ManagedIdentityStandIn,
    metadata: GCEMetadataServer,
    gcp: GCPStandIn,
    own_controller: StartController,
) -> None:
    own_controller({**imds_env(imds), **metadata_env(metadata)}, chain.ns)
    refused = (imds.count("refused"), metadata.count("refused"))
    pings = metadata.count("ping")
    with SecretHistory(chain.api, chain.ns) as history:
        azure_policy(chain, "az-user", {"clientID": USER_ASSIGNED}, FAST)
        azure_policy(chain, "az-system", {}, FAST)
        gcp_policy(chain, "gcp-adc", {}, FAST)
        gcp_policy(chain, "gcp-as", {"serviceAccount": IMPERSONATED}, FAST)
        policies = ("az-user", "az-system", "gcp-adc", "gcp-as")
        for name in policies:
            chain.wait_condition("policy", name, "Ready", "True", "CredentialsReady", timeout=60)
        rotated_three_times_before_expiry(history, policies)

    for name, identity in (("az-user", USER_ASSIGNED), ("az-system", SYSTEM_ASSIGNED)):
        issued = imds.was_issued(token(chain, name, AZURE_TOKEN))
        assert issued is not None, f"{name}: a token IMDS issued"
        assert (issued.identity, issued.endpoint) == (identity, "imds")
        assert issued.resource == "https://cognitiveservices.azure.com", "the scope's resource"
        assert abs(expiration(chain, name) - issued.expires_on) <= 2, "IMDS's own expiry"
    assert gcp.was_issued(token(chain, "gcp-adc", GCP_TOKEN)) == TOKEN_KIND
    assert gcp.was_issued(token(chain, "gcp-as", GCP_TOKEN)) == "impersonated"
    assert set(metadata.scopes_asked) == {"https://www.googleapis.com/auth/cloud-platform"}
    assert metadata.count("ping") - pings == 1, "Application Default Credentials found once"
    # the SDKs sent Metadata: true and Metadata-Flavor: Google (the stand-ins refuse otherwise)
    assert (imds.count("refused") - refused[0], metadata.count("refused") - refused[1]) == (0, 0)


def test_workload_identity_from_a_token_file_rotates_three_times_before_expiry(
    chain: AWSChain,
    api: clients.Client,
    azure: AzureStandIn,
    imds: ManagedIdentityStandIn,
    own_controller: StartController,
    tmp_path: Path,
) -> None:
    """AKS's workload identity webhook sets AZURE_FEDERATED_TOKEN_FILE (the kubelet keeps a
    projected token of the controller's ServiceAccount there), AZURE_CLIENT_ID, AZURE_TENANT_ID
    and AZURE_AUTHORITY_HOST. The Azure AD stand-in verifies the token as the client assertion
    (signature, issuer, subject, audience). The kubelet's refresh of the file is followed."""
    app = f"wi-{chain.ns}"
    subject = f"system:serviceaccount:{manifests.NAMESPACE}:{SERVICE_ACCOUNT}"
    azure.apps[app] = App(TENANT, federated={(SERVICE_ACCOUNT_ISSUER, subject)})
    token_file = tmp_path / "azure-identity-token"

    def project_token() -> str:
        value = str(
            api.create(
                objects.SERVICEACCOUNTS,
                {
                    "apiVersion": "authentication.k8s.io/v1",
                    "kind": "TokenRequest",
                    "spec": {
                        "audiences": ["api://AzureADTokenExchange"],
                        "expirationSeconds": 3600,
                    },
                },
                namespace=manifests.NAMESPACE,
                name=SERVICE_ACCOUNT,
                subresource="token",
            )["status"]["token"]
        )
        chain.remember(value)
        token_file.write_text(value)
        return value

    project_token()
    env = {
        "AZURE_FEDERATED_TOKEN_FILE": str(token_file),
        "AZURE_CLIENT_ID": app,
        "AZURE_TENANT_ID": TENANT,
        "AZURE_AUTHORITY_HOST": f"https://{azure.authority_host}",
        # the managed identity endpoint is there too, and must not be asked
        **imds_env(imds),
    }
    own_controller(env, chain.ns)
    before = imds.count("received")
    with SecretHistory(chain.api, chain.ns) as history:
        azure_policy(chain, "az-wi", {}, FAST)
        chain.wait_condition("policy", "az-wi", "Ready", "True", "CredentialsReady", timeout=60)
        wait_for(lambda: history.count("az-wi") >= 2, timeout=60, interval=0.5, what="a rotation")
        refreshed = project_token()  # the kubelet refreshes the projected token
        rotated_three_times_before_expiry(history, ("az-wi",))
    assert azure.was_issued(token(chain, "az-wi", AZURE_TOKEN)), "Azure AD's token"
    assert refreshed in azure.issued_values(), "the refreshed token file was read"
    assert imds.count("received") == before, "workload identity, not a managed identity"


def test_app_service_identity_endpoint_with_its_header(
    chain: AWSChain, imds: ManagedIdentityStandIn, own_controller: StartController
) -> None:
    """App Service and Container Apps: IDENTITY_ENDPOINT and IDENTITY_HEADER (a secret the
    endpoint requires in X-IDENTITY-HEADER; the stand-in refuses a request without it)."""
    env = {"IDENTITY_ENDPOINT": imds.identity_endpoint, "IDENTITY_HEADER": imds.identity_header}
    own_controller(env, chain.ns)
    refused = imds.count("refused")
    azure_policy(chain, "az-app", {"clientID": USER_ASSIGNED})
    chain.wait_condition("policy", "az-app", "Ready", "True", "CredentialsReady", timeout=60)
    issued = imds.was_issued(token(chain, "az-app", AZURE_TOKEN))
    assert issued is not None
    assert (issued.identity, issued.endpoint) == (USER_ASSIGNED, "app-service")
    assert abs(expiration(chain, "az-app") - issued.expires_on) <= 2
    assert imds.count("refused") == refused


def test_controller_identity_is_refused_in_namespaces_not_listed(
    chain: AWSChain,
    imds: ManagedIdentityStandIn,
    metadata: GCEMetadataServer,
    own_controller: StartController,
) -> None:
    """Tenancy: the controller's identity is not every policy author's. Refused before any
    call, with the reason naming the flag, and a Warning Event; it is retried on the backoff
    schedule like any failure, still without calls."""
    own_controller({**imds_env(imds), **metadata_env(metadata)}, "some-other-namespace")
    calls = (imds.count("received"), metadata.count("received"))
    azure_policy(chain, "az", {"clientID": USER_ASSIGNED})
    gcp_policy(chain, "gcp", {})
    for name in ("az", "gcp"):
        refused = chain.wait_condition(
            "policy", name, "Ready", "False", "ControllerIdentityNotAllowed"
        )
        assert CONTROLLER_IDENTITY_FLAG in refused["message"]
        assert chain.ns in refused["message"]
        wait_for(lambda n=name: "RotationFailed" in chain.event_reasons(n), what=f"{name} event")  # type: ignore[misc]
        warning = next(
            e
            for e in chain.events()
            if e["involvedObject"]["name"] == name and e["reason"] == "RotationFailed"
        )
        assert warning["type"] == "Warning"
        assert CONTROLLER_IDENTITY_FLAG in warning["message"]
    wait_for(
        lambda: all(
            int((chain.get("policy", n) or {}).get("status", {}).get("failedAttempts", 0)) >= 3
            for n in ("az", "gcp")
        ),
        timeout=backoff.latest(3) + 20,
        what="retried",
    )
    assert (imds.count("received"), metadata.count("received")) == calls, "no call at all"


def test_a_namespace_taken_off_the_list_is_refused_at_once_on_every_cloud(
    chain: AWSChain,
    sts: STSProxy,
    pod_identity: ContainerCredentials,
    imds: ManagedIdentityStandIn,
    metadata: GCEMetadataServer,
    own_controller: StartController,
    tmp_path: Path,
) -> None:
    """The operator narrows ``--controller-identity-namespaces`` and restarts the controller:
    the AWS, GCP and Azure policies of the namespace taken off the list are refused at once —
    ``Ready`` True with reason ``RotationFailed`` naming the flag, while the credentials already
    served are valid, and a Warning Event — long before their renewal time (55 s after issue),
    without a call to any provider: the reconciler holds every cloud to the list, not each
    source at its next mint. Mutation caught: the identity check left out of the refresh
    decision (GCP and Azure were refused only at their renewal, as before this rule)."""
    role = target_role(chain)
    sts.allow_assume(role, POD_IDENTITY_ROLE)
    env = {
        **imds_env(imds),
        **metadata_env(metadata),
        **pod_identity_env(pod_identity, tmp_path),
    }
    own = own_controller(env, chain.ns)
    late: dict[str, Any] = {"renewBefore": "5s", "jitter": 0}
    chain.create(
        "policy",
        "aws",
        {
            "type": "AWSCredentials",
            "awsCredentials": {"region": "us-east-1", **identity_source(role)},
            "rotation": late,
        },
    )
    gcp_policy(chain, "gcp", {}, late)
    azure_policy(chain, "az", {"clientID": USER_ASSIGNED}, late)
    policies = ("aws", "gcp", "az")
    for name in policies:
        chain.wait_condition("policy", name, "Ready", "True", "CredentialsReady", timeout=60)
    renewals = {}
    for name in policies:
        renewal = ((chain.get("policy", name) or {}).get("status") or {}).get("renewalTime")
        assert renewal is not None, f"{name} has a renewal time"
        renewals[name] = clocks.parse_rfc3339(renewal)
    served = {name: chain.secret_data(rapi.derived_secret_name(name)) for name in policies}
    session = f"rotator.{chain.ns}.aws"

    def calls() -> tuple[int, ...]:
        return (
            pod_identity.count("received"),
            len(sts.calls_of(ASSUME_ROLE, session)),
            metadata.count("received"),
            imds.count("received"),
        )

    before = calls()
    own.restart(f"{CONTROLLER_IDENTITY_FLAG}=some-other-namespace")
    for name in policies:
        refused = chain.wait_condition(
            "policy", name, "Ready", "True", "RotationFailed", timeout=renewals[name] - time.time()
        )
        assert time.time() < renewals[name], f"{name}: refused at once, not at its renewal"
        assert CONTROLLER_IDENTITY_FLAG in refused["message"]
        assert chain.ns in refused["message"]
        assert "valid until" in refused["message"], "what is served stays until it expires"
        wait_for(lambda n=name: "RotationFailed" in chain.event_reasons(n), what=f"{name} event")  # type: ignore[misc]
    assert calls() == before, "no provider heard of them again"
    for name in policies:
        assert chain.secret_data(rapi.derived_secret_name(name)) == served[name], "not renewed"


def test_restart_reuses_the_tokens_of_the_controller_identity(
    chain: AWSChain,
    imds: ManagedIdentityStandIn,
    metadata: GCEMetadataServer,
    own_controller: StartController,
) -> None:
    own = own_controller({**imds_env(imds), **metadata_env(metadata)}, chain.ns)
    azure_policy(chain, "az", {"clientID": USER_ASSIGNED})  # renewed ~40 s after issue
    gcp_policy(chain, "gcp", {})
    azure_policy(chain, "az-unknown", {"clientID": "not-assigned-here"})
    for name in ("az", "gcp"):
        chain.wait_condition("policy", name, "Ready", "True", "CredentialsReady", timeout=60)
    unknown = chain.wait_condition("policy", "az-unknown", "Ready", "False", "ProviderRejected")
    assert "invalid_request" in unknown["message"], "IMDS: Identity not found"
    served = (token(chain, "az", AZURE_TOKEN), token(chain, "gcp", GCP_TOKEN))
    minted = (imds.count("imds_token"), metadata.count("token"))
    own.restart()
    wait_for(own.idle, what="settled after the restart")
    assert (imds.count("imds_token"), metadata.count("token")) == minted, "no new token"
    assert (token(chain, "az", AZURE_TOKEN), token(chain, "gcp", GCP_TOKEN)) == served


def test_outage_backs_off_and_recovers_before_expiry(
    chain: AWSChain,
    imds: ManagedIdentityStandIn,
    metadata: GCEMetadataServer,
    own_controller: StartController,
) -> None:
    """IMDS fails (503) and the metadata server hangs from the first renewal on (10 s after
    issue, 50 s before expiry): Ready stays True (RotationFailed) while the served tokens are
    valid; IMDS is retried on the backoff schedule, one call per attempt; the hung call is cut
    by the provider call deadline (30 s). Once each answers again, a new token is served before
    the old one expires."""
    own_controller({**imds_env(imds), **metadata_env(metadata)}, chain.ns)
    early: dict[str, Any] = {"renewBefore": "50s", "jitter": 0}
    with SecretHistory(chain.api, chain.ns) as history:
        azure_policy(chain, "az", {"clientID": USER_ASSIGNED}, early)
        gcp_policy(chain, "gcp", {}, early)
        for name in ("az", "gcp"):
            chain.wait_condition("policy", name, "Ready", "True", "CredentialsReady", timeout=60)
        imds.set_mode("fail")
        metadata.set_mode("hang")
        failed = imds.count("failed")
        try:
            failing = chain.wait_condition(
                "policy", "az", "Ready", "True", "RotationFailed", timeout=30
            )
            assert "valid until" in failing["message"]
            wait_for(lambda: imds.count("failed") - failed >= 3, timeout=30, what="IMDS retried")
            imds.set_mode("ok")
            released, retries = time.time(), imds.count("failed") - failed
            failing = chain.wait_condition(
                "policy", "gcp", "Ready", "True", "RotationFailed", timeout=50
            )
            assert "no answer within" in failing["message"], "the hung call cut at the deadline"
        finally:
            imds.set_mode("ok")
            metadata.set_mode("ok")
        for name in ("az", "gcp"):
            chain.wait_condition("policy", name, "Ready", "True", "CredentialsReady", timeout=30)
        for name in ("az", "gcp"):
            first, second = history.of(name)[:2]
            assert first.expires_at is not None
            assert second.seen_at < first.expires_at, f"{name}: recovered before expiry"
            print(f"{name}: recovered {first.expires_at - second.seen_at:.1f} s before expiry")
        issued = history.of("az")[0].issued_at
    assert issued is not None
    window = released - (issued - 1 + 10)  # the first renewal: 10 s after issue (whole seconds)
    most = backoff.most_attempts(window)
    print(f"IMDS failing {window:.1f} s: {retries} calls refused; the schedule allows {most}")
    assert retries <= most, "backoff, not a hot loop"
