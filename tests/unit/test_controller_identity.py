"""The controller's own identity as a credential source: the tenancy gate, which the policy
reconciler holds every source to alike (before any provider call, and at once for a credential
served under an earlier list), workload or managed identity chosen from the environment, how managed identity and
Application Default Credentials failures are classified, and ADC looked for once however many
policies mint at the same time."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import google.auth.credentials
import google.auth.exceptions
import pytest
from azure.core.exceptions import ClientAuthenticationError
from azure.identity import CredentialUnavailableError

from controllers.reconcilers import api, derived
from controllers.reconcilers.credentialsources import (
    CONTROLLER_IDENTITY_FLAG,
    ControllerIdentityNotAllowed,
    CredentialSource,
    SourceContext,
    controller_identity_refusal,
    parse_controller_identity_namespaces,
)
from controllers.reconcilers.credentialsources.aws import AWSCredentialsSource
from controllers.reconcilers.credentialsources.azure import AzureCredentialsSource
from controllers.reconcilers.credentialsources.gcp import GCPCredentialsSource
from controllers.reconcilers.tokens import ServiceAccountTokens
from controllers.runtime import clock as clocks
from controllers.runtime import objects
from controllers.runtime.reconcile import Request
from rotator import errors, oidc
from rotator.credentials import Credential
from rotator.lazy import Lazy
from rotator.observe import NoObserver
from rotator.providercalls import Failure
from rotator.providers import azure
from rotator.providers.aws.identity import ControllerIdentity
from rotator.providers.gcp import adc
from rotator.providers.gcp.common import DATA_KEY, Endpoints, Transport
from tests.support import policyworld
from tests.support.refusing import refusing

SCOPE = "https://cognitiveservices.azure.com/.default"
LATER = datetime.datetime(2030, 1, 1, 12, 0, 0)  # google-auth's naive UTC


def policy(namespace: str, spec: dict[str, Any]) -> api.Policy:
    return cast(
        api.Policy,
        {
            "apiVersion": api.API_VERSION,
            "kind": "BackendSecurityPolicy",
            "metadata": {"name": "p", "namespace": namespace, "uid": "u"},
            "spec": spec,
        },
    )


def context(namespace: str, spec: dict[str, Any]) -> SourceContext:
    return SourceContext(policy(namespace, spec), lambda _: None)


AZURE_SPEC = {
    "type": "AzureCredentials",
    "azureCredentials": {"scope": SCOPE, "controllerIdentity": {"clientID": "uai"}},
}
GCP_SPEC = {
    "type": "GCPCredentials",
    "gcpCredentials": {"projectName": "p", "region": "r", "controllerIdentity": {}},
}


# --- the tenancy gate ----------------------------------------------------------------------------


def test_the_flag_lists_namespaces_and_defaults_to_none() -> None:
    assert parse_controller_identity_namespaces("") == frozenset()
    assert parse_controller_identity_namespaces(" team-a, team-b ,,") == {"team-a", "team-b"}
    assert parse_controller_identity_namespaces("*") == {"*"}


@pytest.mark.parametrize(
    ("allowed", "namespace", "ok"),
    [
        (frozenset(), "team-a", False),
        ({"team-b"}, "team-a", False),
        ({"team-a", "team-b"}, "team-a", True),
        ({"*"}, "anything", True),
        ({"team-*"}, "team-a", False),  # no patterns: * alone means all
    ],
)
def test_only_listed_namespaces_may_use_the_controller_identity(
    allowed: frozenset[str], namespace: str, ok: bool
) -> None:
    refusal = controller_identity_refusal(allowed, namespace)
    if ok:
        assert refusal is None
        return
    assert isinstance(refusal, ControllerIdentityNotAllowed)
    assert isinstance(refusal, errors.InvalidInput), "permanent until the flag changes"
    assert refusal.reason == "ControllerIdentityNotAllowed"
    assert CONTROLLER_IDENTITY_FLAG in str(refusal)
    assert namespace in str(refusal)


class FakeAzure:
    def __init__(self) -> None:
        self.calls: list[tuple[str | None, str]] = []

    def controller_identity(self, *, client_id: str | None, scope: str) -> Credential:
        self.calls.append((client_id, scope))
        return Credential({azure.DATA_KEY: b"token"}, expires_at=100.0)


def azure_source(fake: FakeAzure) -> AzureCredentialsSource:
    return AzureCredentialsSource(
        azure=cast(azure.Azure, fake),
        tokens=refusing(oidc.TokenSource),
        service_accounts=refusing(ServiceAccountTokens),
    )


def test_azure_controller_identity_asks_for_the_scope_with_the_client_id() -> None:
    fake = FakeAzure()
    source = azure_source(fake)
    assert source.obtain(context("team-a", AZURE_SPEC)).expires_at == 100.0
    assert fake.calls == [("uai", SCOPE)]
    assert source.secret_refs(cast(api.PolicySpec, AZURE_SPEC)) == []
    assert source.calls_provider(cast(api.PolicySpec, AZURE_SPEC))


class FakeGoogleCredentials(google.auth.credentials.Credentials):
    """What ``google.auth.default`` finds; each refresh is a new token."""

    refreshes = 0

    def refresh(self, request: Any) -> None:
        FakeGoogleCredentials.refreshes += 1
        self.token = f"ya29.fake-{FakeGoogleCredentials.refreshes}"
        self.expiry = LATER


class Finder:
    """A ``google.auth.default`` that counts its looks and may block or fail."""

    def __init__(self, *, fail: bool = False) -> None:
        self.looks = 0
        self.fail = fail
        self.release = threading.Event()
        self.release.set()
        self.entered = threading.Event()

    def __call__(
        self, *, scopes: Sequence[str], request: Any
    ) -> tuple[google.auth.credentials.Credentials, str | None]:
        assert list(scopes) == ["https://www.googleapis.com/auth/cloud-platform"]
        self.looks += 1
        self.entered.set()
        self.release.wait(10)
        if self.fail:
            raise google.auth.exceptions.DefaultCredentialsError("not found")
        return FakeGoogleCredentials(), "project"


def gcp_source(finder: Finder) -> GCPCredentialsSource:
    return GCPCredentialsSource(
        transport=Transport(NoObserver()),
        endpoints=Endpoints(),
        tokens=refusing(oidc.TokenSource),
        service_accounts=refusing(ServiceAccountTokens),
        application_default=adc.ApplicationDefault(NoObserver(), find=finder),
    )


def test_gcp_controller_identity_tokens_carry_google_expiry_and_adc_is_found_once() -> None:
    finder = Finder()
    source = gcp_source(finder)
    first = source.obtain(context("team-a", GCP_SPEC))
    second = source.obtain(context("team-b", GCP_SPEC))
    assert first.data[DATA_KEY] != second.data[DATA_KEY], "a fresh token each time"
    assert first.expires_at == LATER.replace(tzinfo=datetime.UTC).timestamp()
    assert finder.looks == 1


def test_mints_that_come_during_the_look_wait_for_it() -> None:
    finder = Finder()
    finder.release.clear()
    found = adc.ApplicationDefault(NoObserver(), find=finder)
    tokens: list[str] = []

    def mint() -> None:
        tokens.append(found.token()[0])

    threads = [threading.Thread(target=mint) for _ in range(4)]
    for t in threads:
        t.start()
    assert finder.entered.wait(10)
    finder.release.set()
    for t in threads:
        t.join(10)
    assert finder.looks == 1, "one look for all"
    assert len(set(tokens)) == 4, "each mint its own token"


def test_a_failed_look_fails_its_waiters_and_is_tried_again() -> None:
    finder = Finder(fail=True)
    finder.release.clear()
    found = adc.ApplicationDefault(NoObserver(), find=finder)
    outcomes: list[BaseException] = []

    def mint() -> None:
        try:
            found.token()
        except errors.CredentialError as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=mint) for _ in range(3)]
    for t in threads:
        t.start()
    assert finder.entered.wait(10)
    finder.release.set()
    for t in threads:
        t.join(10)
    assert len(outcomes) == 3
    assert all(isinstance(e, errors.ProviderUnavailable) for e in outcomes), "retried"
    assert {getattr(e, "code", None) for e in outcomes} == {"NoDefaultCredentials"}
    finder.fail = False
    assert found.token()[0].startswith("ya29."), "the next mint looks again"


# --- the gate, held by the policy reconciler for every cloud alike -----------------------------

NS_A = "team-a"
NOW = 1_700_000_000.0
AWS_SPEC = {
    "type": "AWSCredentials",
    "awsCredentials": {
        "region": "us-east-1",
        "controllerIdentity": {},
        "assumeRole": {"roleArn": "arn:aws:iam::123456789012:role/r", "sessionDuration": "1h"},
    },
}


@dataclass
class Cloud:
    """A real source of one cloud, over a fake that counts the calls its identity makes."""

    spec: dict[str, Any]
    source: CredentialSource
    calls: Callable[[], int]


def aws_cloud() -> Cloud:
    built: list[int] = []

    def identity() -> ControllerIdentity:
        built.append(1)
        raise AssertionError("the controller's own AWS identity was used")

    source = AWSCredentialsSource(
        clients=refusing("AWS clients"),
        tokens=refusing(oidc.TokenSource),
        service_accounts=refusing(ServiceAccountTokens),
        identity=Lazy(identity),
    )
    return Cloud(AWS_SPEC, source, lambda: len(built))


def gcp_cloud() -> Cloud:
    finder = Finder()
    return Cloud(GCP_SPEC, gcp_source(finder), lambda: finder.looks)


def azure_cloud() -> Cloud:
    fake = FakeAzure()
    return Cloud(AZURE_SPEC, azure_source(fake), lambda: len(fake.calls))


CLOUDS = pytest.mark.parametrize(
    "make", [aws_cloud, gcp_cloud, azure_cloud], ids=["aws", "gcp", "azure"]
)


class Reconciling:
    """The policy reconciler over one cloud's source, an in-memory API server
    (tests/support/memapi.py) and a fake clock; the policy ``p`` in namespace ``team-a``."""

    def __init__(self, cloud: Cloud, namespaces: frozenset[str]) -> None:
        world = policyworld.policy_world(
            NS_A,
            cloud.spec,
            {cloud.spec["type"]: cloud.source},  # an identity spec reads no Secret
            clock=clocks.FakeClock(NOW),
            controller_identity_namespaces=namespaces,
        )
        self.api, self.events, self.registry = world.api, world.events, world.registry
        self.managed, self.policy, self.reconciler = world.managed, world.policy, world.reconciler

    def serve(self) -> None:
        """A fresh credential, minted under an earlier list: issued a minute ago, for an hour."""
        credential = Credential({"token": b"t"}, expires_at=NOW + 3540, issued_at=NOW - 60)
        secret = derived.build(cast(api.Policy, self.policy), credential, minted=True)
        self.api.put(objects.SECRETS, secret, field_manager=api.FIELD_MANAGER)

    def reconcile(self) -> float | None:
        return self.reconciler.reconcile(Request(NS_A, "p")).requeue_after

    def ready(self) -> dict[str, Any]:
        (*_, last) = self.api.writes_to(api.POLICIES, subresource="status")
        return next(c for c in last.status["conditions"] if c["type"] == api.READY)

    def secret_writes(self) -> list[Any]:
        """The derived Secret's writes, as sent."""
        return [w.body for w in self.api.writes_to(objects.SECRETS)]

    def failures(self) -> float | None:
        kind = self.policy["spec"]["type"]
        labels = {"type": kind, "result": "failure"}
        return self.registry.get_sample_value("rotator_rotations_total", labels)


