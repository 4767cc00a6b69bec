"""Where credential providers plug into the policy reconciler: one :class:`CredentialSource` per
policy ``type``, built once by ``controllers.reconcilers.setup``.

(Credential sources, not the runtime's event sources of ``controllers.runtime.sources``.)
A source names the Secrets a policy references (for the Secret → policy index and for
resolution), says whether it *copies* the credential (re-derived from those Secrets on every
reconcile) or *mints* one (:meth:`~CredentialSource.calls_provider`: a provider call, made only
when needed), obtains it (:meth:`~CredentialSource.obtain`), says when it is next due, whether
a spec wears the controller's own identity (:meth:`~CredentialSource.uses_controller_identity`:
the reconciler, not the source, then holds it to ``--controller-identity-namespaces``), and gives
back external resources when the policy goes. Adding a credential type is adding a
source here and a provider in ``rotator.providers``; the reconciler does not change.

One module per policy type: ``apikey``, ``aws``, ``gcp``, ``azure``.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from controllers.reconcilers import api
from rotator import durations, errors, oidc, schedule
from rotator.credentials import Credential


class SecretNotFound(errors.InvalidInput):
    reason = api.REASON_SECRET_NOT_FOUND


class UnsupportedSource(errors.InvalidInput):
    """The spec is valid but this build of rotator cannot obtain a credential from that source."""

    reason = api.REASON_UNSUPPORTED_CREDENTIAL_SOURCE


CONTROLLER_IDENTITY_FLAG = "--controller-identity-namespaces"


class ControllerIdentityNotAllowed(errors.InvalidInput):
    """A policy asks for the controller's own cloud identity (``controllerIdentity``) in a
    namespace the operator did not list in ``--controller-identity-namespaces``."""

    reason = api.REASON_CONTROLLER_IDENTITY_NOT_ALLOWED


def parse_controller_identity_namespaces(text: str) -> frozenset[str]:
    """The flag's value: comma-separated namespaces, ``*`` for all, empty for none."""
    return frozenset(part.strip() for part in text.split(",") if part.strip())


def controller_identity_refusal(
    allowed: Collection[str], namespace: str
) -> ControllerIdentityNotAllowed | None:
    """Why policies of ``namespace`` may not use the controller's own identity, or None when
    they may. Tenancy: that identity belongs to the controller, not to whoever may write a
    policy; the operator hands it to namespaces one by one (``*``: all, explicitly), and by
    default to none. The policy reconciler asks this for every source alike, before any
    provider call, and of a served credential too: a namespace taken off the list is refused at
    once, not at its next renewal."""
    if "*" in allowed or namespace in allowed:
        return None
    return ControllerIdentityNotAllowed(
        f"policies in namespace {namespace} may not use the controller's own identity: "
        f"the controller's {CONTROLLER_IDENTITY_FLAG} flag does not list {namespace}"
    )


SecretGetter = Callable[[str], Mapping[str, str] | None]
"""Secret name (in the policy's namespace) → its ``data`` (base64 values), or None if absent."""


@dataclass(frozen=True)
class SourceContext:
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

    def calls_provider(self, spec: api.PolicySpec) -> bool:
        return False

    def uses_controller_identity(self, spec: api.PolicySpec) -> bool:
        """Whether ``spec`` mints with the controller's own cloud identity
        (``controllerIdentity``): the reconciler allows it only in the namespaces of
        ``--controller-identity-namespaces``, so a source never checks that itself."""
        return False

    def obtain(self, ctx: SourceContext) -> Credential:
        """The credential to serve: copied from the referenced Secrets, or minted."""
        raise NotImplementedError

    def due_at(self, ctx: SourceContext) -> float | None:
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

    def release(self, ctx: SourceContext) -> None:
        """Gives back what the policy holds outside the cluster (it is being deleted)."""

    def idempotent(self, spec: api.PolicySpec) -> bool:
        """Whether minting twice from the same state is harmless. A non-idempotent mint (it
        creates something outside the cluster, like an IAM key) is decided on a live read of the
        derived Secret, never on a cache that may not hold rotator's own last write yet."""
        return True

    def discard(self, ctx: SourceContext, minted: Credential) -> None:
        """Undoes a mint whose credential could not be served (writing the derived Secret
        failed): the compensation, run in the same reconcile."""

    def protected_secrets(self, spec: api.PolicySpec) -> list[str]:
        """Secrets (of the policy's namespace) that :meth:`release` needs: rotator keeps them
        from being deleted while the policy holds external credentials."""
        return []


def oidc_client(ctx: SourceContext, spec: api.OIDC) -> oidc.Client:
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
