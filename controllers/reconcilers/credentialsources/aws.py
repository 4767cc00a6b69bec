"""AWS: static files (copied), STS web-identity sessions and IAM user keys (minted), the
controller's own identity, and role chaining (``assumeRole``) on top of any of them but IAM keys.

A chain is a base session — the credentials file's keys, a web-identity session, or the
controller's identity (botocore's default chain) — and an STS ``AssumeRole`` signed with it; the
chained session is what is served, with the earlier of the two expiries
(``rotator.providers.aws.sts``). ``controllerIdentity`` is only ever a base (the CRD requires
``assumeRole`` with it): the controller's own keys, long-lived ones included, are never served,
and only the namespaces the operator lists may use it (the policy reconciler holds it to
``--controller-identity-namespaces``: :meth:`uses_controller_identity`).

``iamAccessKey`` cannot be chained (the CRD refuses it): its rotation keeps the served key's id
in the derived Secret, where a chained session would have to take its place, and the next
rotation would need the IAM key's secret, which rotator would then have to keep in a Secret of
its own — a long-lived key stored to serve short-lived ones. Chain from a ``credentialsFile``
holding that user's key instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
from rotator.lazy import Lazy
from rotator.observe import Observer
from rotator.providers.aws import file as aws_file
from rotator.providers.aws import iam, sts

if TYPE_CHECKING:  # they import boto3 and botocore: loaded by the first AWS call (lazy_clients)
    from rotator.providers.aws.clients import Clients
    from rotator.providers.aws.identity import ControllerIdentity

CONTROLLER_IDENTITY_FIELD = "spec.awsCredentials.controllerIdentity"


def lazy_clients(observer: Observer, *, concurrency: int) -> Lazy[Clients]:
    """The boto3 clients of every AWS policy, made — and boto3 imported — when the first one
    calls AWS: a policy that only copies a credentials file never does."""

    def build() -> Clients:
        from rotator.providers.aws.clients import Clients  # noqa: PLC0415 - boto3, on first use

        return Clients(observer, concurrency=concurrency)

    return Lazy(build, what="the AWS SDK (boto3)")


class AWSCredentialsSource(CredentialSource):
    def __init__(
        self,
        *,
        clients: Clients | Lazy[Clients],
        tokens: oidc.TokenSource,
        service_accounts: ServiceAccountTokens,
        iam_grace: float = 300.0,
        identity: ControllerIdentity | Lazy[ControllerIdentity] | None = None,
    ) -> None:
        self._clients = Lazy.of(clients)
        self._tokens = tokens
        self._service_accounts = service_accounts
        self._iam_grace = iam_grace
        self._identity = Lazy.of(identity) if identity is not None else Lazy(self._own_identity)

    def _own_identity(self) -> ControllerIdentity:
        """botocore's default chain over the policies' clients (built on its first use)."""
        from rotator.providers.aws.identity import ControllerIdentity  # noqa: PLC0415 - botocore

        return ControllerIdentity(self._clients.get())

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
        aws = spec.get("awsCredentials")
        return aws is not None and ("credentialsFile" not in aws or "assumeRole" in aws)

    def uses_controller_identity(self, spec: api.PolicySpec) -> bool:
        return "controllerIdentity" in spec.get("awsCredentials", {})

    def obtain(self, ctx: SourceContext) -> Credential:
        aws = ctx.policy["spec"]["awsCredentials"]
        region = aws["region"]
        if "iamAccessKey" in aws:
            if "assumeRole" in aws:  # refused by the CRD; a spec from before the rule
                raise UnsupportedSource("assumeRole cannot be chained on an iamAccessKey source")
            key = aws["iamAccessKey"]
            admin = self._admin(ctx, key["secretRef"])
            return iam.rotate(
                self._clients.get(),
                admin=admin,
                rotation=iam.KeyRotation(key["userName"], region, self._iam_grace),
                current=ctx.current,
                new_key_due=ctx.current is None or ctx.forced or ctx.now >= self._interval_due(ctx),
                now=ctx.now,
            )
        if "credentialsFile" in aws and "assumeRole" not in aws:
            file = aws["credentialsFile"]
            ref = file["secretRef"]
            return aws_file.copy_profile(
                ctx.secret(ref),
                key=ref["key"],
                profile=file["profile"],
                region=region,
                secret_name=ref["name"],
            )
        session = self._base(ctx, aws)
        if "assumeRole" in aws:
            chained = self._chained(ctx, aws["assumeRole"])
            session = sts.assume_role(self._clients.get(), session, chained, region=region)
        return sts.served(session, region=region)

    def _base(self, ctx: SourceContext, aws: api.AWSCredentialsSpec) -> sts.Session:
        """The session the policy's source gives: served as it is, or the base of a chain."""
        region = aws["region"]
        if "controllerIdentity" in aws:
            if "assumeRole" not in aws:  # refused by the CRD: never serve the controller's keys
                raise UnsupportedSource(f"{CONTROLLER_IDENTITY_FIELD} needs assumeRole")
            return self._identity.get().session()
        if "credentialsFile" in aws:
            file = aws["credentialsFile"]
            ref = file["secretRef"]
            keys = aws_file.read_profile(
                ctx.secret(ref), key=ref["key"], profile=file["profile"], secret_name=ref["name"]
            )
            return sts.Session(keys)
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
        raise UnsupportedSource("no AWS credential source is set")

    def due_at(self, ctx: SourceContext) -> float | None:
        aws = ctx.policy["spec"].get("awsCredentials", {})
        if "iamAccessKey" not in aws:
            return super().due_at(ctx)
        times = [self._interval_due(ctx), iam.retire_due(ctx.current)]
        return min((t for t in times if t is not None), default=None)

    def finalizer(self, spec: api.PolicySpec) -> str | None:
        return api.FINALIZER_IAM_KEY if "iamAccessKey" in spec.get("awsCredentials", {}) else None

    def release(self, ctx: SourceContext) -> None:
        if (keys := self._iam_keys(ctx)) is not None:
            iam.release(self._clients.get(), admin=keys[0], rotation=keys[1], current=ctx.current)

    def idempotent(self, spec: api.PolicySpec) -> bool:
        return "iamAccessKey" not in spec.get("awsCredentials", {})

    def discard(self, ctx: SourceContext, minted: Credential) -> None:
        if (keys := self._iam_keys(ctx)) is not None:
            iam.discard(self._clients.get(), admin=keys[0], rotation=keys[1], minted=minted)

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
    ) -> sts.Session:
        return sts.web_identity_session(
            self._clients.get(),
            role_arn=role_arn,
            session=sts.session_name(ctx.namespace, ctx.name),
            web_identity_token=token,
            duration_seconds=int(durations.parse(duration)),
            region=region,
        )

    @staticmethod
    def _chained(ctx: SourceContext, spec: api.AWSAssumeRole) -> sts.ChainedRole:
        return sts.ChainedRole(
            role_arn=spec["roleArn"],
            session=spec.get("sessionName") or sts.session_name(ctx.namespace, ctx.name),
            duration_seconds=int(durations.parse(spec["sessionDuration"])),
            external_id=spec.get("externalID"),
        )

    @staticmethod
    def _admin(ctx: SourceContext, ref: api.SecretRef) -> formats.AWSKeys:
        return formats.parse_aws_credentials(
            ctx.secret_text(ref),
            profile="default",
            where=f"Secret {ref['name']} key {ref['key']!r}",
        )
