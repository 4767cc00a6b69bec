"""Long-lived IAM user access keys, replaced every interval without a moment of invalidity.

One step of the lifecycle per call (:func:`rotate`):

1. the previous key, kept for a grace period after its successor was served, is deleted once
   that period is over;
2. when a new key is due, it is created (the user may hold two keys: rotator never deletes the
   key it serves to make room, and refuses when a key it does not know fills the second slot),
   proved with ``GetCallerIdentity``, and served; the key it replaces becomes the previous key.

The managing identity comes from the policy's Secret (an AWS credentials file). State between
steps (the previous key and when it retires) travels in :attr:`Credential.state`.
"""

from __future__ import annotations

from dataclasses import dataclass

from rotator import errors, formats
from rotator.credentials import Credential
from rotator.providers.aws import sts
from rotator.providers.aws.clients import Clients
from rotator.providers.aws.file import DATA_KEY

PROVIDER = "aws-iam"
PREVIOUS_KEY = "previous-access-key-id"
RETIRE_AT = "previous-key-retires-at"


@dataclass(frozen=True)
class KeyRotation:
    user: str
    region: str
    grace: float
    """Seconds a replaced key stays valid so that consumers can switch."""


def served_key_id(credential: Credential | None) -> str | None:
    if credential is None or DATA_KEY not in credential.data:
        return None
    try:
        text = credential.data[DATA_KEY].decode()
        return formats.parse_aws_credentials(text, profile="default", where="served").access_key_id
    except (UnicodeDecodeError, errors.InvalidInput):
        return None


def retire_due(credential: Credential | None) -> float | None:
    """When the previous key is to be deleted, if one is retiring."""
    if credential is None or PREVIOUS_KEY not in credential.state:
        return None
    return float(credential.state.get(RETIRE_AT, "0"))


def rotate(
    clients: Clients,
    *,
    admin: formats.AWSKeys,
    rotation: KeyRotation,
    current: Credential | None,
    new_key_due: bool,
    now: float,
) -> Credential:
    iam = clients.signed(
        "iam", rotation.region, admin.access_key_id, admin.secret_access_key, admin.session_token
    )
    state = dict(current.state) if current is not None else {}
    retire_at = retire_due(current)
    if retire_at is not None and (now >= retire_at or new_key_due):
        _delete(clients, iam, rotation.user, state[PREVIOUS_KEY])
        state.pop(PREVIOUS_KEY, None)
        state.pop(RETIRE_AT, None)
    if not new_key_due and current is not None:
        return Credential(current.data, None, current.issued_at, state)

    served = served_key_id(current)
    with clients.call(PROVIDER, "ListAccessKeys"):
        existing = [
            k["AccessKeyId"]
            for k in iam.list_access_keys(UserName=rotation.user)["AccessKeyMetadata"]
        ]
    if len(existing) >= 2:
        others = sorted(k for k in existing if k != served)
        raise errors.ProviderRejected(
            f"IAM user {rotation.user} already has two access keys ({', '.join(others)} "
            "besides the served one); delete one so rotator has a free slot"
        )
    with clients.call(PROVIDER, "CreateAccessKey"):
        created = iam.create_access_key(UserName=rotation.user)["AccessKey"]
    keys = formats.AWSKeys(created["AccessKeyId"], created["SecretAccessKey"])
    try:
        sts.caller_arn(clients, keys, region=rotation.region)
    except errors.CredentialError:
        _delete(
            clients, iam, rotation.user, keys.access_key_id
        )  # never leave an unproven key behind
        raise
    if served is not None and served in existing:
        state[PREVIOUS_KEY] = served
        state[RETIRE_AT] = repr(now + rotation.grace)
    text = formats.render_aws_credentials(keys, region=rotation.region)
    return Credential({DATA_KEY: text.encode()}, None, created["CreateDate"].timestamp(), state)


def release(
    clients: Clients, *, admin: formats.AWSKeys, rotation: KeyRotation, current: Credential | None
) -> None:
    """Deletes the keys rotator created for this user (served and retiring)."""
    iam = clients.signed(
        "iam", rotation.region, admin.access_key_id, admin.secret_access_key, admin.session_token
    )
    for key in (served_key_id(current), (current.state.get(PREVIOUS_KEY) if current else None)):
        if key:
            _delete(clients, iam, rotation.user, key)


def _delete(clients: Clients, iam: object, user: str, key_id: str) -> None:
    try:
        with clients.call(PROVIDER, "DeleteAccessKey"):
            iam.delete_access_key(UserName=user, AccessKeyId=key_id)  # type: ignore[attr-defined]
    except errors.ProviderRejected as exc:
        if "NoSuchEntity" not in str(exc):
            raise
