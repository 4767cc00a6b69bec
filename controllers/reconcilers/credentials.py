"""Where credential providers plug into the policy reconciler: one :class:`CredentialSource` per
policy ``type``, built in the composition root.

A source names the Secrets a policy references (for the Secret → policy index and for
resolution), says whether it *copies* (re-derived from those Secrets on every reconcile) or
*mints* (a provider call, made only when needed), mints, says when its credential is next due,
and gives back external resources when the policy goes. Adding a credential type is adding a
source here and a provider in ``rotator.providers``; the reconciler does not change.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from controllers.reconcilers import api
from controllers.reconcilers.tokens import ServiceAccountTokens
from rotator import durations, errors, formats, oidc, schedule
from rotator.credentials import Credential
from rotator.providers import apikey
from rotator.providers.aws import file as aws_file
from rotator.providers.aws import iam, sts
from rotator.providers.aws.clients import Clients


class SecretNotFound(errors.InvalidInput):
    reason = "SecretNotFound"


class UnsupportedSource(errors.InvalidInput):
    """The spec is valid but this build of rotator cannot mint from that source."""

    reason = "UnsupportedCredentialSource"


SecretGetter = Callable[[str], Mapping[str, str] | None]
"""Secret name (in the policy's namespace) → its ``data`` (base64 values), or None if absent."""


@dataclass(frozen=True)
class MintContext:
    """What the reconciler hands a source."""

    policy: api.Policy
    get_secret: SecretGetter
    now: float = 0.0
    current: Credential | None = None
    """The credential being served, if any."""
    forced: bool = False
    """A new credential is wanted now (spec changed, rotation requested, Secret edited)."""
    settings: schedule.RotationSettings = field(default_factory=schedule.RotationSettings)

    @property
    def namespace(self) -> str:
        return self.policy["metadata"].get("namespace", "")

    @property
    def name(self) -> str:
        return self.policy["metadata"].get("name", "")

    @property
    def seed(self) -> str:
        return self.policy["metadata"].get("uid", self.name)

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

    def secret_text(self, ref: api.SecretRef) -> str:
        data = self.secret(ref)
        if ref["key"] not in data:
            raise errors.MissingKey(f"Secret {ref['name']} has no key {ref['key']!r}")
        try:
            return data[ref["key"]].decode().strip()
        except UnicodeDecodeError:
            raise errors.InvalidInput(
                f"Secret {ref['name']} key {ref['key']!r} is not UTF-8"
            ) from None


class CredentialSource:
    """The defaults: copies, never due, nothing to give back."""

    def secret_refs(self, spec: api.PolicySpec) -> list[api.SecretRef]:
        return []

    def mints(self, spec: api.PolicySpec) -> bool:
        return False

    def mint(self, ctx: MintContext) -> Credential:
        raise NotImplementedError

    def due_at(self, ctx: MintContext) -> float | None:
        """When the served credential (``ctx.current``) must be replaced; None: never."""
        c = ctx.current
        if c is None or c.expires_at is None:
            return None
        issued = c.issued_at if c.issued_at is not None else c.expires_at - 3600
        return schedule.renewal_time(
            issued_at=issued, expires_at=c.expires_at, settings=ctx.settings, seed=ctx.seed
        )

    def finalizer(self, spec: api.PolicySpec) -> str | None:
        """A finalizer to hold the policy until :meth:`release` has run."""
        return None

    def release(self, ctx: MintContext) -> None:
        """Gives back what the policy holds outside the cluster (it is being deleted)."""


class APIKeySource(CredentialSource):
    def secret_refs(self, spec: api.PolicySpec) -> list[api.SecretRef]:
        return [spec["apiKey"]["secretRef"]] if "apiKey" in spec else []

    def mint(self, ctx: MintContext) -> Credential:
        ref = ctx.policy["spec"]["apiKey"]["secretRef"]
        return apikey.mint(ctx.secret(ref), key=ref["key"], secret_name=ref["name"])


class AWSCredentialsSource(CredentialSource):
    def __init__(
        self,
        *,
        clients: Clients,
        tokens: oidc.TokenSource,
        service_accounts: ServiceAccountTokens,
        iam_grace: float = 300.0,
    ) -> None:
        self._clients = clients
        self._tokens = tokens
        self._service_accounts = service_accounts
        self._iam_grace = iam_grace

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

    def mints(self, spec: api.PolicySpec) -> bool:
        return "awsCredentials" in spec and "credentialsFile" not in spec["awsCredentials"]

    def mint(self, ctx: MintContext) -> Credential:
        aws = ctx.policy["spec"]["awsCredentials"]
        region = aws["region"]
        if "credentialsFile" in aws:
            file = aws["credentialsFile"]
            ref = file["secretRef"]
            return aws_file.mint(
                ctx.secret(ref),
                key=ref["key"],
                profile=file["profile"],
                region=region,
                secret_name=ref["name"],
            )
        if "oidcExchangeToken" in aws:
            exchange = aws["oidcExchangeToken"]
            token = self._tokens.token(oidc_client(ctx, exchange["oidc"])).value
            return self._assume(
                ctx, exchange["awsRoleArn"], exchange["sessionDuration"], token, region
            )
        if "serviceAccountToken" in aws:
            sa = aws["serviceAccountToken"]
            token = self._service_accounts.token(
                ctx.namespace, sa["serviceAccountName"], audience=sa["audience"]
            )
            return self._assume(ctx, sa["awsRoleArn"], sa["sessionDuration"], token, region)
        if "iamAccessKey" in aws:
            key = aws["iamAccessKey"]
            return iam.rotate(
                self._clients,
                admin=self._admin(ctx, key["secretRef"]),
                rotation=iam.KeyRotation(key["userName"], region, self._iam_grace),
                current=ctx.current,
                new_key_due=ctx.current is None or ctx.forced or ctx.now >= self._interval_due(ctx),
                now=ctx.now,
            )
        raise UnsupportedSource("no AWS credential source is set")

    def due_at(self, ctx: MintContext) -> float | None:
        if "iamAccessKey" not in ctx.policy["spec"].get("awsCredentials", {}):
            return super().due_at(ctx)
        times = [self._interval_due(ctx), iam.retire_due(ctx.current)]
        return min((t for t in times if t is not None), default=None)

    def finalizer(self, spec: api.PolicySpec) -> str | None:
        return api.FINALIZER_IAM_KEY if "iamAccessKey" in spec.get("awsCredentials", {}) else None

    def release(self, ctx: MintContext) -> None:
        aws = ctx.policy["spec"].get("awsCredentials", {})
        if "iamAccessKey" in aws:
            key = aws["iamAccessKey"]
            iam.release(
                self._clients,
                admin=self._admin(ctx, key["secretRef"]),
                rotation=iam.KeyRotation(key["userName"], aws["region"], self._iam_grace),
                current=ctx.current,
            )

    def _interval_due(self, ctx: MintContext) -> float:
        c = ctx.current
        if c is None or c.issued_at is None:
            return ctx.now
        interval = durations.parse(
            ctx.policy["spec"]["awsCredentials"]["iamAccessKey"]["rotationInterval"]
        )
        return schedule.interval_time(
            issued_at=c.issued_at, interval=interval, settings=ctx.settings, seed=ctx.seed
        )

    def _assume(
        self, ctx: MintContext, role_arn: str, duration: str, token: str, region: str
    ) -> Credential:
        credential = sts.assume_role_with_web_identity(
            self._clients,
            role_arn=role_arn,
            session=sts.session_name(ctx.namespace, ctx.name),
            web_identity_token=token,
            duration_seconds=int(durations.parse(duration)),
            region=region,
        )
        return Credential(credential.data, credential.expires_at, ctx.now, credential.state)

    @staticmethod
    def _admin(ctx: MintContext, ref: api.SecretRef) -> formats.AWSKeys:
        return formats.parse_aws_credentials(
            ctx.secret_text(ref),
            profile="default",
            where=f"Secret {ref['name']} key {ref['key']!r}",
        )


def oidc_client(ctx: MintContext, spec: api.OIDC) -> oidc.Client:
    return oidc.Client(
        issuer=spec["issuer"],
        client_id=spec["clientID"],
        client_secret=ctx.secret_text(spec["clientSecretRef"]),
        scopes=tuple(spec.get("scopes") or ()),
        audience=spec.get("audience"),
    )


def rotation_settings(spec: api.PolicySpec) -> schedule.RotationSettings:
    rotation = spec.get("rotation") or {}
    before = rotation.get("renewBefore")
    return schedule.RotationSettings(
        renew_before=durations.parse(before) if before else None,
        renew_before_percentage=rotation.get("renewBeforePercentage"),
        jitter_percentage=rotation.get("jitter", 10),
    )