@CLOUDS
def test_each_source_says_which_specs_wear_the_controller_identity(
    make: Callable[[], Cloud],
) -> None:
    cloud = make()
    assert cloud.source.uses_controller_identity(cast(api.PolicySpec, cloud.spec))
    block = api.CREDENTIAL_BLOCKS[cloud.spec["type"]]
    other = {k: v for k, v in cloud.spec[block].items() if k != "controllerIdentity"}
    spec = cast(api.PolicySpec, {**cloud.spec, block: other})
    assert not cloud.source.uses_controller_identity(spec)


@CLOUDS
@pytest.mark.parametrize("namespaces", [frozenset(), frozenset({"team-b"})])
def test_each_cloud_is_refused_outside_the_listed_namespaces_before_any_call(
    make: Callable[[], Cloud], namespaces: frozenset[str]
) -> None:
    cloud = make()
    world = Reconciling(cloud, namespaces)
    delay = world.reconcile()
    ready = world.ready()
    assert (ready["status"], ready["reason"]) == ("False", "ControllerIdentityNotAllowed")
    assert CONTROLLER_IDENTITY_FLAG in ready["message"]
    assert NS_A in ready["message"]
    assert ("Warning", "ControllerIdentityNotAllowed") in [e[:2] for e in world.events.events]
    assert cloud.calls() == 0, "no provider call"
    assert world.secret_writes() == []
    assert world.failures() == 1.0, "a refused refresh counts as a failed rotation"
    assert delay is not None
    assert delay > 0, "retried with backoff"


