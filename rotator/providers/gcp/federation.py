"""Workload identity federation: a subject token (OIDC or Kubernetes service account) exchanged
at Google's STS for a federated access token, optionally impersonating a service account through
IAM credentials ``generateAccessToken``. google-auth's identity-pool credentials do the exchange
and the impersonation; we only supply the subject token."""

from __future__ import annotations

from typing import Any

from google.auth import identity_pool

from rotator.credentials import Credential
from rotator.providers.gcp.common import (
    DATA_KEY,
    SCOPES,
    Endpoints,
    Transport,
    expiry_timestamp,
    impersonation_url,
)

SUBJECT_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:jwt"  # noqa: S105 - a token type name


def audience(project_number: str, pool: str, provider: str) -> str:
    return (
        f"//iam.googleapis.com/projects/{project_number}/locations/global/"
        f"workloadIdentityPools/{pool}/providers/{provider}"
    )


class _Supplier(identity_pool.SubjectTokenSupplier):
    """Hands google-auth the subject token we already fetched (it asks once per refresh)."""

    def __init__(self, token: str) -> None:
        self._token = token

    def get_subject_token(self, context: Any, request: Any) -> str:
        return self._token


def mint(
    transport: Transport,
    *,
    subject_token: str,
    audience: str,
    impersonate: str | None,
    endpoints: Endpoints,
) -> Credential:
    credentials = identity_pool.Credentials(
        audience=audience,
        subject_token_type=SUBJECT_TOKEN_TYPE,
        token_url=endpoints.sts_url,
        subject_token_supplier=_Supplier(subject_token),
        service_account_impersonation_url=(
            impersonation_url(endpoints, impersonate) if impersonate else None
        ),
        scopes=list(SCOPES),
    )
    transport.run(
        "generateAccessToken" if impersonate else "TokenExchange",
        lambda: credentials.refresh(transport.request),
    )
    return Credential(
        {DATA_KEY: str(credentials.token).encode()}, expires_at=expiry_timestamp(credentials.expiry)
    )
