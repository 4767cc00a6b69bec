"""GCP: access tokens from workload identity federation, a service-account key, or the
controller's own Application Default Credentials (only in the namespaces the operator lists,
which the policy reconciler holds to
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
from rotator.providers.gcp.endpoints import Endpoints

if TYPE_CHECKING:  # they import google-auth's credentials: loaded by the first GCP call
    from rotator.providers.gcp.adc import ApplicationDefault
    from rotator.providers.gcp.common import Transport


def lazy_transport(observer: Observer, *, concurrency: int) -> Lazy[Transport]:
    """The HTTP transport of every GCP policy, made when the first one calls Google."""

    def build() -> Transport:
        from rotator.providers.gcp.common import Transport  # noqa: PLC0415 - on first use

        return Transport(observer, concurrency=concurrency)

    return Lazy(build, what="the Google SDK (google-auth)")


def lazy_application_default(observer: Observer, *, concurrency: int) -> Lazy[ApplicationDefault]:
    """The controller's Application Default Credentials, made when the first policy asks for
    the controller's identity (looked for only then: :class:`ApplicationDefault`)."""

    def build() -> ApplicationDefault:
        from rotator.providers.gcp.adc import ApplicationDefault  # noqa: PLC0415 - on first use

        return ApplicationDefault(observer, concurrency=concurrency)

    return Lazy(build, what="the Google SDK (google-auth)")


class GCPCredentialsSource(CredentialSource):
    """The google-auth modules that mint (``rotator.providers.gcp``: ``adc``, ``keyfile``,
    ``federation``) are imported where a policy first needs them, as the clients are built."""

    def __init__(
        self,
        *,
        transport: Transport | Lazy[Transport],
        endpoints: Endpoints,
        tokens: oidc.TokenSource,
        service_accounts: ServiceAccountTokens,
        application_default: ApplicationDefault | Lazy[ApplicationDefault] | None = None,
    ) -> None:
        self._transport = Lazy.of(transport)
        self._endpoints = endpoints
        self._tokens = tokens
        self._service_accounts = service_accounts
        self._adc = (
            Lazy.of(application_default)
            if application_default is not None
            else Lazy(self._own_application_default)
        )

    def _own_application_default(self) -> ApplicationDefault:
        from rotator.providers.gcp.adc import ApplicationDefault  # noqa: PLC0415 - on first use

        return ApplicationDefault(self._transport.get().observer)

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

    def uses_controller_identity(self, spec: api.PolicySpec) -> bool:
        return "controllerIdentity" in spec.get("gcpCredentials", {})

    def obtain(self, ctx: SourceContext) -> Credential:
        gcp = ctx.policy["spec"]["gcpCredentials"]
        if "controllerIdentity" in gcp:
            from rotator.providers.gcp import adc  # noqa: PLC0415 - google-auth, on first use

            return adc.mint(
                self._adc.get(),
                self._transport.get(),
                impersonate=gcp["controllerIdentity"].get("serviceAccount"),
                endpoints=self._endpoints,
            )
        if "credentialsFile" in gcp:
            ref = gcp["credentialsFile"]["secretRef"]
            key_json = ctx.secret_text(ref)
            from rotator.providers.gcp import keyfile  # noqa: PLC0415 - google-auth, on first use

            return keyfile.mint(
                self._transport.get(),
                key_json=key_json,
                where=f"Secret {ref['name']} key {ref['key']!r}",
                endpoints=self._endpoints,
            )
        from rotator.providers.gcp import federation  # noqa: PLC0415 - google-auth, on first use

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
            self._transport.get(),
            subject_token=subject,
            audience=audience,
            impersonate=impersonation["serviceAccountName"] if impersonation else None,
            endpoints=self._endpoints,
        )