@CLOUDS
def test_a_credential_served_under_an_earlier_list_is_refused_at_once(
    make: Callable[[], Cloud],
) -> None:
    """The namespace was taken off the list while its credential is fresh: refused now, not at
    its renewal (40 min away) — and never renewed. Mutation caught: the identity check left out
    of the decision (the credential kept until its renewal time, as GCP and Azure once did)."""
    cloud = make()
    world = Reconciling(cloud, frozenset({"team-b"}))
    world.serve()
    delay = world.reconcile()
    ready = world.ready()
    assert (ready["status"], ready["reason"]) == ("True", "RotationFailed"), "still valid"
    assert CONTROLLER_IDENTITY_FLAG in ready["message"]
    assert ("Warning", "RotationFailed") in [e[:2] for e in world.events.events]
    assert cloud.calls() == 0, "no provider call"
    assert world.secret_writes() == [], "the served credential stays until it expires"
    assert delay is not None
    assert delay <= 3540


@CLOUDS
def test_a_credential_served_in_a_listed_namespace_is_kept_until_its_renewal(
    make: Callable[[], Cloud],
) -> None:
    cloud = make()
    world = Reconciling(cloud, frozenset({NS_A}))
    world.serve()
    delay = world.reconcile()
    assert (world.ready()["status"], world.ready()["reason"]) == ("True", "CredentialsReady")
    assert cloud.calls() == 0
    assert delay is not None
    assert delay > 600, "renewed on its schedule"


