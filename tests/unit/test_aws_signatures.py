"""The AWS stand-ins' SigV4 check (devkit/rotator_devkit/devenv/standins/aws.py), on requests botocore
signs: what AWS accepts passes, and each way of getting a credential wrong is refused with the
code AWS gives. The e2e counterpart, through the STS proxy, is tests/e2e/test_signatures.py."""

from __future__ import annotations

from datetime import UTC, datetime
from unittest import mock

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from rotator_devkit.devenv.standins import aws

NOW = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC).timestamp()
URL = "http://127.0.0.1:4566/"
BODY = b"Action=GetCallerIdentity&Version=2011-06-15"
KEY_ID = "ASIAEXAMPLE0000001"
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
TOKEN = "FwoGZXIvYXdzEXAMPLETOKEN+/="


def signed(
    secret: str = SECRET, token: str | None = TOKEN, *, at: float = NOW, body: bytes = BODY
) -> dict[str, str]:
    """The headers botocore sends for a GetCallerIdentity signed at ``at`` (its clock set)."""
    request = AWSRequest(
        method="POST",
        url=URL,
        headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"},
        data=body,
    )
    signer = SigV4Auth(Credentials(KEY_ID, secret, token), "sts", "us-east-1")
    clock = datetime.fromtimestamp(at, tz=UTC).replace(tzinfo=None)
    with mock.patch("botocore.auth.get_current_datetime", return_value=clock):
        signer.add_auth(request)
    headers = {k.lower(): v for k, v in request.headers.items()}
    return {**headers, "host": "127.0.0.1:4566"}  # what the HTTP client adds, signed


def verify(
    headers: dict[str, str],
    *,
    body: bytes = BODY,
    now: float = NOW,
    issued: aws.Issued | None = None,
) -> aws.Refusal | None:
    keyring = aws.Keyring()
    keyring.add(KEY_ID, issued or aws.Issued(SECRET, TOKEN, NOW + 60))
    return aws.verify(keyring, method="POST", url=URL, headers=headers, body=body, now=now)


def test_the_right_secret_and_token_pass() -> None:
    assert verify(signed()) is None


def test_an_iam_key_signs_without_a_token() -> None:
    assert verify(signed(token=None), issued=aws.Issued(SECRET, None, None)) is None
    assert verify(signed(), issued=aws.Issued(SECRET, None, None)) is aws.WRONG_TOKEN


@pytest.mark.parametrize(
    ("headers", "refused"),
    [
        (signed(secret=SECRET[:-1] + "x"), aws.WRONG_SIGNATURE),
        (signed(token=TOKEN[:-1] + "x"), aws.WRONG_TOKEN),
        (signed(token=None), aws.WRONG_TOKEN),
        ({k: v for k, v in signed().items() if k != "authorization"}, aws.MISSING),
        ({**signed(), "host": "127.0.0.1:4567"}, aws.WRONG_SIGNATURE),
        ({**signed(), "x-amz-date": "20260501T120001Z"}, aws.WRONG_SIGNATURE),
        (signed(at=NOW - 16 * 60), aws.STALE),
    ],
    ids=[
        "wrong secret",
        "wrong token",
        "no token",
        "unsigned",
        "other host",
        "other date",
        "too old",
    ],
)
def test_a_wrong_credential_or_a_changed_request_is_refused(
    headers: dict[str, str], refused: aws.Refusal
) -> None:
    assert verify(headers) == refused


def test_a_changed_body_is_refused() -> None:
    assert verify(signed(), body=BODY + b"&RoleArn=x") is aws.WRONG_SIGNATURE


def test_an_expired_session_is_refused() -> None:
    assert verify(signed(at=NOW + 61), now=NOW + 61) is aws.EXPIRED


def test_a_key_nobody_issued_is_unknown() -> None:
    headers = signed()
    assert (
        aws.verify(aws.Keyring(), method="POST", url=URL, headers=headers, body=BODY, now=NOW)
        is aws.UNKNOWN_KEY
    )


def test_the_issued_keys_are_read_from_sts_and_iam_answers() -> None:
    session = (
        b'<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
        b"<AssumeRoleWithWebIdentityResult><Credentials><SessionToken>tok+/=</SessionToken>"
        b"<SecretAccessKey>sec</SecretAccessKey><AccessKeyId>ASIA1</AccessKeyId></Credentials>"
        b"</AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>"
    )
    key = (
        b"<CreateAccessKeyResponse><CreateAccessKeyResult><AccessKey><UserName>u</UserName>"
        b"<AccessKeyId>AKIA1</AccessKeyId><SecretAccessKey>sec2</SecretAccessKey></AccessKey>"
        b"</CreateAccessKeyResult></CreateAccessKeyResponse>"
    )
    assert aws.issued_in(session) == ("ASIA1", "sec", "tok+/=")
    assert aws.issued_in(key) == ("AKIA1", "sec2", None)
    assert aws.issued_in(b"<ErrorResponse/>") is None
