"""Azure AD (Entra ID) access tokens through azure-identity: client credentials with a client
secret, or with a client assertion (an OIDC or Kubernetes service-account token, federated).
Instance discovery is off: the authority host is the one configured, public cloud by default."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from azure.core.exceptions import AzureError, ClientAuthenticationError
from azure.identity import ClientAssertionCredential, ClientSecretCredential

from rotator import providercalls
from rotator.credentials import Credential
from rotator.observe import Observer
from rotator.providercalls import Failure, ProviderCalls

PROVIDER = "azure-ad"
DATA_KEY = "azureAccessToken"
DEFAULT_AUTHORITY = "login.microsoftonline.com"


class Azure:
    """Token requests to one authority host, each fenced by :mod:`rotator.providercalls`."""

    def __init__(
        self,
        observer: Observer,
        *,
        authority_host: str = DEFAULT_AUTHORITY,
        timeout: float = 10.0,
        concurrency: int = 4,
        deadline: float = providercalls.DEADLINE,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._authority = authority_host
        self._timeout = timeout
        self._calls = ProviderCalls(
            PROVIDER,
            observer=observer,
            classify=classify,
            label="Azure AD",
            concurrency=concurrency,
            deadline=deadline,
            monotonic=monotonic,
        )

    def with_secret(
        self, *, tenant_id: str, client_id: str, client_secret: str, scope: str
    ) -> Credential:
        credential = ClientSecretCredential(tenant_id, client_id, client_secret, **self._options())
        return self._token(credential, scope, "ClientSecret")

    def with_assertion(
        self, *, tenant_id: str, client_id: str, assertion: str, scope: str
    ) -> Credential:
        credential = ClientAssertionCredential(
            tenant_id, client_id, lambda: assertion, **self._options()
        )
        return self._token(credential, scope, "ClientAssertion")

    def _options(self) -> dict[str, object]:
        return {
            "authority": self._authority,
            "disable_instance_discovery": True,
            "connection_timeout": self._timeout,
            "read_timeout": self._timeout,
            "retry_total": 1,
        }

    def _token(
        self, credential: ClientSecretCredential | ClientAssertionCredential, scope: str, call: str
    ) -> Credential:
        token = self._calls.run(call, lambda: credential.get_token(scope))
        return Credential({DATA_KEY: token.token.encode()}, expires_at=float(token.expires_on))


def classify(exc: Exception) -> Failure | None:
    """azure-identity's errors. An authentication error's code is its AADSTS code, else its HTTP
    status, else ``unreachable``: MSAL reports Azure AD's verdict (an AADSTS code) without the
    HTTP response, and that is a refusal; so is a 4xx but 429; no code and no status means it
    never got an answer (transient), like any other ``AzureError`` (coded by its type name)."""
    if isinstance(exc, ClientAuthenticationError):
        status = getattr(exc.response, "status_code", None) if exc.response is not None else None
        aadsts = _aadsts(str(exc.message or ""))
        code = aadsts or (str(status) if status else "unreachable")
        rejected = (aadsts is not None and (status is None or status < 500)) or (
            status is not None and 400 <= status < 500 and status != 429
        )
        return Failure(code, transient=not rejected)
    if isinstance(exc, AzureError):
        return Failure(type(exc).__name__, transient=True)
    return None


def _aadsts(message: str) -> str | None:
    """The AADSTS error code (``AADSTS7000215`` means a wrong client secret), if any."""
    match = re.search(r"AADSTS\d+", message)
    return match.group(0) if match else None
