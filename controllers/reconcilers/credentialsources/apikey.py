"""API keys: copied from a Secret."""

from __future__ import annotations

from controllers.reconcilers import api
from controllers.reconcilers.credentialsources import CredentialSource, SourceContext
from rotator.credentials import Credential
from rotator.providers import apikey


class APIKeySource(CredentialSource):
    def secret_refs(self, spec: api.PolicySpec) -> list[api.SecretRef]:
        return [spec["apiKey"]["secretRef"]] if "apiKey" in spec else []

    def obtain(self, ctx: SourceContext) -> Credential:
        ref = ctx.policy["spec"]["apiKey"]["secretRef"]
        return apikey.copy_key(ctx.secret(ref), key=ref["key"], secret_name=ref["name"])
