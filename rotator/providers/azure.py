"""Azure AD (Entra ID) access tokens through azure-identity: client credentials with a client
secret, or with a client assertion (an OIDC or Kubernetes service-account token, federated), or
the controller's own identity (:meth:`Azure.controller_identity`: workload or managed identity).
Instance discovery is off: the authority host is the one configured, public cloud by default.

This module imports azure-identity (and MSAL): the controller loads it when the first Azure policy
calls Azure AD (``controllers.reconcilers.credentialsources.azure``), never at start-up."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping

from azure.core.credentials import AccessToken, TokenCredential
from azure.core.exceptions import AzureError, ClientAuthenticationError
from azure.identity import (
    ClientAssertionCredential,
    ClientSecretCredential,
    ManagedIdentityCredential,
    WorkloadIdentityCredential,
)

from rotator import errors, providercalls
from rotator.credentials import Credential
from rotator.observe import Observer
from rotator.providercalls import Failure, ProviderCalls, status_code
from rotator.providers.azure_endpoints import DEFAULT_AUTHORITY, authority_url

PROVIDER = "azure-ad"
MANAGED_IDENTITY_PROVIDER = "azure-managed-identity"
DATA_KEY = "azureAccessToken"
FEDERATED_TOKEN_FILE = "AZURE_FEDERATED_TOKEN_FILE"  # noqa: S105 - a variable name
"""Set in the controller's pod (by AKS's workload identity webhook, with ``AZURE_CLIENT_ID``,
``AZURE_TENANT_ID`` and ``AZURE_AUTHORITY_HOST``): the controller's identity is a workload
identity, else a managed identity."""


class Azure:
    """Token requests to one authority host, each fenced by :mod:`rotator.providercalls`;
    managed identity requests (IMDS, App Service) are fenced apart, with a bulkhead of their own:
    a hung IMDS holds no slot of Azure AD's."""

    def __init__(
        self,
        observer: Observer,
        *,
        authority_host: str = DEFAULT_AUTHORITY,
        timeout: float = 10.0,
        concurrency: int = 4,
        deadline: float = providercalls.DEADLINE,
        monotonic: Callable[[], float] = time.monotonic,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._authority = authority_url(authority_host)
        self._timeout = timeout
        self._environ = os.environ if environ is None else environ
        self._calls = ProviderCalls(
            PROVIDER,
            observer=observer,
            classify=classify,
            label="Azure AD",
            concurrency=concurrency,
            deadline=deadline,
            monotonic=monotonic,
        )
        self._identity_calls = ProviderCalls(
            MANAGED_IDENTITY_PROVIDER,
            observer=observer,
            classify=classify_managed_identity,
            label="Azure managed identity",
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

    def controller_identity(self, *, client_id: str | None, scope: str) -> Credential:
        """A token of the controller's own identity, chosen from its environment as AKS sets it
        up (never azure-identity's DefaultAzureCredential, which would try a developer's CLI
        login or anything else it finds): a workload identity when ``AZURE_FEDERATED_TOKEN_FILE``
        is set — the projected ServiceAccount token read from that file is the client assertion
        at ``AZURE_AUTHORITY_HOST`` for ``AZURE_TENANT_ID`` and ``client_id`` (default
        ``AZURE_CLIENT_ID``) — else a managed identity (``ManagedIdentityCredential``: IMDS, or
        the ``IDENTITY_ENDPOINT`` and ``IDENTITY_HEADER`` of App Service and Container Apps), the
        user-assigned one ``client_id`` names or the system-assigned one. A new credential object
        per call: the SDKs' in-memory token caches would hand back the token being replaced."""
        env = self._environ
        if token_file := env.get(FEDERATED_TOKEN_FILE):
            ids = {
                "AZURE_TENANT_ID": env.get("AZURE_TENANT_ID"),
                "AZURE_CLIENT_ID": client_id or env.get("AZURE_CLIENT_ID"),
            }
            if missing := [name for name, value in ids.items() if not value]:
                raise errors.InvalidInput(
                    f"the controller has {FEDERATED_TOKEN_FILE} (workload identity) but not "
                    f"{' and '.join(missing)}: see its pod's azure.workload.identity labels"
                )
            workload = WorkloadIdentityCredential(
                tenant_id=ids["AZURE_TENANT_ID"],
                client_id=ids["AZURE_CLIENT_ID"],
                token_file_path=token_file,
                # the webhook sets AZURE_AUTHORITY_HOST; else the one configured
                authority=authority_url(env.get("AZURE_AUTHORITY_HOST") or self._authority),
                disable_instance_discovery=True,
                connection_timeout=self._timeout,
                read_timeout=self._timeout,
                retry_total=1,
            )
            return self._token(workload, scope, "WorkloadIdentity")
        managed = ManagedIdentityCredential(
            client_id=client_id or None,
            connection_timeout=self._timeout,
            read_timeout=self._timeout,
            # one call per attempt: the controller's backoff retries (azure-identity's IMDS
            # default is 5 retries over ~24 s, most of the provider call deadline)
            retry_total=0,
        )
        return self._token(managed, scope, "ManagedIdentity", calls=self._identity_calls)

    def _options(self) -> dict[str, object]:
        return {
            "authority": self._authority,
            "disable_instance_discovery": True,
            "connection_timeout": self._timeout,
            "read_timeout": self._timeout,
            "retry_total": 1,
        }

    def _token(
        self,
        credential: TokenCredential,
        scope: str,
        call: str,
        *,
        calls: ProviderCalls | None = None,
    ) -> Credential:
        token = (calls or self._calls).run(call, lambda: _get_and_close(credential, scope))
        return Credential({DATA_KEY: token.token.encode()}, expires_at=float(token.expires_on))


def _get_and_close(credential: TokenCredential, scope: str) -> AccessToken:
    """One token, then the credential's HTTP session closed: a credential serves one call."""
    try:
        return credential.get_token(scope)
    finally:
        close = getattr(credential, "close", None)
        if close is not None:
            close()


def classify(exc: Exception) -> Failure | None:
    """azure-identity's errors. An authentication error's code is its AADSTS code, else its HTTP
    status, else ``unreachable``: MSAL reports Azure AD's verdict (an AADSTS code) without the
    HTTP response, and that is a refusal; so is a 4xx but 429; no code and no status means it
    never got an answer (transient), like any other ``AzureError`` (coded by its type name)."""
    if isinstance(exc, ClientAuthenticationError):
        status = getattr(exc.response, "status_code", None) if exc.response is not None else None
        aadsts = _aadsts(str(exc.message or ""))
        code = aadsts or (status_code(status) if status else "unreachable")
        rejected = (aadsts is not None and (status is None or status < 500)) or (
            status is not None and 400 <= status < 500 and status != 429
        )
        return Failure(code, transient=not rejected)
    if isinstance(exc, AzureError):
        return Failure(type(exc).__name__, transient=True)
    if isinstance(exc, OSError):  # workload identity: the token file cannot be read
        return Failure(type(exc).__name__, transient=True, shown="federated token file unreadable")
    return None


_MANAGED_IDENTITY_ERROR = re.compile(r"Token request error: \((\w+)\)\s*(\d{3})?")
MANAGED_IDENTITY_REFUSALS = frozenset(
    {
        "invalid_request",  # IMDS: "Identity not found", a clientID not assigned to the host
        "invalid_client",
        "unauthorized_client",
        "access_denied",
        "invalid_resource",
        "invalid_scope",
        "unsupported_response_type",
        "bad_request",
    }
)
"""OAuth error codes of a managed identity endpoint that are its verdict, not an outage."""


def classify_managed_identity(exc: Exception) -> Failure | None:
    """Managed identity errors: MSAL hands azure-identity the endpoint's OAuth ``error`` (only
    that reaches us, in the message: ``Token request error: (code) description``). A refusal
    code is permanent, unless App Service's description begins with a 5xx or 429 status (MSAL
    calls every App Service error ``invalid_scope``); any other code, or none (no answer, not
    JSON), is an outage."""
    if isinstance(exc, ClientAuthenticationError):
        match = _MANAGED_IDENTITY_ERROR.search(str(exc.message or ""))
        if match is None:
            return Failure("unreachable", transient=True)
        code, status = match.group(1), match.group(2)
        if status is not None and (int(status) >= 500 or int(status) == 429):
            return Failure(status, transient=True)
        shown = f"{code} (no such identity here?)" if code == "invalid_request" else None
        return Failure(code, transient=code not in MANAGED_IDENTITY_REFUSALS, shown=shown)
    return classify(exc)


def _aadsts(message: str) -> str | None:
    """The AADSTS error code (``AADSTS7000215`` means a wrong client secret), if any."""
    match = re.search(r"AADSTS\d+", message)
    return match.group(0) if match else None
