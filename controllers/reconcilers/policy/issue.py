"""Obtaining a credential and putting it into the derived Secret (cert-manager's ``issuing``):
mint or copy (:meth:`Issuer.obtain`), write (:meth:`Issuer.serve`), and undo a mint whose
credential could not be served — the compensation, in the same reconcile.

A non-idempotent mint (an IAM key) is decided on a live read of the derived Secret
(:meth:`Issuer.cache_behind`), never on a cache that may not hold rotator's own last write yet.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

import structlog

from controllers.reconcilers import api, derived
from controllers.reconcilers.cache import indexes, ownwrites
from controllers.reconcilers.credentialsources import CredentialSource, SourceContext
from controllers.reconcilers.policy.decide import source_names
from controllers.runtime import apiclient, apply, objects
from controllers.runtime import errors as api_errors
from controllers.runtime.cache import FullObjects
from controllers.runtime.store import Store
from rotator import errors
from rotator.credentials import Credential

log = structlog.get_logger("controllers.reconcilers.policy")


class WriteForbidden(errors.CredentialError):
    """The controller's RBAC does not allow writing the derived Secret."""

    reason = api.REASON_FORBIDDEN


@dataclass(frozen=True)
class Issued:
    """A credential this reconcile is about to serve, and how it was obtained."""

    credential: Credential
    minted: bool
    """From the provider (False: copied from the policy's Secrets)."""
    copied_from: str | None = None
    """For a copy, the ``rotator.dev/source-version`` of the Secrets it was copied from
    (None: not recorded, and the next reconcile reads them again)."""


class SourceReads:
    """The :data:`~.credentialsources.SecretGetter` a reconcile hands its source: Secrets of the
    policy's own namespace, through the :class:`FullObjectReader`, remembering the
    resourceVersion of each body returned — what a copy records as
    ``rotator.dev/source-version``: the versions actually read, not the cache's idea of them."""

    def __init__(self, secrets: FullObjects, namespace: str) -> None:
        self._secrets = secrets
        self._namespace = namespace
        self.versions: dict[str, str] = {}

    def __call__(self, name: str) -> Mapping[str, str] | None:
        secret = self._secrets.get(self._namespace, name)
        if secret is None:
            return None
        md = objects.meta(secret)
        self.versions[name] = md.get("resourceVersion", "")
        return dict(secret.get("data") or {})

    def source_version(self, names: list[str]) -> str | None:
        """The ``rotator.dev/source-version`` of what was read from ``names``; None unless every
        one was read."""
        if not names or any(n not in self.versions for n in names):
            return None
        return derived.source_version(self.versions[n] for n in names)


def whole_seconds(credential: Credential) -> Credential:
    """Times as the derived Secret's annotations hold them (RFC 3339, whole seconds; expiry
    rounded down), so the schedule computed now equals the one computed from the cache later."""
    return dataclasses.replace(
        credential,
        issued_at=math.floor(credential.issued_at) if credential.issued_at is not None else None,
        expires_at=math.floor(credential.expires_at) if credential.expires_at is not None else None,
    )


@dataclass(frozen=True)
class Caches:
    """What the policy reconciler's parts read: the informers' stores, and the Secret bodies
    behind the all-Secrets metadata cache."""

    policies: Store
    managed_secrets: Store
    """The Secrets rotator writes (derived Secrets among them)."""
    secrets: FullObjects
    secret_versions: Store
    """The metadata (resourceVersion) of every Secret."""


