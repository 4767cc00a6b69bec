"""A policy's hold on what outlives it: the finalizer that keeps a policy with external
credentials (an IAM key) until they are given back, the in-use finalizers that keep the Secrets
that release needs, and the release itself when the policy is deleted.

A release that cannot happen keeps the finalizer, says why in ``Ready`` (reason
``ReleaseFailed``) and retries with backoff; ``rotator.dev/skip-release: "true"`` is the way
out. A transient failure is raised, for the controller's backoff.
"""

from __future__ import annotations

import contextlib
from typing import Any, cast

import structlog

from controllers.reconcilers import api, derived
from controllers.reconcilers.credentialsources import CredentialSource, SourceContext
from controllers.reconcilers.policy import report
from controllers.reconcilers.policy.issue import Caches, SourceReads
from controllers.runtime import apiclient, apply, objects
from controllers.runtime import client as clients
from controllers.runtime import clock as clocks
from controllers.runtime import errors as api_errors
from controllers.runtime.reconcile import Result
from rotator import errors

log = structlog.get_logger("controllers.reconcilers.policy")


class Release:
    def __init__(
        self,
        *,
        api_client: apiclient.Writer,
        caches: Caches,
        writer: report.Writer,
        clock: clocks.Clock,
    ) -> None:
        self._api = api_client
        self._managed = caches.managed_secrets
        self._secrets = caches.secrets
        self._writer = writer
        self._clock = clock

    def ensure_finalizer(self, policy: api.Policy, source: CredentialSource) -> api.Policy:
        """The source's finalizer on the policy, its Secrets protected first: the policy never
        holds external credentials that its release could not give back.

        Returns the policy as the rest of the reconcile must see it: after a finalizer write,
        with the resourceVersion that write produced, so the status write's precondition names
        the version this reconcile itself made (not the cached one it moved on from, which the
        API server would refuse with a Conflict and cost a second reconcile). If the write
        shows another change too (a new generation), the cached policy is kept and the status
        write's Conflict sends the reconcile round again, as it should."""
        wanted = source.finalizer(policy["spec"])
        if wanted is None or wanted in (objects.meta(policy).get("finalizers") or []):
            return policy
        self.protect(policy, source)
        written = objects.meta(self._apply_finalizers(policy, [wanted]))
        meta = objects.meta(policy)
        if written.get("generation") != meta.get("generation"):
            return policy
        return cast(
            api.Policy,
            {
                **policy,
                "metadata": {
                    **meta,
                    "finalizers": written.get("finalizers") or [wanted],
                    "resourceVersion": written.get("resourceVersion"),
                },
            },
        )

    def protect(self, policy: api.Policy, source: CredentialSource) -> None:
        """Puts the policy's in-use finalizer on the Secrets its release needs (a strategic
        merge adds it to the list, and never creates a missing Secret)."""
        self._in_use(
            policy, source, {"finalizers": [api.in_use_finalizer(policy["metadata"]["uid"])]}
        )

    def unprotect(self, policy: api.Policy, source: CredentialSource) -> None:
        finalizer = api.in_use_finalizer(policy["metadata"]["uid"])
        self._in_use(policy, source, {"$deleteFromPrimitiveList/finalizers": [finalizer]})

    def _in_use(
        self, policy: api.Policy, source: CredentialSource, metadata: dict[str, Any]
    ) -> None:
        for name in source.protected_secrets(policy["spec"]):
            with contextlib.suppress(api_errors.NotFound):  # mint says SecretNotFound
                self._api.patch(
                    objects.SECRETS,
                    name,
                    {"metadata": metadata},
                    namespace=objects.namespace(policy),
                    patch_type=clients.PatchType.STRATEGIC,
                )

    def finalize(self, policy: api.Policy, source: CredentialSource | None) -> Result:
        """Gives back the policy's external credentials, then lets it go."""
        finalizers = objects.meta(policy).get("finalizers") or []
        if api.FINALIZER_IAM_KEY not in finalizers:
            return Result()
        if source is not None:
            now = self._clock.now()
            annotations = objects.meta(policy).get("annotations") or {}
            if annotations.get(api.SKIP_RELEASE_ANNOTATION) == "true":
                self._writer.release_skipped(policy)
            else:
                served = derived.read(self._managed.get(derived.key(policy)))
                ctx = SourceContext(
                    policy,
                    SourceReads(self._secrets, objects.namespace(policy)),
                    now=now,
                    current=served.credential if served else None,
                )
                try:
                    source.release(ctx)
                except errors.CredentialError as exc:
                    if exc.transient:
                        raise  # retried with backoff; the policy waits for its keys to be deleted
                    return self._writer.carry_out(
                        policy, report.release_failed(policy, exc, now=now)
                    )
            self.unprotect(policy, source)
        self._apply_finalizers(policy, [])
        log.info("policy.finalized")
        return Result()

    def _apply_finalizers(self, policy: api.Policy, finalizers: list[str]) -> objects.Body:
        return apply.apply(
            self._api,
            api.POLICIES,
            {
                "apiVersion": api.API_VERSION,
                "kind": "BackendSecurityPolicy",
                "metadata": {
                    "name": objects.name(policy),
                    "namespace": objects.namespace(policy),
                    "finalizers": finalizers,
                },
            },
            field_manager=api.FIELD_MANAGER,
        )
