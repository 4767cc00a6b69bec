"""GCP: access tokens from workload identity federation, a service-account key, or the
controller's own Application Default Credentials (only in the namespaces the operator lists,
:func:`~controllers.reconcilers.credentialsources.check_controller_identity`)."""

from __future__ import annotations

from collections.abc import Collection

from controllers.reconcilers import api
from controllers.reconcilers.credentialsources import (
    CredentialSource,
    SourceContext,
    check_controller_identity,
    oidc_client,
)
from controllers.reconcilers.tokens import ServiceAccountTokens
from rotator import oidc
from rotator.credentials import Credential
from rotator.providers.gcp import adc, federation, keyfile
from rotator.providers.gcp.common import Endpoints, Transport


class GCPCredentialsSource(CredentialSource):
    def __init__(
        self,
        *,
        transport: Transport,
        endpoints: Endpoints,
        tokens: oidc.TokenSource,
        service_accounts: ServiceAccountTokens,
        application_default: adc.ApplicationDefault | None = None,
        controller_identity_namespaces: Collection[str] = frozenset(),
    ) -> None:
        self._transport = transport
        self._endpoints = endpoints
        self._tokens = tokens
        self._service_accounts = service_accounts
        self._adc = application_default or adc.ApplicationDefault(transport.observer)
        self._controller_identity_namespaces = controller_identity_namespaces

    def secret_refs(self, spec: api.PolicySpec) -> list[api.SecretRef]:
        gcp = spec.get("gcpCredentials")
        if gcp is None:
            return []
        refs: list[api.SecretRef] = []
        if "credentialsFile" in gcp:
            refs.append(gcp["credentialsFile"]["secretRef"])
        exchange = gcp.get("workloadIdentityFederation", {}).get("oidcExchangeToken")
        if exchange is not None:
            refs.append(exchange["oidc"]["clientSecretRef"])
        return refs

    def calls_provider(self, spec: api.PolicySpec) -> bool:
        return "gcpCredentials" in spec

    def obtain(self, ctx: SourceContext) -> Credential:
        gcp = ctx.policy["spec"]["gcpCredentials"]
        if "controllerIdentity" in gcp:
            check_controller_identity(self._controller_identity_namespaces, ctx.namespace)
            return adc.mint(
                self._adc,
                self._transport,
                impersonate=gcp["controllerIdentity"].get("serviceAccount"),
                endpoints=self._endpoints,
            )
        if "credentialsFile" in gcp:
            ref = gcp["credentialsFile"]["secretRef"]
            return keyfile.mint(
                self._transport,
                key_json=ctx.secret_text(ref),
                where=f"Secret {ref['name']} key {ref['key']!r}",
                endpoints=self._endpoints,
            )
        wif = gcp["workloadIdentityFederation"]
        audience = federation.audience(
            wif["projectID"], wif["workloadIdentityPoolName"], wif["workloadIdentityProviderName"]
        )
        if "oidcExchangeToken" in wif:
            subject = self._tokens.token(oidc_client(ctx, wif["oidcExchangeToken"]["oidc"])).value
        else:
            sa = wif["serviceAccountToken"]
            subject = self._service_accounts.token(
                ctx.namespace,
                sa["serviceAccountName"],
                audience=sa.get("audience") or "https:" + audience,
                policy=ctx.name,
            )
        impersonation = wif.get("serviceAccountImpersonation")
        return federation.mint(
            self._transport,
            subject_token=subject,
            audience=audience,
            impersonate=impersonation["serviceAccountName"] if impersonation else None,
            endpoints=self._endpoints,
        )
