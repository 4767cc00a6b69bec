"""AWS role chaining and the controller's own identity, without a network: the chained session
expires with the earlier link, a failure of the ``AssumeRole`` link has its own reason and keeps
the provider's code, the controller identity is botocore's default chain (expiry read from its
refreshable credentials, errors classified), and the AWS source refuses the controller identity
outside the listed namespaces before calling anything. The e2e counterparts, against moto behind
the verifying STS proxy, are tests/e2e/test_aws_chaining.py and test_aws_identity.py."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any, NoReturn, cast

import botocore.credentials
import botocore.exceptions
import botocore.session
import pytest

from controllers.reconcilers import api
from controllers.reconcilers.credentialsources import SourceContext, rotation_settings
from controllers.reconcilers.credentialsources.aws import AWSCredentialsSource
from rotator import errors, formats, oidc
from rotator.credentials import Credential
from rotator.observe import NoObserver
from rotator.providers.aws import identity, sts
from rotator.providers.aws.clients import Clients

ROLE = "arn:aws:iam::210987654321:role/bedrock-invoke"
NOW = 1_800_000_000.0
BASE = sts.Session(formats.AWSKeys("ASIABASE", "base-secret", "base-token"), NOW + 600)


def at(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=UTC)


def answer(expires_at: float, key: str = "ASIACHAINED") -> dict[str, Any]:
    return {
        "Credentials": {
            "AccessKeyId": key,
            "SecretAccessKey": "chained-secret",
            "SessionToken": "chained-token",
            "Expiration": at(expires_at),
        }
    }


class FakeSTS:
    """What ``Clients.signed`` returns for STS: records the calls, answers or raises."""

    def __init__(self, result: dict[str, Any] | Exception) -> None:
        self.result = result
        self.calls: list[dict[str, Any]] = []

    def assume_role(self, **params: Any) -> dict[str, Any]:
        self.calls.append(params)
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


class FakeClients(Clients):
    def __init__(self, fake: FakeSTS) -> None:
        super().__init__(NoObserver())
        self.fake = fake
        self.signed_with: list[tuple[str, str, str | None]] = []

    def signed(
        self,
        service: str,
        region: str,
        access_key_id: str,
        secret_access_key: str,
        session_token: str | None = None,
    ) -> Any:
        self.signed_with.append((access_key_id, secret_access_key, session_token))
        return self.fake


def client_error(code: str, status: int) -> botocore.exceptions.ClientError:
    response: Any = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return botocore.exceptions.ClientError(response, "AssumeRole")


def chain(result: dict[str, Any] | Exception, base: sts.Session = BASE) -> sts.Session:
    clients = FakeClients(FakeSTS(result))
    return sts.assume_role(
        clients, base, sts.ChainedRole(ROLE, "rotator.ns.p", 3600), region="us-east-1"
    )


def test_the_chained_session_is_signed_by_the_base_and_expires_with_the_earlier_link() -> None:
    fake = FakeSTS(answer(NOW + 3600))
    clients = FakeClients(fake)
    role = sts.ChainedRole(ROLE, "rotator.ns.p", 3600, external_id="ext-42")
    got = sts.assume_role(clients, BASE, role, region="us-east-1")
    assert clients.signed_with == [("ASIABASE", "base-secret", "base-token")]
    assert fake.calls == [
        {
            "RoleArn": ROLE,
            "RoleSessionName": "rotator.ns.p",
            "DurationSeconds": 3600,
            "ExternalId": "ext-42",
        }
    ]
    assert got.keys.access_key_id == "ASIACHAINED"
    assert got.expires_at == NOW + 600, "the base expires first"
    assert chain(answer(NOW + 300)).expires_at == NOW + 300, "the chained session expires first"
    static = sts.Session(formats.AWSKeys("AKIAUSER", "user-secret"))
    assert chain(answer(NOW + 900), base=static).expires_at == NOW + 900, "keys never expire"


def test_no_external_id_is_sent_when_none_is_set() -> None:
    fake = FakeSTS(answer(NOW + 900))
    sts.assume_role(FakeClients(fake), BASE, sts.ChainedRole(ROLE, "s", 900), region="us-east-1")
    assert "ExternalId" not in fake.calls[0]


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [
        ("AccessDenied", 403, errors.ProviderRejected),
        ("Throttling", 400, errors.ProviderUnavailable),
        ("InternalFailure", 500, errors.ProviderUnavailable),
    ],
)
def test_a_failed_assume_role_link_has_its_own_reason_and_keeps_the_code(
    code: str, status: int, kind: type[errors.CredentialError]
) -> None:
    with pytest.raises(kind) as raised:
        chain(client_error(code, status))
    assert raised.value.reason == api.REASON_ASSUME_ROLE_FAILED == "AssumeRoleFailed"
    assert raised.value.code == code
    assert str(raised.value) == f"assumeRole {ROLE}: aws-sts AssumeRole failed: {code}"


# --- the controller's identity: botocore's default chain --------------------------------------


class FakeSession:
    """A botocore session whose default chain finds ``found`` (or raises it)."""

    def __init__(self, found: botocore.credentials.Credentials | Exception | None) -> None:
        self.found = found
        self.lookups = 0

    def get_credentials(self) -> botocore.credentials.Credentials | None:
        self.lookups += 1
        if isinstance(self.found, Exception):
            raise self.found
        return self.found


def controller_identity(session: FakeSession) -> identity.ControllerIdentity:
    return identity.ControllerIdentity(
        Clients(NoObserver()), session_factory=lambda: cast(botocore.session.Session, session)
    )


def refreshable(expires_at: float, refresh: Any) -> botocore.credentials.RefreshableCredentials:
    return botocore.credentials.RefreshableCredentials(
        access_key="ASIAPOD",
        secret_key="pod-secret",
        token="pod-token",
        expiry_time=at(expires_at),
        refresh_using=refresh,
        method="container-role",
    )


def test_refreshable_credentials_come_with_their_expiry_static_ones_without() -> None:
    """Pins the botocore attribute the expiry is read from (``_expiry_time``, no public
    accessor): were it renamed, chained sessions would silently lose their base's expiry."""
    later = datetime.now(tz=UTC).timestamp() + 3600  # outside botocore's refresh windows
    session = controller_identity(FakeSession(refreshable(later, lambda: None))).session()
    assert session.keys == formats.AWSKeys("ASIAPOD", "pod-secret", "pod-token")
    assert session.expires_at == pytest.approx(later)
    static = botocore.credentials.Credentials("AKIAENV", "env-secret", method="env")
    assert controller_identity(FakeSession(static)).session().expires_at is None


