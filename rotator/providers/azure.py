"""Azure AD (Entra ID) access tokens through azure-identity: client credentials with a client
secret, or with a client assertion (an OIDC or Kubernetes service-account token, federated).
Instance discovery is off: the authority host is the one configured, public cloud by default."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from azure.core.exceptions import AzureError, ClientAuthenticationError
from azure.identity import ClientAssertionCredential, ClientSecretCredential

from rotator import errors
from rotator.bulkhead import Bulkhead
from rotator.credentials import Credential
from rotator.observe import Observer

PROVIDER = "azure-ad"
DATA_KEY = "azureAccessToken"
DEFAULT_AUTHORITY = "login.microsoftonline.com"


class Azure:
    def __init__(
        self,
        observer: Observer,
        *,
        authority_host: str = DEFAULT_AUTHORITY,
        timeout: float = 10.0,
        concurrency: int = 4,
    ) -> None:
        self._observer = observer
        self._authority = authority_host
        self._timeout = timeout
        self._bulkhead = Bulkhead(PROVIDER, limit=concurrency)

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
        with self._bulkhead.slot(), self._mapped(call):
            token = credential.get_token(scope)
        return Credential({DATA_KEY: token.token.encode()}, expires_at=float(token.expires_on))

    @contextmanager
    def _mapped(self, call: str) -> Iterator[None]:
        try:
            yield
        except ClientAuthenticationError as exc:
            status = (
                getattr(exc.response, "status_code", None) if exc.response is not None else None
            )
            aadsts = _aadsts(str(exc.message or ""))
            code = aadsts or (str(status) if status else "unreachable")
            self._observer.provider_request(provider=PROVIDER, call=call, code=code)
            message = f"Azure AD {call} failed: {code}"
            # MSAL reports Azure AD's verdict (an AADSTS code) without the HTTP response: that is
            # a refusal; no code and no status means it never got an answer.
            rejected = (aadsts is not None and (status is None or status < 500)) or (
                status is not None and 400 <= status < 500 and status != 429
            )
            if rejected:
                raise errors.ProviderRejected(message) from None
            raise errors.ProviderUnavailable(message) from None
        except AzureError as exc:
            self._observer.provider_request(provider=PROVIDER, call=call, code=type(exc).__name__)
            raise errors.ProviderUnavailable(
                f"Azure AD {call} failed: {type(exc).__name__}"
            ) from None
        self._observer.provider_request(provider=PROVIDER, call=call, code="200")


def _aadsts(message: str) -> str | None:
    """The AADSTS error code (``AADSTS7000215`` means a wrong client secret), if any."""
    match = re.search(r"AADSTS\d+", message)
    return match.group(0) if match else None
