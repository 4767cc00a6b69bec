"""Azure: Entra ID access tokens from a client secret or a federated client assertion."""

from __future__ import annotations

from controllers.reconcilers import api
from controllers.reconcilers.credentialsources import CredentialSource, SourceContext, oidc_client
from controllers.reconcilers.tokens import ServiceAccountTokens
from rotator import oidc
from rotator.credentials import Credential
from rotator.providers.azure import Azure


class AzureCredentialsSource(CredentialSource):
    def __init__(
        self, *, azure: Azure, tokens: oidc.TokenSource, service_accounts: ServiceAccountTokens
    ) -> None:
        self._azure = azure
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

    def obtain(self, ctx: SourceContext) -> Credential:
        azure = ctx.policy["spec"]["azureCredentials"]
        tenant, client, scope = azure["tenantID"], azure["clientID"], azure["scope"]
        if "clientSecretRef" in azure:
            secret = ctx.secret_text(azure["clientSecretRef"])
            return self._azure.with_secret(
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
        return self._azure.with_assertion(
            tenant_id=tenant, client_id=client, assertion=assertion, scope=scope
        )
