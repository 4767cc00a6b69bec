"""The AWS stand-ins check signatures, so that "the served credential works" means it: moto's
GetCallerIdentity looks up the access key id alone, and would answer for a wrong secret key or
session token; the STS proxy recomputes the SigV4 signature with the secret it issued and
compares the session token (devkit/rotator_devkit/devenv/standins/aws.py).

Each test starts from the positive control (the right keys pass) and shows moto alone accepting
the wrong ones, so that the refusals are the proxy's doing.

Mutation-tested: with the signature check skipped (``verify`` returning before ``_signature``)
the wrong secret keys pass and both tests fail; with the session-token comparison removed the
wrong and missing tokens pass and the session test fails.
"""

from __future__ import annotations

import uuid
from typing import Any

import boto3
import botocore.config
import pytest
from botocore.exceptions import ClientError

from rotator import formats
from rotator_devkit.devenv.standins.iam import IAMProxy
from rotator_devkit.devenv.standins.sts import STSProxy
from tests.e2e.test_aws import sa_source
from tests.support.chain import AWSChain

ACCOUNT = "123456789012"


def client(service: str, endpoint: str, keys: formats.AWSKeys) -> Any:
    return boto3.client(
        service,
        region_name="us-east-1",
        endpoint_url=endpoint,
        aws_access_key_id=keys.access_key_id,
        aws_secret_access_key=keys.secret_access_key,
        aws_session_token=keys.session_token,
        config=botocore.config.Config(retries={"total_max_attempts": 1}),
    )


def arn(endpoint: str, keys: formats.AWSKeys) -> str:
    return str(client("sts", endpoint, keys).get_caller_identity()["Arn"])


def refusal(endpoint: str, keys: formats.AWSKeys) -> str:
    """The error code the endpoint answers GetCallerIdentity with."""
    with pytest.raises(ClientError) as refused:
        arn(endpoint, keys)
    return str(refused.value.response["Error"]["Code"])


def tampered(value: str) -> str:
    """The same length and alphabet, one character changed."""
    return value[:-1] + ("A" if value[-1] != "A" else "B")


def test_a_served_session_works_only_with_its_own_secret_key_and_session_token(
    chain: AWSChain, sts: STSProxy, moto: str
) -> None:
    chain.aws_policy("sa", ["b"], sa_source("default"))
    chain.wait_condition("policy", "sa", "Ready", "True", "CredentialsReady", timeout=60)
    keys = chain.aws_keys("sa")
    assert keys is not None
    assert keys.session_token
    wrong_secret = formats.AWSKeys(
        keys.access_key_id, tampered(keys.secret_access_key), keys.session_token
    )
    wrong_token = formats.AWSKeys(
        keys.access_key_id, keys.secret_access_key, tampered(keys.session_token)
    )
    no_token = formats.AWSKeys(keys.access_key_id, keys.secret_access_key)
    session = f"arn:aws:sts::{ACCOUNT}:assumed-role/bedrock/rotator.{chain.ns}.sa"

    assert arn(sts.url, keys) == session, "the served session works"
    for wrong in (wrong_secret, wrong_token, no_token):
        assert arn(moto, wrong) == session, "moto alone checks neither secret nor token"
    assert refusal(sts.url, wrong_secret) == "SignatureDoesNotMatch"
    assert refusal(sts.url, wrong_token) == "InvalidClientTokenId"
    assert refusal(sts.url, no_token) == "InvalidClientTokenId"
    assert arn(sts.url, keys) == session, "and still works after the refusals"


def test_an_iam_key_works_only_with_its_own_secret_and_not_once_deleted(
    iam_proxy: IAMProxy, sts: STSProxy, moto: str
) -> None:
    admin = formats.AWSKeys("AKIAADMIN0000000", "made-up-admin-secret")  # moto accepts any
    user = f"signer-{uuid.uuid4().hex[:8]}"
    client("iam", iam_proxy.url, admin).create_user(UserName=user)
    created = client("iam", iam_proxy.url, admin).create_access_key(UserName=user)["AccessKey"]
    keys = formats.AWSKeys(created["AccessKeyId"], created["SecretAccessKey"])
    wrong_secret = formats.AWSKeys(keys.access_key_id, tampered(keys.secret_access_key))
    with_token = formats.AWSKeys(keys.access_key_id, keys.secret_access_key, "a-session-token")
    identity = f"arn:aws:iam::{ACCOUNT}:user/{user}"

    assert arn(sts.url, keys) == identity, "the key works"
    assert arn(moto, wrong_secret) == identity, "moto alone does not check the secret"
    assert refusal(sts.url, wrong_secret) == "SignatureDoesNotMatch"
    assert refusal(sts.url, with_token) == "InvalidClientTokenId"
    assert created["SecretAccessKey"] in iam_proxy.issued_values(), "kept for the leak scan"

    behind = client("iam", moto, admin).create_access_key(UserName=user)["AccessKey"]
    unknown = formats.AWSKeys(behind["AccessKeyId"], behind["SecretAccessKey"])
    assert arn(moto, unknown) == identity
    assert refusal(sts.url, unknown) == "InvalidClientTokenId", "a key the proxy never issued"

    client("iam", iam_proxy.url, admin).delete_access_key(
        UserName=user, AccessKeyId=keys.access_key_id
    )
    assert refusal(sts.url, keys) == "InvalidClientTokenId", "a deleted key no longer works"