# --- workload or managed identity --------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "client_id", "missing"),
    [
        ({"AZURE_FEDERATED_TOKEN_FILE": "/t"}, None, "AZURE_TENANT_ID and AZURE_CLIENT_ID"),
        ({"AZURE_FEDERATED_TOKEN_FILE": "/t", "AZURE_CLIENT_ID": "c"}, None, "AZURE_TENANT_ID"),
        ({"AZURE_FEDERATED_TOKEN_FILE": "/t", "AZURE_TENANT_ID": "t"}, None, "AZURE_CLIENT_ID"),
    ],
)
def test_workload_identity_without_its_ids_says_which_are_missing(
    environ: dict[str, str], client_id: str | None, missing: str
) -> None:
    client = azure.Azure(NoObserver(), environ=environ)
    with pytest.raises(errors.InvalidInput) as raised:
        client.controller_identity(client_id=client_id, scope=SCOPE)
    assert str(raised.value).endswith(
        f"but not {missing}: see its pod's azure.workload.identity labels"
    )


# --- classification ----------------------------------------------------------------------------


def unavailable(detail: str) -> CredentialUnavailableError:
    return CredentialUnavailableError(
        message=f"ManagedIdentityCredential authentication unavailable. {detail}"
    )


@pytest.mark.parametrize(
    ("exc", "failure"),
    [
        pytest.param(
            unavailable("Token request error: (invalid_request) Identity not found"),
            Failure("invalid_request", False, "invalid_request (no such identity here?)"),
            id="imds-identity-not-found",
        ),
        pytest.param(
            unavailable("Token request error: (temporarily_unavailable) "),
            Failure("temporarily_unavailable", True),
            id="imds-unavailable",
        ),
        pytest.param(
            unavailable("Token request error: (invalid_scope) 503, unavailable"),
            Failure("503", True),
            id="app-service-503",
        ),
        pytest.param(
            unavailable("Token request error: (invalid_scope) 429, slow down"),
            Failure("429", True),
            id="app-service-429",
        ),
        pytest.param(
            unavailable("Token request error: (invalid_scope) 401, wrong header"),
            Failure("invalid_scope", False),
            id="app-service-401",
        ),
        pytest.param(
            unavailable("no response from the IMDS endpoint."),
            Failure("unreachable", True),
            id="no-answer",
        ),
        pytest.param(
            ClientAuthenticationError(message="AADSTS700213: No matching federated identity"),
            Failure("unreachable", True),
            id="not-a-managed-identity-answer",
        ),
    ],
)
def test_managed_identity_failures(exc: Exception, failure: Failure) -> None:
    assert azure.classify_managed_identity(exc) == failure


def test_an_unreadable_federated_token_file_is_transient() -> None:
    failure = azure.classify(FileNotFoundError(2, "No such file", "/var/run/secrets/token"))
    assert failure == Failure("FileNotFoundError", True, "federated token file unreadable")


def metadata_error(text: str) -> google.auth.exceptions.RefreshError:
    return google.auth.exceptions.RefreshError(google.auth.exceptions.TransportError(text))


@pytest.mark.parametrize(
    ("exc", "code", "transient"),
    [
        (google.auth.exceptions.DefaultCredentialsError("not found"), "NoDefaultCredentials", True),
        (metadata_error("Failed ... Response status: 503\nResponse details:"), "503", True),
        (metadata_error("Failed ... Status: 429 Response:\nb''"), "429", True),
        (metadata_error("Failed ... Status: 403 Response:\nb'Missing header'"), "403", False),
        (metadata_error("Failed ... Status: 404 Response:\nb''"), "404", False),
        (metadata_error("Failed ... Last exception: timed out"), "TransportError", True),
        (google.auth.exceptions.TransportError("connection refused"), "TransportError", True),
        (
            google.auth.exceptions.RefreshError("invalid_grant: bad", {"error": "invalid_grant"}),
            "invalid_grant",
            False,
        ),
    ],
)
def test_application_default_credentials_failures(
    exc: Exception, code: str, transient: bool
) -> None:
    failure = adc.classify_adc(exc)
    assert failure is not None
    assert (failure.code, failure.transient) == (code, transient)
    assert "Response" not in (failure.shown or ""), "never a response body"
