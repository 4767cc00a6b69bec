"""Temporary AWS credentials from STS: ``AssumeRoleWithWebIdentity`` (a token from an OIDC issuer
or a Kubernetes service account becomes a session for an IAM role) and ``AssumeRole`` on top of
any other AWS credential — role chaining, for a role in another account.

A chained session is served with the earliest expiry of its links (:func:`assume_role`): AWS does
not end a chained session when its base does, but the issue this implements promises "the chain's
earliest", and it costs no more than renewing a little sooner (AWS caps a session assumed with a
role's session at 1 h anyway). A failure of the ``AssumeRole`` link is reported with its own
reason, ``AssumeRoleFailed`` (:class:`AssumeRoleRejected`, :class:`AssumeRoleUnavailable`), so
that a user sees which link broke; a failure of the base keeps the base's reasons.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rotator import errors, formats
from rotator.credentials import Credential
from rotator.providers.aws.file import DATA_KEY

if TYPE_CHECKING:  # boto3 loads with the clients, on the first AWS call
    from rotator.providers.aws.clients import Clients

PROVIDER = "aws-sts"
ASSUME_ROLE_FAILED = "AssumeRoleFailed"


class AssumeRoleRejected(errors.ProviderRejected):
    """STS refused the ``AssumeRole`` link of a chain (the role does not trust the base, a wrong
    external ID, a duration over the role's maximum or the 1 h cap of role chaining)."""

    reason = ASSUME_ROLE_FAILED


class AssumeRoleUnavailable(errors.ProviderUnavailable):
    """The ``AssumeRole`` link could not get an answer (throttling, 5xx, no connection, the
    deadline): retried with backoff, under the chain's own reason."""

    reason = ASSUME_ROLE_FAILED


@dataclass(frozen=True)
class Session:
    """AWS keys and when they stop working (epoch seconds; None: long-lived keys)."""

    keys: formats.AWSKeys
    expires_at: float | None = None


@dataclass(frozen=True)
class ChainedRole:
    """The second link of a chain: ``spec.awsCredentials.assumeRole``."""

    role_arn: str
    session: str
    duration_seconds: int
    external_id: str | None = None


def session_name(namespace: str, name: str) -> str:
    """A RoleSessionName (2-64 of ``[\\w+=,.@-]``) that says which policy holds the session."""
    raw = re.sub(r"[^\w+=,.@-]", "-", f"rotator.{namespace}.{name}")
    return raw[:64]


def web_identity_session(
    clients: Clients,
    *,
    role_arn: str,
    session: str,
    web_identity_token: str,
    duration_seconds: int,
    region: str,
) -> Session:
    sts = clients.unsigned_sts(region)
    response = clients.run(
        PROVIDER,
        "AssumeRoleWithWebIdentity",
        lambda: sts.assume_role_with_web_identity(
            RoleArn=role_arn,
            RoleSessionName=session,
            WebIdentityToken=web_identity_token,
            DurationSeconds=duration_seconds,
        ),
    )
    return _session(response)


def assume_role_with_web_identity(
    clients: Clients,
    *,
    role_arn: str,
    session: str,
    web_identity_token: str,
    duration_seconds: int,
    region: str,
) -> Credential:
    return served(
        web_identity_session(
            clients,
            role_arn=role_arn,
            session=session,
            web_identity_token=web_identity_token,
            duration_seconds=duration_seconds,
            region=region,
        ),
        region=region,
    )


def assume_role(clients: Clients, base: Session, role: ChainedRole, *, region: str) -> Session:
    """A session of ``role`` signed by ``base`` (STS ``AssumeRole``), expiring with the earlier
    of the two; its failures are :class:`AssumeRoleRejected` / :class:`AssumeRoleUnavailable`,
    the message naming the role and the provider's code."""
    sts = clients.signed(
        "sts", region, base.keys.access_key_id, base.keys.secret_access_key, base.keys.session_token
    )
    params: dict[str, Any] = {
        "RoleArn": role.role_arn,
        "RoleSessionName": role.session,
        "DurationSeconds": role.duration_seconds,
    }
    if role.external_id:
        params["ExternalId"] = role.external_id
    try:
        response = clients.run(PROVIDER, "AssumeRole", lambda: sts.assume_role(**params))
    except errors.ProviderUnavailable as exc:
        raise AssumeRoleUnavailable(f"assumeRole {role.role_arn}: {exc}", code=exc.code) from None
    except errors.ProviderRejected as exc:
        raise AssumeRoleRejected(f"assumeRole {role.role_arn}: {exc}", code=exc.code) from None
    chained = _session(response)
    return Session(chained.keys, earliest(base.expires_at, chained.expires_at))


def earliest(*times: float | None) -> float | None:
    """The earliest of expiry times, None (never) counting as the latest."""
    known = [t for t in times if t is not None]
    return min(known) if known else None


def served(session: Session, *, region: str) -> Credential:
    """The derived Secret's credential: a shared-credentials file with the session's keys."""
    text = formats.render_aws_credentials(session.keys, region=region)
    return Credential({DATA_KEY: text.encode()}, expires_at=session.expires_at)


def _session(response: Any) -> Session:
    c = response["Credentials"]
    expiration: datetime = c["Expiration"]
    keys = formats.AWSKeys(c["AccessKeyId"], c["SecretAccessKey"], c["SessionToken"])
    return Session(keys, expiration.timestamp())


def caller_arn(clients: Clients, keys: formats.AWSKeys, *, region: str) -> str:
    """Who these keys are (``GetCallerIdentity``): proves a credential works."""
    sts = clients.signed(
        "sts", region, keys.access_key_id, keys.secret_access_key, keys.session_token
    )
    return str(clients.run(PROVIDER, "GetCallerIdentity", sts.get_caller_identity)["Arn"])
