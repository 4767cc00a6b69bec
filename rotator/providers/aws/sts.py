"""Temporary AWS credentials from STS ``AssumeRoleWithWebIdentity``: a token from an OIDC issuer
or a Kubernetes service account becomes a session for an IAM role."""

from __future__ import annotations

import re
from datetime import datetime

from rotator import formats
from rotator.credentials import Credential
from rotator.providers.aws.clients import Clients
from rotator.providers.aws.file import DATA_KEY

PROVIDER = "aws-sts"


def session_name(namespace: str, name: str) -> str:
    """A RoleSessionName (2-64 of ``[\\w+=,.@-]``) that says which policy holds the session."""
    raw = re.sub(r"[^\w+=,.@-]", "-", f"rotator.{namespace}.{name}")
    return raw[:64]


def assume_role_with_web_identity(
    clients: Clients,
    *,
    role_arn: str,
    session: str,
    web_identity_token: str,
    duration_seconds: int,
    region: str,
) -> Credential:
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
    c = response["Credentials"]
    expiration: datetime = c["Expiration"]
    keys = formats.AWSKeys(c["AccessKeyId"], c["SecretAccessKey"], c["SessionToken"])
    text = formats.render_aws_credentials(keys, region=region)
    return Credential({DATA_KEY: text.encode()}, expires_at=expiration.timestamp())


def caller_arn(clients: Clients, keys: formats.AWSKeys, *, region: str) -> str:
    """Who these keys are (``GetCallerIdentity``): proves a credential works."""
    sts = clients.signed(
        "sts", region, keys.access_key_id, keys.secret_access_key, keys.session_token
    )
    return str(clients.run(PROVIDER, "GetCallerIdentity", sts.get_caller_identity)["Arn"])
