"""The policy reconcile, start to end: read what is served, decide (:mod:`.decide`), issue
(:mod:`.issue`), report (:mod:`.report`); a deleted policy is released (:mod:`.release`)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Collection, Mapping
from typing import cast

import structlog

from controllers.reconcilers import api, derived
from controllers.reconcilers.cache import ownwrites
from controllers.reconcilers.credentialsources import (
    ControllerIdentityNotAllowed,
    CredentialSource,
    SourceContext,
    UnsupportedSource,
    controller_identity_refusal,
    rotation_settings,
)
from controllers.reconcilers.metrics import CredentialMetrics
from controllers.reconcilers.policy import decide, issue, release, report
from controllers.reconcilers.policy.decide import RefreshReason
from controllers.runtime import apiclient, eventsink, objects
from controllers.runtime import clock as clocks
from controllers.runtime.cache import FullObjects
from controllers.runtime.reconcile import Request, Result
from controllers.runtime.store import Store
from rotator import errors
from rotator.credentials import Credential

log = structlog.get_logger("controllers.reconcilers.policy")


class PolicyReconciler:
    def __init__(
        self,
        *,
        api_client: apiclient.ApiClient,
        policies: Store,
        managed_secrets: Store,
        secrets: FullObjects,
        secret_versions: Store,
        sources: Mapping[str, CredentialSource],
        recorder: eventsink.EventSink,
        metrics: CredentialMetrics,
        own_writes: ownwrites.OwnWrites,
        clock: clocks.Clock,
        controller_identity_namespaces: Collection[str] = frozenset(),
    ) -> None:
        """``controller_identity_namespaces``: where a spec may use the controller's own cloud
        identity (``--controller-identity-namespaces``; ``*``: all). Defaults to none."""
        caches = issue.Caches(policies, managed_secrets, secrets, secret_versions)
        self._caches = caches
        self._sources = sources
        self._clock = clock
        self._identity_namespaces = controller_identity_namespaces
        self._issuer = issue.Issuer(api_client=api_client, caches=caches, own_writes=own_writes)
        self._writer = report.Writer(
            api_client=api_client, recorder=recorder, metrics=metrics, clock=clock
        )
        self._release = release.Release(
            api_client=api_client, caches=caches, writer=self._writer, clock=clock
        )

    def reconcile(self, request: Request) -> Result:
        cached = self._caches.policies.get(request.key)
        if cached is None:
            self._writer.forget(request)
            return Result()  # the derived Secret goes with its owner (garbage collector)
        policy = cast(api.Policy, cached)
        source = self._sources.get(policy["spec"]["type"])
        if objects.is_being_deleted(policy):
            return self._release.finalize(policy, source)
        served = derived.read(self._caches.managed_secrets.get(derived.key(policy)))
        self._writer.observed(policy, served)
        reads = self._issuer.reads(request.namespace)
        ctx = SourceContext(
            policy,
            reads,
            now=self._clock.now(),
            current=served.credential if served else None,
            settings=rotation_settings(policy["spec"]),
        )
        if source is None:
            kind = policy["spec"]["type"]
            unsupported = UnsupportedSource(
                f"this version of rotator cannot mint {kind} credentials"
            )
            return self._failed(policy, None, unsupported, ctx)
        policy = self._release.ensure_finalizer(policy, source)
        refusal = self._identity_refusal(policy, source)
        decision = decide.decide(
            decide.Inputs(
                policy,
                served,
                source,
                ctx,
                refusal=refusal,
                cached_version=functools.partial(self._cached_version, request.namespace),
            )
        )
        if decision.reason is RefreshReason.UNTRUSTED_SPEC_HASH:
            self._writer.untrusted_spec_hash(policy, served)
        if decision.reason is None:
            assert served is not None
            if source.calls_provider(policy["spec"]):
                return self._serving(policy, source, served.credential, derived.Change.NONE, ctx)
            # Copied from the very Secret versions the metadata cache shows: nothing to read.
            # Served through the write path all the same, so edited metadata is repaired.
            kept = issue.Issued(
                Credential(served.credential.data),  # a copy never expires
                minted=False,
                copied_from=served.source_version,
            )
            return self._serve(policy, source, kept, ctx)
        forced = dataclasses.replace(ctx, forced=decision.reason.forced)
        return self._refresh(
            policy, source, forced, reason=decision.reason, refusal=refusal, reads=reads
        )

    def _identity_refusal(
        self, policy: api.Policy, source: CredentialSource
    ) -> ControllerIdentityNotAllowed | None:
        """The controller-identity rule, for every source alike: a spec that wears the
        controller's own identity outside ``--controller-identity-namespaces`` is refused
        before any provider call, and a credential served under an earlier list is due at once
        (:attr:`RefreshReason.CONTROLLER_IDENTITY_NOT_ALLOWED`), never renewed."""
        if not source.uses_controller_identity(policy["spec"]):
            return None
        return controller_identity_refusal(self._identity_namespaces, objects.namespace(policy))

    def _cached_version(self, namespace: str, name: str) -> str | None:
        cached = self._caches.secret_versions.get(objects.make_key(namespace, name))  # its own
        return None if cached is None else str(objects.meta(cached).get("resourceVersion", ""))

    def _refresh(
        self,
        policy: api.Policy,
        source: CredentialSource,
        ctx: SourceContext,
        *,
        reason: RefreshReason,
        refusal: ControllerIdentityNotAllowed | None,
        reads: issue.SourceReads,
    ) -> Result:
        """Mints (or copies) a new credential and serves it."""
        if reason.mints and not source.idempotent(policy["spec"]):
            if self._issuer.cache_behind(policy):
                log.info(
                    "policy.cache_behind", why="the derived Secret changed since it was cached"
                )
                return Result(requeue_after=1.0)  # its watch event is on the way
            self._release.protect(policy, source)
        got = refusal if refusal is not None else self._issuer.obtain(policy, source, ctx)
        if reason.mints:
            self._writer.rotated(policy, ok=not isinstance(got, errors.CredentialError))
        if isinstance(got, errors.CredentialError):
            return self._failed(policy, source, got, ctx)
        if reason.mints:
            log.info("policy.credentials_minted", why=reason.value)
        issued = self._issuer.issued(
            policy, source, got, now=ctx.now, reads=reads, minted=reason.mints
        )
        return self._serve(policy, source, issued, ctx)

    def _serve(
        self, policy: api.Policy, source: CredentialSource, issued: issue.Issued, ctx: SourceContext
    ) -> Result:
        change = self._issuer.serve(policy, source, issued, ctx)
        if isinstance(change, issue.WriteForbidden):
            # RBAC is missing a rule: say so where the user looks, and back off
            return self._failed(policy, source, change, ctx)
        return self._serving(policy, source, issued.credential, change, ctx)

    def _serving(
        self,
        policy: api.Policy,
        source: CredentialSource,
        credential: Credential,
        change: derived.Change,
        ctx: SourceContext,
    ) -> Result:
        due = (
            decide.due_at(source, dataclasses.replace(ctx, current=credential))
            if source.calls_provider(policy["spec"])
            else None
        )
        outcome = report.serving(policy, credential, ctx, change=change, due=due)
        return self._writer.carry_out(policy, outcome)

    def _failed(
        self,
        policy: api.Policy,
        source: CredentialSource | None,
        exc: errors.CredentialError,
        ctx: SourceContext,
    ) -> Result:
        # Judged when the attempt failed, not when the reconcile began: a provider call that
        # hung across the expiry must turn the policy Expired, not "RotationFailed, valid until
        # <a time already past>".
        now = max(ctx.now, self._clock.now())
        minted = source is not None and source.calls_provider(policy["spec"])
        outcome = report.failed(policy, exc, ctx.current, now=now, minted=minted)
        return self._writer.carry_out(policy, outcome)