def test_credentials_due_for_refresh_are_refreshed_and_the_new_expiry_reported() -> None:
    now = datetime.now(tz=UTC).timestamp()

    def refresh() -> dict[str, str]:
        return {
            "access_key": "ASIAFRESH",
            "secret_key": "fresh-secret",
            "token": "fresh-token",
            "expiry_time": at(now + 60).isoformat(),
        }

    session = controller_identity(FakeSession(refreshable(now + 30, refresh))).session()
    assert session.keys.access_key_id == "ASIAFRESH"
    assert session.expires_at == pytest.approx(now + 60, abs=1)


def test_no_credentials_found_is_reported_and_looked_up_again() -> None:
    fake = FakeSession(None)
    source = controller_identity(fake)
    for _ in range(2):
        with pytest.raises(identity.NoIdentity) as raised:
            source.session()
        assert raised.value.reason == "ControllerIdentityNotFound"
    assert fake.lookups == 2, "a chain that found nothing is not cached"


def failing_refresh(exc: Exception) -> Any:
    def refresh() -> NoReturn:
        raise exc

    return refresh


@pytest.mark.parametrize(
    ("exc", "kind", "code"),
    [
        (
            botocore.exceptions.CredentialRetrievalError(provider="container-role", error_msg="x"),
            errors.ProviderUnavailable,
            "CredentialRetrievalError",
        ),
        (client_error("AccessDenied", 403), errors.ProviderRejected, "AccessDenied"),
        (ValueError("Unsupported host"), errors.ProviderRejected, "ValueError"),
        (RuntimeError("still expired"), errors.ProviderUnavailable, "RuntimeError"),
    ],
)
def test_a_failing_chain_is_classified_with_its_code_and_no_detail(
    exc: Exception, kind: type[errors.CredentialError], code: str
) -> None:
    now = datetime.now(tz=UTC).timestamp()
    expiring = refreshable(now + 30, failing_refresh(exc))  # in botocore's mandatory window
    with pytest.raises(kind) as raised:
        controller_identity(FakeSession(expiring)).session()
    assert raised.value.code == code
    assert str(raised.value) == f"aws-identity DefaultCredentialChain failed: {code}"


