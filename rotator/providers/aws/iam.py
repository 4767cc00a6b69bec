"""Long-lived IAM user access keys, replaced every interval without a moment of invalidity.

One step of the lifecycle per call (:func:`rotate`):

1. the previous key, kept for a grace period after its successor was served, is deleted once
   that period is over;
2. when a new key is due, the user's key set is brought to {served, retiring} — any other key
   (left by a write that failed after ``CreateAccessKey``, or served by a derived Secret since
   deleted) is deleted, never the management identity's own key — then a key is created (AWS
   allows two per user), proved with ``GetCallerIdentity``, and served; the key it replaces
   becomes the previous key.

The IAM user must be dedicated to rotator: it owns the user's key set. A key created but not
served (the derived Secret could not be written) is deleted at once by :func:`discard`.

The managing identity comes from the policy's Secret (an AWS credentials file). State between
steps (the previous key and when it retires) travels in :attr:`Credential.state`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rotator import errors, formats
from rotator.credentials import Credential
from rotator.providers.aws import sts
from rotator.providers.aws.file import DATA_KEY

if TYPE_CHECKING:  # boto3 loads with the clients, on the first AWS call
    from rotator.providers.aws.clients import Clients

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
    """When the previous key is to be deleted, if one is retiring.

    Whole seconds, rounded up: the controller schedules in whole seconds (rounded down), and a
    step run at the scheduled second must find the key due, or it would run again and again
    until the fraction passed. A retirement time that is absent or does not parse (state edited
    by hand) is treated as absent: the grace period cannot be known, so it is over and the key
    is deleted at the next step — never an exception on every reconcile, and never a key left
    behind for ever.
    """
    if credential is None or PREVIOUS_KEY not in credential.state:
        return None
    try:
        retire_at = float(credential.state.get(RETIRE_AT, "0"))
    except ValueError:
        return 0.0
    return float(math.ceil(retire_at)) if math.isfinite(retire_at) else 0.0


def rotate(
    clients: Clients,
    *,
    admin: formats.AWSKeys,
    rotation: KeyRotation,
    current: Credential | None,
    new_key_due: bool,
    now: float,
) -> Credential:
    iam = _iam(clients, admin, rotation)
    state = dict(current.state) if current is not None else {}
    retire_at = retire_due(current)
    previous = state.get(PREVIOUS_KEY) if retire_at is not None else None
    if previous is not None and retire_at is not None and (now >= retire_at or new_key_due):
        _delete(clients, iam, rotation.user, previous)
        state.pop(PREVIOUS_KEY, None)
        state.pop(RETIRE_AT, None)
        previous = None
    if not new_key_due and current is not None:
        return Credential(current.data, None, current.issued_at, state)

    served = served_key_id(current)
    existing = _converge(clients, iam, rotation.user, admin, keep={served, previous})
    if len(existing) >= 2:
        raise errors.ProviderRejected(
            f"IAM user {rotation.user} has no free access-key slot: its keys are "
            f"{', '.join(sorted(existing))}, and rotator deletes neither the served key nor the "
            "management identity's; use a management identity of another user"
        )
    # never abandoned to the deadline: the key would be live and nobody would know its id
    created = clients.run(
        PROVIDER,
        "CreateAccessKey",
        lambda: iam.create_access_key(UserName=rotation.user)["AccessKey"],
        abandon=False,
    )
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


def discard(
    clients: Clients, *, admin: formats.AWSKeys, rotation: KeyRotation, minted: Credential
) -> None:
    """Deletes a key :func:`rotate` created but that could not be served (writing the derived
    Secret failed): the compensation of a non-idempotent step, in the same reconcile."""
    key = served_key_id(minted)
    if key is not None:
        _delete(clients, _iam(clients, admin, rotation), rotation.user, key)


def release(
    clients: Clients, *, admin: formats.AWSKeys, rotation: KeyRotation, current: Credential | None
) -> None:
    """Deletes every key of the user but the management identity's: the served one, the
    retiring one, and any a lost write left behind (rotator owns the user's key set)."""
    _converge(clients, _iam(clients, admin, rotation), rotation.user, admin, keep=set())


def _iam(clients: Clients, admin: formats.AWSKeys, rotation: KeyRotation) -> Any:
    return clients.signed(
        "iam", rotation.region, admin.access_key_id, admin.secret_access_key, admin.session_token
    )


def _converge(
    clients: Clients, iam: Any, user: str, admin: formats.AWSKeys, *, keep: set[str | None]
) -> list[str]:
    """Deletes the user's keys that are neither kept nor the management identity's (a key
    created by a reconcile whose write was lost, or served by a derived Secret since deleted);
    returns the keys left.

    Level-triggered: rotator owns the dedicated user's key set and brings it to {served,
    retiring} on every rotation, so no failure can leave a key behind for ever.
    """
    listed = clients.run(
        PROVIDER,
        "ListAccessKeys",
        lambda: iam.list_access_keys(UserName=user)["AccessKeyMetadata"],
    )
    left = []
    for key_id in (str(k["AccessKeyId"]) for k in listed):
        if key_id in keep or key_id == admin.access_key_id:
            left.append(key_id)
        else:
            _delete(clients, iam, user, key_id)
    return left


def _delete(clients: Clients, iam: Any, user: str, key_id: str) -> None:
    try:
        clients.run(
            PROVIDER,
            "DeleteAccessKey",
            lambda: iam.delete_access_key(UserName=user, AccessKeyId=key_id),
        )
    except errors.ProviderRejected as exc:
        if exc.code != "NoSuchEntity":  # already gone: deleting is done
            raise
