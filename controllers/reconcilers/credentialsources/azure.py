"""Azure: Entra ID access tokens from a client secret, a federated client assertion, or the
controller's own identity (workload or managed identity; only in the namespaces the operator
lists, which the policy reconciler holds to
``--controller-identity-namespaces``: :meth:`uses_controller_identity`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from controllers.reconcilers import api
from controllers.reconcilers.credentialsources import (
    CredentialSource,
    SourceContext,
    oidc_client,
)
from controllers.reconcilers.tokens import ServiceAccountTokens
from rotator import oidc
from rotator.credentials import Credential
from rotator.lazy import Lazy
from rotator.observe import Observer

if TYPE_CHECKING:  # it imports azure-identity and MSAL: loaded by the first Azure call
    from rotator.providers.azure import Azure


def lazy_azure(observer: Observer, *, authority_host: str, concurrency: int) -> Lazy[Azure]:
    """The Azure AD client of every Azure policy, made — and azure-identity imported — when the
    first one asks Azure AD for a token."""

    def build() -> Azure:
        from rotator.providers.azure import Azure  # noqa: PLC0415 - azure-identity, on first use

        return Azure(observer, authority_host=authority_host, concurrency=concurrency)

    return Lazy(build, what="the Azure SDK (azure-identity)")


class AzureCredentialsSource(CredentialSource):
    def __init__(
        self,
        *,
        azure: Azure | Lazy[Azure],
        tokens: oidc.TokenSource,
        service_accounts: ServiceAccountTokens,
    ) -> None:
        self._azure = Lazy.of(azure)
        self._tokens = tokens
        self._service_accounts = service_accounts

    def secret_refs(self, spec: api.PolicySpec) -> list[api.SecretRef]:
        azure = spec.get("azureCredentials")
        if azure is None:
            return []
        refs: list[api.SecretRef] = []
        if "clientSecretRef" in azure:
            refs.append(azure["clientSecretRef"])
        if "oidcExchangeToken" in azure:
            refs.append(azure["oidcExchangeToken"]["oidc"]["clientSecretRef"])
        return refs

    def calls_provider(self, spec: api.PolicySpec) -> bool:
        return "azureCredentials" in spec

    def uses_controller_identity(self, spec: api.PolicySpec) -> bool:
        return "controllerIdentity" in spec.get("azureCredentials", {})

    def obtain(self, ctx: SourceContext) -> Credential:
        azure = ctx.policy["spec"]["azureCredentials"]
        scope = azure["scope"]
        if "controllerIdentity" in azure:
            return self._azure.get().controller_identity(
                client_id=azure["controllerIdentity"].get("clientID"), scope=scope
            )
        # the CRD requires both with every other source
        tenant, client = azure["tenantID"], azure["clientID"]
        if "clientSecretRef" in azure:
            secret = ctx.secret_text(azure["clientSecretRef"])
            return self._azure.get().with_secret(
                tenant_id=tenant, client_id=client, client_secret=secret, scope=scope
            )
        if "oidcExchangeToken" in azure:
            assertion = self._tokens.token(
                oidc_client(ctx, azure["oidcExchangeToken"]["oidc"])
            ).value
        else:
            sa = azure["serviceAccountToken"]
            assertion = self._service_accounts.token(
                ctx.namespace, sa["serviceAccountName"], audience=sa["audience"], policy=ctx.name
            )
        return self._azure.get().with_assertion(
            tenant_id=tenant, client_id=client, assertion=assertion, scope=scope
        )