# --- the AWS source ------------------------------------------------------------------------------


class NoIdentityCalls(identity.ControllerIdentity):
    def __init__(self) -> None:
        super().__init__(Clients(NoObserver()))
        self.calls = 0

    def session(self) -> sts.Session:
        self.calls += 1
        raise AssertionError("the controller identity was used")


def policy(aws: dict[str, Any], namespace: str = "team-a") -> api.Policy:
    return {
        "apiVersion": api.API_VERSION,
        "kind": "BackendSecurityPolicy",
        "metadata": {"name": "p", "namespace": namespace, "uid": "u-1"},
        "spec": {"type": "AWSCredentials", "awsCredentials": {"region": "us-east-1", **aws}},  # type: ignore[typeddict-item]
    }


CHAINED_IDENTITY = {
    "controllerIdentity": {},
    "assumeRole": {"roleArn": ROLE, "sessionDuration": "1h"},
}


def source(
    ident: identity.ControllerIdentity, clients: Clients | None = None
) -> AWSCredentialsSource:
    return AWSCredentialsSource(
        clients=clients or Clients(NoObserver()),
        tokens=oidc.TokenSource(observer=NoObserver()),
        service_accounts=None,  # type: ignore[arg-type]  # never reached here
        identity=ident,
    )


def ctx(p: api.Policy, current: Credential | None = None, secrets: Any = None) -> SourceContext:
    return SourceContext(
        p,
        secrets or (lambda name: None),
        now=NOW,
        current=current,
        settings=rotation_settings(p["spec"]),
    )


def test_a_listed_namespace_gets_a_session_of_the_role_never_the_controller_keys() -> None:
    fake = FakeSTS(answer(NOW + 3600))
    clients = FakeClients(fake)

    class Controller(identity.ControllerIdentity):
        def session(self) -> sts.Session:
            return BASE

    got = source(Controller(clients), clients).obtain(ctx(policy(CHAINED_IDENTITY)))
    text = got.data["credentials"].decode()
    assert "ASIACHAINED" in text
    assert "ASIABASE" not in text
    assert "base-secret" not in text
    assert got.expires_at == BASE.expires_at
    assert fake.calls[0]["RoleSessionName"] == "rotator.team-a.p"


def test_a_credentials_file_with_assume_role_is_minted_from_the_file_keys() -> None:
    file = "[default]\naws_access_key_id = AKIAUSER\naws_secret_access_key = user-secret\n"
    secrets = {"aws": {"credentials": base64.b64encode(file.encode()).decode()}}
    spec = {
        "credentialsFile": {
            "secretRef": {"name": "aws", "key": "credentials"},
            "profile": "default",
        },
        "assumeRole": {"roleArn": ROLE, "sessionName": "gateway", "sessionDuration": "15m"},
    }
    fake = FakeSTS(answer(NOW + 900))
    clients = FakeClients(fake)
    src = source(NoIdentityCalls(), clients)
    p = policy(spec)
    assert src.calls_provider(p["spec"]), "minted: a chain is a provider call"
    assert not src.calls_provider(policy({"credentialsFile": spec["credentialsFile"]})["spec"])
    got = src.obtain(ctx(p, secrets=secrets.get))
    assert clients.signed_with == [("AKIAUSER", "user-secret", None)]
    assert fake.calls[0]["RoleSessionName"] == "gateway"
    assert fake.calls[0]["DurationSeconds"] == 900
    assert got.expires_at == NOW + 900