class Issuer:
    def __init__(
        self, *, api_client: apiclient.ApiClient, caches: Caches, own_writes: ownwrites.OwnWrites
    ) -> None:
        self._api = api_client
        self._policies = caches.policies
        self._managed = caches.managed_secrets
        self._secrets = caches.secrets
        self._own_writes = own_writes

    def reads(self, namespace: str) -> SourceReads:
        return SourceReads(self._secrets, namespace)

    def obtain(
        self, policy: api.Policy, source: CredentialSource, ctx: SourceContext
    ) -> Credential | errors.CredentialError:
        """The source's credential, or why there is none: every failure a CredentialError."""
        try:
            return source.obtain(ctx)
        except errors.CredentialError as exc:
            return exc
        except Exception as exc:  # a provider error we failed to map: a bug, not a reason to loop
            # Only the type is logged: unmapped exceptions may carry response bodies.
            log.error("policy.unexpected_provider_error", error_type=type(exc).__name__)
            return errors.ProviderUnavailable(
                f"unexpected {type(exc).__name__} from the {policy['spec']['type']} provider"
            )

    def issued(
        self,
        policy: api.Policy,
        source: CredentialSource,
        credential: Credential,
        *,
        now: float,
        reads: SourceReads,
        minted: bool,
    ) -> Issued:
        """What :meth:`obtain` gave, as the derived Secret will hold it: a mint the provider did
        not date was issued ``now``; a copy records the versions ``reads`` read it at."""
        if minted and credential.issued_at is None:
            credential = dataclasses.replace(credential, issued_at=now)
        copied_from = None if minted else reads.source_version(source_names(source, policy))
        return Issued(whole_seconds(credential), minted=minted, copied_from=copied_from)

    def cache_behind(self, policy: api.Policy) -> bool:
        """Whether the derived Secret on the API server is not the one in the cache."""
        md = policy["metadata"]
        name = api.derived_secret_name(md["name"])
        try:
            live = self._api.get(
                objects.SECRETS, name, namespace=md["namespace"], metadata_only=True
            )
        except api_errors.NotFound:
            live = None
        cached = self._managed.get(derived.key(policy))
        version = objects.meta(live).get("resourceVersion") if live is not None else None
        return version != (objects.meta(cached).get("resourceVersion") if cached else None)

    def serve(
        self, policy: api.Policy, source: CredentialSource, issued: Issued, ctx: SourceContext
    ) -> derived.Change | WriteForbidden:
        """Writes ``issued`` into the derived Secret. A write that fails undoes a mint (the new
        credential is nobody's); one RBAC forbids is the user's to fix, and returned to be
        reported; any other is raised for the controller's backoff."""
        try:
            change = self.write(policy, issued)
        except Exception as exc:
            if issued.minted:
                self._discard(source, issued.credential, ctx)
            if isinstance(exc, api_errors.Forbidden):
                return WriteForbidden(f"rotator may not write Secrets here: {exc}")
            raise
        if issued.copied_from is not None:
            self._release_sources(policy, source)
        return change

    def write(self, policy: api.Policy, issued: Issued) -> derived.Change:
        """Writes the derived Secret if it differs from the cached one; says what changed."""
        answered = (objects.meta(policy).get("annotations") or {}).get(
            api.ROTATE_REQUESTED_ANNOTATION
        )
        desired = derived.build(
            policy,
            issued.credential,
            minted=issued.minted,
            answered_request=answered,
            copied_from=issued.copied_from,
        )
        md = desired["metadata"]
        key = derived.key(policy)
        actual = self._managed.get(key)
        known = self._own_writes.unseen(key, actual) or actual  # the cache may lag our write
        if known is None:
            change = derived.Change.CREATED
        elif (known.get("data") or {}) != desired["data"]:
            change = derived.Change.ROTATED
        else:
            # the same data: an earlier form of its spec hash that still reads is kept
            derived.keep_recorded_spec_hash(desired, known, policy["spec"])
            if not apply.subset(md, known.get("metadata")) or derived.stale_annotations(
                known, md["annotations"]
            ):
                change = derived.Change.REPAIRED  # metadata edited, or state no longer applies
            else:
                return derived.Change.NONE
        written = self._own_writes.apply_secret(self._api, desired, actual)
        if leftover := derived.stale_annotations(written, md["annotations"]):
            # set by hand (another field manager owns them), which an apply cannot remove
            written = self._api.patch(
                objects.SECRETS,
                md["name"],
                derived.without_annotations(written, leftover),
                namespace=md["namespace"],
                field_manager=api.FIELD_MANAGER,
            )
        log.info("policy.derived_secret_written", secret_name=md["name"], change=change.value)
        return change

    def _discard(
        self, source: CredentialSource, credential: Credential, ctx: SourceContext
    ) -> None:
        try:
            source.discard(ctx, credential)
        except Exception as exc:  # the next rotation converges what is left (level-triggered)
            log.warning("policy.discard_failed", error_type=type(exc).__name__)
        else:
            log.info("policy.minted_credential_discarded")

    def _release_sources(self, policy: api.Policy, source: CredentialSource) -> None:
        """Drops the kept bodies of the Secrets a copy was just made from: the derived Secret
        records their versions, so this policy reads them again only once they change. A body
        another policy also reads is kept for it (one GET per source change however many
        policies copy it), and so is one whose copy failed (its retries read nothing)."""
        namespace = objects.namespace(policy)
        for name in source_names(source, policy):
            key = objects.make_key(namespace, name)
            if len(self._policies.by_index(indexes.POLICY_BY_SECRET, key)) <= 1:
                self._secrets.forget(namespace, name)
