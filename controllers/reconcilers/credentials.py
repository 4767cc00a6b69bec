"""Where credential providers plug into the policy reconciler: one :class:`CredentialSource` per
policy ``type``, built in the composition root.

A source names the Secrets a policy references (for the Secret → policy index and for
resolution) and mints a credential from what the reconciler resolved. Adding a credential type is
adding a source here and a provider in ``rotator.providers``; the reconciler does not change.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from controllers.reconcilers import api
from rotator import errors
from rotator.credentials import Credential
from rotator.providers import apikey, aws_file


class SecretNotFound(errors.InvalidInput):
    reason = "SecretNotFound"


class UnsupportedSource(errors.InvalidInput):
    """The spec is valid but this build of rotator cannot mint from that source."""

    reason = "UnsupportedCredentialSource"


SecretGetter = Callable[[str], Mapping[str, str] | None]
"""Secret name (in the policy's namespace) → its ``data`` (base64 values), or None if absent."""


@dataclass(frozen=True)
class MintContext:
    """What the reconciler hands a source: the policy, and access to its namespace's Secrets."""

    policy: api.Policy
    get_secret: SecretGetter

    def secret(self, ref: api.SecretRef) -> Mapping[str, bytes]:
        """The decoded data of a referenced Secret; raises SecretNotFound."""
        data = self.get_secret(ref["name"])
        if data is None:
            raise SecretNotFound(f"Secret {ref['name']} not found")
        try:
            return {k: base64.b64decode(v) for k, v in data.items()}
        except ValueError:
            raise errors.InvalidInput(
                f"Secret {ref['name']} holds data that is not base64"
            ) from None


class CredentialSource(Protocol):
    def secret_refs(self, spec: api.PolicySpec) -> list[api.SecretRef]:
        """Every Secret (same namespace) the spec references."""
        ...

    def mint(self, ctx: MintContext) -> Credential:
        """A credential for the policy; raises :class:`rotator.errors.CredentialError`."""
        ...


class APIKeySource:
    def secret_refs(self, spec: api.PolicySpec) -> list[api.SecretRef]:
        return [spec["apiKey"]["secretRef"]] if "apiKey" in spec else []

    def mint(self, ctx: MintContext) -> Credential:
        ref = ctx.policy["spec"]["apiKey"]["secretRef"]
        return apikey.mint(ctx.secret(ref), key=ref["key"], secret_name=ref["name"])


class AWSCredentialsSource:
    def secret_refs(self, spec: api.PolicySpec) -> list[api.SecretRef]:
        aws = spec.get("awsCredentials")
        if aws is None:
            return []
        refs: list[api.SecretRef] = []
        if "credentialsFile" in aws:
            refs.append(aws["credentialsFile"]["secretRef"])
        if "oidcExchangeToken" in aws:
            refs.append(aws["oidcExchangeToken"]["oidc"]["clientSecretRef"])
        if "iamAccessKey" in aws:
            refs.append(aws["iamAccessKey"]["secretRef"])
        return refs

    def mint(self, ctx: MintContext) -> Credential:
        aws = ctx.policy["spec"]["awsCredentials"]
        if "credentialsFile" in aws:
            file = aws["credentialsFile"]
            ref = file["secretRef"]
            return aws_file.mint(
                ctx.secret(ref),
                key=ref["key"],
                profile=file["profile"],
                region=aws["region"],
                secret_name=ref["name"],
            )
        raise UnsupportedSource("this version of rotator supports AWS credentialsFile only")


def default_sources() -> Mapping[str, CredentialSource]:
    return {"APIKey": APIKeySource(), "AWSCredentials": AWSCredentialsSource()}
