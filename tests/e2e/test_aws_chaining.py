"""AWS role chaining (``awsCredentials.assumeRole``) against moto behind the STS proxy, which
answers ``AssumeRole`` only when the target role trusts whoever signed the request (the
principal it recorded for the signing key, and the external ID the trust names) and checks the
SigV4 signature of every signed call: the served session is the second role's (its keys work,
``GetCallerIdentity`` says whose they are), it rotates before it expires, it expires with the
earlier link, and a failure of either link is reported with its own reason.

The controller's own identity as a chain's base is tests/e2e/test_aws_identity.py."""

from __future__ import annotations

import functools
import itertools
from typing import Any

import boto3
import pytest

from controllers.reconcilers import api as rapi
from controllers.runtime import clock as clocks
from controllers.runtime import errors
from rotator_devkit.devenv.standins.iam import IAMProxy
from rotator_devkit.devenv.standins.sts import ASSUME, ASSUME_ROLE, STSProxy
from tests.e2e.conftest import ROLE_ARN
from tests.e2e.test_aws import caller, sa_source
from tests.support.chain import AWSChain
from tests.support.history import SecretHistory
from tests.support.polling import wait_for

SECOND_ACCOUNT = "210987654321"
EXTERNAL_ID = "rotator-e2e-external-id"
LIFETIME = 60.0
"""Seconds the STS proxy's sessions live (tests/e2e/conftest.py)."""


def second_role(chain: AWSChain) -> str:
    """A role of another account, one per test: its trust is the test's own."""
    return f"arn:aws:iam::{SECOND_ACCOUNT}:role/bedrock-{chain.ns}"


def assume(role: str, **extra: str) -> dict[str, Any]:
    return {"assumeRole": {"roleArn": role, **extra}}


def iam_user_keys(chain: AWSChain, iam_proxy: IAMProxy) -> tuple[str, str, str]:
    """A new IAM user's ARN and key, created through the IAM proxy (so that the STS proxy knows
    the key, and whose it is, when it signs an ``AssumeRole``)."""
    iam = boto3.client(
        "iam",
        region_name="us-east-1",
        endpoint_url=iam_proxy.url,
        aws_access_key_id="AKIAADMIN0000000",
        aws_secret_access_key="admin-secret-value-123",
    )
    user = iam.create_user(UserName=f"gateway-{chain.ns}")["User"]["Arn"]
    key = iam.create_access_key(UserName=f"gateway-{chain.ns}")["AccessKey"]
    return user, key["AccessKeyId"], key["SecretAccessKey"]


def test_chained_sessions_are_the_second_roles_and_rotate_before_expiry(
    chain: AWSChain, sts: STSProxy, iam_proxy: IAMProxy
) -> None:
    """Two chains, on a ServiceAccount's web identity session and on an IAM user's key from a
    credentials file, each rotated three times with 60 s sessions."""
    role = second_role(chain)
    user, key_id, secret = iam_user_keys(chain, iam_proxy)
    sts.allow_assume(role, ROLE_ARN, user, external_id=EXTERNAL_ID)
    chain.secret(
        "gateway-key",
        credentials=f"[default]\naws_access_key_id = {key_id}\naws_secret_access_key = {secret}\n",
    )
    policies = {
        "sa": {**sa_source("default"), **assume(role, externalID=EXTERNAL_ID)},
        "file": {
            "credentialsFile": {"secretRef": {"name": "gateway-key"}},
            **assume(role, externalID=EXTERNAL_ID, sessionName=f"gateway.{chain.ns}"),
        },
    }
    with SecretHistory(chain.api, chain.ns) as history:
        for name, source in policies.items():
            chain.aws_policy(name, [], source)
        for name in policies:
            chain.wait_condition("policy", name, "Ready", "True", "CredentialsReady", timeout=60)
        for name, session in (("sa", f"rotator.{chain.ns}.sa"), ("file", f"gateway.{chain.ns}")):
            keys = chain.aws_keys(name)
            assert keys is not None
            assert keys.session_token, "a session, not the base's keys"
            assert keys.access_key_id != key_id
            assert (
                caller(sts, keys)
                == f"arn:aws:sts::{SECOND_ACCOUNT}:assumed-role/{role.split('/')[-1]}/{session}"
            )
        wait_for(
            lambda: all(history.count(p) >= 4 for p in policies),
            timeout=200,
            interval=0.5,
            what="three rotations each",
        )
    for name in policies:
        for previous, following in itertools.pairwise(history.of(name)):
            assert previous.expires_at is not None
            margin = previous.expires_at - following.seen_at
            print(f"{name}: replaced {margin:.1f} s before expiry")
            assert margin > 0, "replaced before it expired"
    chained = sts.calls_of(ASSUME_ROLE, f"rotator.{chain.ns}.sa")
    assert len(chained) >= 4, "each rotation assumed the second role again"
    assert len(sts.calls_of(ASSUME, f"rotator.{chain.ns}.sa")) >= 4, "on a fresh base session"
    keys = chain.aws_keys("sa")
    assert keys is not None
    assert caller(sts, keys).startswith(f"arn:aws:sts::{SECOND_ACCOUNT}:assumed-role/")


