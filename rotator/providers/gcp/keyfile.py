"""Service-account key files: the key signs a JWT that Google's OAuth token endpoint exchanges
for an access token (google-auth's service-account credentials)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from google.oauth2 import service_account

from rotator import errors
from rotator.credentials import Credential
from rotator.providers.gcp.common import DATA_KEY, SCOPES, Endpoints, Transport, expiry_timestamp


def mint(transport: Transport, *, key_json: str, where: str, endpoints: Endpoints) -> Credential:
    try:
        info = json.loads(key_json)
    except ValueError:
        raise errors.InvalidInput(f"{where} is not JSON (a service-account key file is)") from None
    if not isinstance(info, Mapping) or info.get("type") != "service_account":
        raise errors.InvalidInput(
            f'{where} is not a service-account key ("type": "service_account")'
        )
    missing = [k for k in ("client_email", "private_key", "token_uri") if not info.get(k)]
    if missing and not (missing == ["token_uri"] and endpoints.token_uri):
        raise errors.InvalidInput(f"{where} lacks {', '.join(missing)}")
    if endpoints.token_uri:
        info = {**info, "token_uri": endpoints.token_uri}
    try:
        credentials = service_account.Credentials.from_service_account_info(
            info, scopes=list(SCOPES)
        )
    except ValueError:
        # google-auth's message may quote the key; say only what is wrong and where
        raise errors.InvalidInput(f"{where} holds a private key that cannot be read") from None
    transport.run("ServiceAccountToken", lambda: credentials.refresh(transport.request))
    return Credential(
        {DATA_KEY: str(credentials.token).encode()}, expires_at=expiry_timestamp(credentials.expiry)
    )
