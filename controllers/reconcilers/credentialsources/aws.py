"""AWS: static files (copied), STS web-identity sessions and IAM user keys (minted)."""

from __future__ import annotations

from controllers.reconcilers import api
from controllers.reconcilers.credentialsources import (
    CredentialSource,
    SourceContext,
    UnsupportedSource,
    oidc_client,
)
from controllers.reconcilers.tokens import ServiceAccountTokens
from rotator import durations, formats, oidc, schedule
from rotator.credentials import Credential
from rotator.providers.aws import file as aws_file
from rotator.providers.aws import iam, sts
from rotator.providers.aws.clients import Clients


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

    def calls_provider(self, spec: api.PolicySpec) -> bool:
        return "awsCredentials" in spec and "credentialsFile" not in spec["awsCredentials"]

    def obtain(self, ctx: SourceContext) -> Credential:
        aws = ctx.policy["spec"]["awsCredentials"]
        region = aws["region"]
        if "credentialsFile" in aws:
            file = aws["credentialsFile"]
            ref = file["secretRef"]
            return aws_file.copy_profile(
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
                ctx.namespace, sa["serviceAccountName"], audience=sa["audience"], policy=ctx.name
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

    def due_at(self, ctx: SourceContext) -> float | None:
        if "iamAccessKey" not in ctx.policy["spec"].get("awsCredentials", {}):
            return super().due_at(ctx)
        times = [self._interval_due(ctx), iam.retire_due(ctx.current)]
        return min((t for t in times if t is not None), default=None)

    def finalizer(self, spec: api.PolicySpec) -> str | None:
        return api.FINALIZER_IAM_KEY if "iamAccessKey" in spec.get("awsCredentials", {}) else None

    def release(self, ctx: SourceContext) -> None:
        if (keys := self._iam_keys(ctx)) is not None:
            iam.release(self._clients, admin=keys[0], rotation=keys[1], current=ctx.current)

    def idempotent(self, spec: api.PolicySpec) -> bool:
        return "iamAccessKey" not in spec.get("awsCredentials", {})

    def discard(self, ctx: SourceContext, minted: Credential) -> None:
        if (keys := self._iam_keys(ctx)) is not None:
            iam.discard(self._clients, admin=keys[0], rotation=keys[1], minted=minted)

    def _iam_keys(self, ctx: SourceContext) -> tuple[formats.AWSKeys, iam.KeyRotation] | None:
        """The management identity and the rotation of an IAM key policy; None otherwise."""
        aws = ctx.policy["spec"].get("awsCredentials", {})
        if "iamAccessKey" not in aws:
            return None
        key = aws["iamAccessKey"]
        return (
            self._admin(ctx, key["secretRef"]),
            iam.KeyRotation(key["userName"], aws["region"], self._iam_grace),
        )

    def protected_secrets(self, spec: api.PolicySpec) -> list[str]:
        aws = spec.get("awsCredentials", {})
        return [aws["iamAccessKey"]["secretRef"]["name"]] if "iamAccessKey" in aws else []

    def _interval_due(self, ctx: SourceContext) -> float:
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
        self, ctx: SourceContext, role_arn: str, duration: str, token: str, region: str
    ) -> Credential:
        return sts.assume_role_with_web_identity(
            self._clients,
            role_arn=role_arn,
            session=sts.session_name(ctx.namespace, ctx.name),
            web_identity_token=token,
            duration_seconds=int(durations.parse(duration)),
            region=region,
        )

    @staticmethod
    def _admin(ctx: SourceContext, ref: api.SecretRef) -> formats.AWSKeys:
        return formats.parse_aws_credentials(
            ctx.secret_text(ref),
            profile="default",
            where=f"Secret {ref['name']} key {ref['key']!r}",
        )