@pytest.mark.parametrize(
    ("chained_lifetime", "served_lifetime"),
    [(90, LIFETIME), (40, 40.0)],
    ids=["the-base-expires-first", "the-chained-session-expires-first"],
)
def test_the_served_session_expires_with_the_earlier_link(
    chain: AWSChain, sts: STSProxy, chained_lifetime: int, served_lifetime: float
) -> None:
    role = second_role(chain)
    sts.allow_assume(role, ROLE_ARN)
    sts.chained_lifetime = chained_lifetime
    try:
        chain.aws_policy("p", [], {**sa_source("default"), **assume(role)})
        chain.wait_condition("policy", "p", "Ready", "True", "CredentialsReady", timeout=60)
    finally:
        sts.chained_lifetime = None
    secret = chain.get("secret", rapi.derived_secret_name("p"))
    assert secret is not None
    annotations = secret["metadata"]["annotations"]
    issued = clocks.parse_rfc3339(annotations[rapi.ISSUED_AT_ANNOTATION])
    expires = clocks.parse_rfc3339(annotations[rapi.EXPIRATION_ANNOTATION])
    print(f"\nbase {LIFETIME:.0f} s, chained {chained_lifetime} s: served {expires - issued:.0f} s")
    assert abs((expires - issued) - served_lifetime) <= 2


def warned(chain: AWSChain, name: str) -> bool:
    return rapi.REASON_ASSUME_ROLE_FAILED in chain.event_reasons(name)


def test_a_failure_of_either_link_is_reported_with_its_own_reason(
    chain: AWSChain, sts: STSProxy
) -> None:
    """The base refused (a role that does not trust the ServiceAccount's token): the base's
    reason, and no ``AssumeRole`` is tried. The chained role refused (a wrong external ID; a
    role that does not trust the base): ``AssumeRoleFailed``, naming the role and the code."""
    role = second_role(chain)
    sts.allow_assume(role, ROLE_ARN, external_id=EXTERNAL_ID)
    untrusting = f"arn:aws:iam::{SECOND_ACCOUNT}:role/trusts-nobody-{chain.ns}"
    not_trusted = "arn:aws:iam::123456789012:role/not-trusted"
    chain.aws_policy(
        "base",
        [],
        {**sa_source("default", role=not_trusted), **assume(role, externalID=EXTERNAL_ID)},
    )
    chain.aws_policy(
        "external-id", [], {**sa_source("default"), **assume(role, externalID="wrong-id")}
    )
    chain.aws_policy("untrusted", [], {**sa_source("default"), **assume(untrusting)})
    base = chain.wait_condition("policy", "base", "Ready", "False", "ProviderRejected", timeout=60)
    assert base["message"] == "aws-sts AssumeRoleWithWebIdentity failed: AccessDenied"
    for name, target in (("external-id", role), ("untrusted", untrusting)):
        ready = chain.wait_condition(
            "policy", name, "Ready", "False", rapi.REASON_ASSUME_ROLE_FAILED, timeout=60
        )
        assert ready["message"] == f"assumeRole {target}: aws-sts AssumeRole failed: AccessDenied"
        wait_for(functools.partial(warned, chain, name), what=f"{name}: Warning Event")
    assert sts.calls_of(ASSUME_ROLE, f"rotator.{chain.ns}.base") == [], "no second link tried"
    assert sts.calls_of(ASSUME, f"rotator.{chain.ns}.external-id"), "the base link was made"


@pytest.mark.oldest_kubernetes
@pytest.mark.parametrize(
    ("aws", "message"),
    [
        pytest.param(
            {"controllerIdentity": {}},
            "controllerIdentity needs assumeRole",
            id="controller-identity-needs-assume-role",
        ),
        pytest.param(
            {
                "iamAccessKey": {"userName": "u", "secretRef": {"name": "s"}},
                **assume(ROLE_ARN),
            },
            "assumeRole cannot be chained on iamAccessKey",
            id="no-chain-on-iam-keys",
        ),
        pytest.param(
            {"controllerIdentity": {}, **sa_source("default"), **assume(ROLE_ARN)},
            "set exactly one AWS credential source",
            id="one-source",
        ),
        pytest.param(
            {**sa_source("default"), **assume(ROLE_ARN, sessionDuration="13h")},
            "sessionDuration must be between 15m and 12h",
            id="session-duration",
        ),
        pytest.param(
            {**sa_source("default"), **assume("arn:aws:iam::123:role/x")},
            "roleArn",
            id="role-arn",
        ),
    ],
)
def test_the_crd_refuses_what_cannot_be_chained(
    chain: AWSChain, aws: dict[str, Any], message: str
) -> None:
    doc = {
        "apiVersion": rapi.API_VERSION,
        "kind": "BackendSecurityPolicy",
        "metadata": {"name": "x"},
        "spec": {"type": "AWSCredentials", "awsCredentials": {"region": "us-east-1", **aws}},
    }
    with pytest.raises(errors.Invalid) as raised:
        chain.api.request(
            "POST", rapi.POLICIES.path(namespace=chain.ns), query=[("dryRun", "All")], body=doc
        )
    assert message in str(raised.value)
