"""The BackendSecurityPolicy reconciler: credentials into the derived Secret, status, and a
word to the ServiceBackends it targets.

Level-triggered. Copied credentials (API keys, static AWS files) are re-derived from their
Secrets on every reconcile. Minted credentials (STS sessions, IAM keys…) are refreshed only
when needed — the served one is missing or edited, the credential part of the spec changed, a
rotation was requested (``rotator.dev/rotate-requested-at``), or its renewal time came — and
everything that decision needs is read back from the derived Secret, so a restarted controller
reuses a valid credential without calling the provider. The reconcile then returns
``Result(requeue_after=renewal - now)``: the one timer per policy.

A failed refresh leaves the served credential in place: ``Ready`` stays True (reason
``RotationFailed``, the failure in the message) while it is valid, and turns False with reason
``Expired`` when it lapses. Retries follow ``rotator.schedule.retry_delay``: exponential,
capped, denser as expiry nears — never a hot loop.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import math
from collections.abc import Mapping
from typing import Any, cast

import structlog

from controllers.reconcilers import api, conditions, derived, echoes, indexes, spechash, status
from controllers.reconcilers.conditions import false, true
from controllers.reconcilers.credentialsources import (
    CredentialSource,
    SourceContext,
    UnsupportedSource,
    rotation_settings,
)
from controllers.reconcilers.metrics import CredentialMetrics
from controllers.runtime import apply, events, objects
from controllers.runtime import client as clients
from controllers.runtime import clock as clocks
from controllers.runtime import errors as api_errors
from controllers.runtime.cache import FullObjectReader
from controllers.runtime.reconcile import Request, Result
from controllers.runtime.store import Store
from rotator import errors, schedule
from rotator.credentials import Credential

log = structlog.get_logger(__name__)


class WriteForbidden(errors.CredentialError):
    """The controller's RBAC does not allow writing the derived Secret."""

    reason = "Forbidden"


class Change(enum.Enum):
    """What a reconcile did to the derived Secret."""

    NONE = "none"
    CREATED = "created"
    ROTATED = "rotated"
    REPAIRED = "repaired"


class PolicyReconciler:
    def __init__(
        self,
        *,
        api_client: clients.Client,
        policies: Store,
        managed_secrets: Store,
        secrets: FullObjectReader,
        secret_versions: Store,
        sources: Mapping[str, CredentialSource],
        recorder: events.EventRecorder,
        metrics: CredentialMetrics,
        own_writes: echoes.OwnWrites,
        clock: clocks.Clock,
    ) -> None:
        self._api = api_client
        self._policies = policies
        self._managed = managed_secrets
        self._secrets = secrets
        self._secret_versions = secret_versions  # the resourceVersion of every Secret
        self._sources = sources
        self._recorder = recorder
        self._metrics = metrics
        self._own_writes = own_writes
        self._clock = clock

    def reconcile(self, request: Request) -> Result:
        cached = self._policies.get(request.key)
        if cached is None:
            self._metrics.forget(request)
            return Result()  # the derived Secret goes with its owner (garbage collector)
        policy = cast(api.Policy, cached)
        source = self._sources.get(policy["spec"]["type"])
        if objects.is_being_deleted(policy):
            return self._finalize(policy, source)
        now = self._clock.now()
        served = derived.read(self._managed.get(self._derived_key(policy)))
        self._observe(policy, served)
        reads = self._secret_getter(request.namespace)
        ctx = SourceContext(
            policy,
            reads,
            now=now,
            current=served.credential if served else None,
            settings=rotation_settings(policy["spec"]),
        )
        if source is None:
            kind = policy["spec"]["type"]
            unsupported = UnsupportedSource(
                f"this version of rotator cannot mint {kind} credentials"
            )
            return self._failed(policy, unsupported, ctx)
        self._ensure_finalizer(policy, source)
        minted = source.calls_provider(policy["spec"])
        if not minted and served is not None and self._copy_is_current(policy, source, served):
            # Copied from the very Secret versions the metadata cache shows: nothing to read.
            # Served through the write path all the same, so edited metadata is repaired.
            return self._serve_new(
                policy,
                source,
                Credential(served.credential.data),  # a copy never expires
                minted=False,
                ctx=ctx,
                copied_from=served.source_version,
            )
        why = refresh_reason(policy, served, source, ctx) if minted else "copy"
        if why == UNTRUSTED_SPEC_HASH:
            self._untrusted_spec_hash(policy, served)
        if why is None:
            assert served is not None
            return self._serving(policy, source, served.credential, Change.NONE, ctx)
        return self._refresh(
            policy,
            source,
            SourceContext(**{**ctx.__dict__, "forced": why not in ("due", "copy")}),
            why=why,
            minted=minted,
            reads=reads,
        )

    def _copy_is_current(
        self, policy: api.Policy, source: CredentialSource, served: derived.Served
    ) -> bool:
        """Whether the served copy is intact, was copied for this spec, and from the versions of
        its source Secrets that the metadata cache shows now (``rotator.dev/source-version``).
        A derived Secret written before the annotation existed has none: read once, annotated."""
        if not served.intact or served.malformed or served.source_version is None:
            return False
        if spechash.judge(served.spec_hash, policy["spec"]) is not spechash.Verdict.CURRENT:
            return False
        versions = []
        for name in _source_names(source, policy):
            key = objects.make_key(objects.namespace(policy), name)  # its own namespace only
            cached = self._secret_versions.get(key)
            if cached is None:
                return False  # gone: the copy path says SecretNotFound, without a read
            versions.append(objects.meta(cached).get("resourceVersion", ""))
        return bool(versions) and derived.recorded_versions(
            served.source_version
        ) == derived.source_version(versions)

    def _refresh(
        self,
        policy: api.Policy,
        source: CredentialSource,
        ctx: SourceContext,
        *,
        why: str,
        minted: bool,
        reads: SourceReads,
    ) -> Result:
        """Mints (or copies) a new credential and serves it."""
        if minted and not source.idempotent(policy["spec"]):
            if self._cache_behind(policy):
                log.info(
                    "policy.cache_behind", why="the derived Secret changed since it was cached"
                )
                return Result(requeue_after=1.0)  # its watch event is on the way
            self._protect(policy, source)
        outcome = self._mint(policy, source, ctx)
        if minted:
            self._metrics.rotated(
                policy["spec"]["type"], ok=not isinstance(outcome, errors.CredentialError)
            )
        if isinstance(outcome, errors.CredentialError):
            return self._failed(policy, outcome, ctx)
        if minted and outcome.issued_at is None:  # the provider did not say: issued just now
            outcome = dataclasses.replace(outcome, issued_at=ctx.now)
        credential = whole_seconds(outcome)
        if minted:
            log.info("policy.credentials_minted", why=why)
        copied_from = None if minted else reads.source_version(_source_names(source, policy))
        return self._serve_new(
            policy, source, credential, minted=minted, ctx=ctx, copied_from=copied_from
        )

    def _serve_new(
        self,
        policy: api.Policy,
        source: CredentialSource,
        credential: Credential,
        *,
        minted: bool,
        ctx: SourceContext,
        copied_from: str | None = None,
    ) -> Result:
        answered = (objects.meta(policy).get("annotations") or {}).get(
            api.ROTATE_REQUESTED_ANNOTATION
        )
        try:
            change = self._write_derived(
                policy, credential, minted=minted, answered=answered, copied_from=copied_from
            )
        except Exception as exc:
            if minted:
                self._discard(source, credential, ctx)  # the new credential is nobody's
            if isinstance(exc, api_errors.Forbidden):
                # RBAC is missing a rule: say so where the user looks, and back off
                denied = WriteForbidden(f"rotator may not write Secrets here: {exc}")
                return self._failed(policy, denied, ctx)
            raise
        if copied_from is not None:
            self._release_sources(policy, source)
        return self._serving(policy, source, credential, change, ctx)

    def _discard(
        self, source: CredentialSource, credential: Credential, ctx: SourceContext
    ) -> None:
        try:
            source.discard(ctx, credential)
        except Exception as exc:  # the next rotation converges what is left (level-triggered)
            log.warning("policy.discard_failed", error_type=type(exc).__name__)
        else:
            log.info("policy.minted_credential_discarded")

    def _cache_behind(self, policy: api.Policy) -> bool:
        """Whether the derived Secret on the API server is not the one in the cache."""
        md = policy["metadata"]
        name = api.derived_secret_name(md["name"])
        try:
            live = self._api.get(
                objects.SECRETS, name, namespace=md["namespace"], metadata_only=True
            )
        except api_errors.NotFound:
            live = None
        cached = self._managed.get(self._derived_key(policy))
        version = objects.meta(live).get("resourceVersion") if live is not None else None
        return version != (objects.meta(cached).get("resourceVersion") if cached else None)

    def _mint(
        self, policy: api.Policy, source: CredentialSource, ctx: SourceContext
    ) -> Credential | errors.CredentialError:
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

    # --- derived Secret ----------------------------------------------------------------------

    def _observe(self, policy: api.Policy, served: derived.Served | None) -> None:
        """What the derived Secret holds, before anything can fail: its expiry for the alert,
        and a Warning naming annotations that no longer parse (the refresh then rewrites them)."""
        if served is None:
            return
        self._metrics.observed(
            Request.for_object(policy),
            policy["spec"]["type"],
            expires_at=served.credential.expires_at,
        )
        if served.malformed:
            log.warning("policy.malformed_annotation", annotations=list(served.malformed))
            self._recorder.event(
                policy,
                events.WARNING,
                api.REASON_MALFORMED_ANNOTATION,
                f"Secret {api.derived_secret_name(objects.name(policy))}: annotation "
                f"{', '.join(served.malformed)} does not parse; ignored, the Secret is rewritten",
            )

    def _untrusted_spec_hash(self, policy: api.Policy, served: derived.Served | None) -> None:
        """Says that the served credential is minted again because its recorded spec hash
        cannot say what it was minted for (an earlier version's form), not by accident."""
        name = api.derived_secret_name(objects.name(policy))
        recorded = served.spec_hash if served is not None else None
        log.warning("policy.untrusted_spec_hash", secret_name=name, recorded=recorded)
        self._recorder.event(
            policy,
            events.NORMAL,
            api.REASON_UNTRUSTED_SPEC_HASH,
            f"Secret {name}: its {api.SPEC_HASH_ANNOTATION} ({recorded}) was recorded by an "
            "earlier rotator that hashed no credential block, so it cannot say what the "
            "credential was minted for; minting it again, once",
        )

    def _derived_key(self, policy: api.Policy) -> objects.ObjectKey:
        md = policy["metadata"]
        return objects.make_key(md["namespace"], api.derived_secret_name(md["name"]))

    def _secret_getter(self, namespace: str) -> SourceReads:
        return SourceReads(self._secrets, namespace)

    def _release_sources(self, policy: api.Policy, source: CredentialSource) -> None:
        """Drops the kept bodies of the Secrets a copy was just made from: the derived Secret
        records their versions, so this policy reads them again only once they change. A body
        another policy also reads is kept for it (one GET per source change however many
        policies copy it), and so is one whose copy failed (its retries read nothing)."""
        namespace = objects.namespace(policy)
        for name in _source_names(source, policy):
            key = objects.make_key(namespace, name)
            if len(self._policies.by_index(indexes.POLICY_BY_SECRET, key)) <= 1:
                self._secrets.forget(namespace, name)

    def _write_derived(
        self,
        policy: api.Policy,
        credential: Credential,
        *,
        minted: bool,
        answered: str | None,
        copied_from: str | None = None,
    ) -> Change:
        """Writes the derived Secret if it differs from the cached one; says what changed."""
        desired = derived.build(
            policy, credential, minted=minted, answered_request=answered, copied_from=copied_from
        )
        md = desired["metadata"]
        key = self._derived_key(policy)
        actual = self._managed.get(key)
        known = self._own_writes.unseen(key, actual) or actual  # the cache may lag our write
        if known is None:
            change = Change.CREATED
        elif (known.get("data") or {}) != desired["data"]:
            change = Change.ROTATED
        else:
            # the same data: an earlier form of its spec hash that still reads is kept
            derived.keep_recorded_spec_hash(desired, known, policy["spec"])
            if not apply.subset(md, known.get("metadata")) or derived.stale_annotations(
                known, md["annotations"]
            ):
                change = Change.REPAIRED  # metadata edited, or state that no longer applies
            else:
                return Change.NONE
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

    # --- outcomes ----------------------------------------------------------------------------

    def _serving(
        self,
        policy: api.Policy,
        source: CredentialSource,
        credential: Credential,
        change: Change,
        ctx: SourceContext,
    ) -> Result:
        now = ctx.now
        due = (
            due_at(source, SourceContext(**{**ctx.__dict__, "current": credential}))
            if source.calls_provider(policy["spec"])
            else None
        )
        name = api.derived_secret_name(objects.name(policy))
        message = f"credentials are in Secret {name}"
        if credential.expires_at is not None:
            message += f", valid until {clocks.rfc3339(credential.expires_at)}"
        if due is not None:
            message += f", next refresh at {clocks.rfc3339(due)}"
        schedule_cond = renew_before_condition(policy, credential, ctx) if due is not None else None
        if schedule_cond is not None and schedule_cond.status == "False":
            message += f"; {schedule_cond.message}"
        old = policy.get("status") or {}
        fields: dict[str, Any] = {"derivedSecretName": name, "failedAttempts": 0}
        issued = (
            credential.issued_at
            if credential.issued_at is not None
            else (now if change in (Change.CREATED, Change.ROTATED) else None)
        )
        last_rotation = (
            clocks.rfc3339(issued) if issued is not None else old.get("lastRotationTime")
        )
        if last_rotation:
            fields["lastRotationTime"] = last_rotation
        if credential.expires_at is not None:
            fields["expirationTime"] = clocks.rfc3339(credential.expires_at)
        if due is not None:
            fields["renewalTime"] = clocks.rfc3339(due)
        if "lastFailureTime" in old:
            fields["lastFailureTime"] = old["lastFailureTime"]
        self._write_status(
            policy,
            fields,
            [
                true(api.ACCEPTED, "Accepted", "the spec is valid"),
                true(api.READY, "CredentialsReady", message),
                *([schedule_cond] if schedule_cond is not None else []),
            ],
            now,
            created=change is Change.CREATED,
        )
        if schedule_cond is not None and schedule_cond.status == "False":
            was = conditions.of(policy, api.RENEW_BEFORE_HONORED)
            if was is None or was.get("status") != "False":
                self._recorder.event(
                    policy, events.WARNING, schedule_cond.reason, schedule_cond.message
                )
        if change is Change.ROTATED:
            self._recorder.event(
                policy, events.NORMAL, "CredentialsRotated", f"new credentials in Secret {name}"
            )
        self._metrics.served(
            Request.for_object(policy),
            policy["spec"]["type"],
            expires_at=credential.expires_at,
            renews_at=due,
        )
        if due is None:
            return Result()
        # From the clock as the reconcile ends, not from ``now`` (its start): the queue counts
        # ``requeue_after`` from the return, so a delay computed at the start would fire late
        # by the reconcile's own duration (the provider call and the writes, ~0.1 s; up to the
        # deadline). Nothing re-runs the policy to correct it: its own writes' events are echoes.
        return Result(requeue_after=max(0.001, due - self._clock.now()))

    def _failed(
        self, policy: api.Policy, exc: errors.CredentialError, ctx: SourceContext
    ) -> Result:
        # Judged when the attempt failed, not when the reconcile began: a provider call that
        # hung across the expiry must turn the policy Expired, not "RotationFailed, valid until
        # <a time already past>".
        now = max(ctx.now, self._clock.now())
        old: dict[str, Any] = dict(policy.get("status") or {})
        attempts = int(old.get("failedAttempts") or 0) + 1
        fields: dict[str, Any] = {
            k: v for k, v in old.items() if k not in ("conditions", "failedAttempts")
        }
        fields.update(failedAttempts=attempts, lastFailureTime=clocks.rfc3339(now))
        current = ctx.current
        valid = current is not None and (current.expires_at is None or now < current.expires_at)
        accepted = (
            false(api.ACCEPTED, exc.reason, str(exc))
            if isinstance(exc, UnsupportedSource)
            else true(api.ACCEPTED, "Accepted", "the spec is valid")
        )
        expires_at = current.expires_at if current is not None else None
        delay = schedule.retry_delay(attempts, now=now, expires_at=expires_at)
        if valid and expires_at is not None:
            delay = min(delay, max(0.001, expires_at - now))  # turn Expired on time
        retry = f"retrying at {clocks.rfc3339(now + delay)}"
        if valid and source_calls_provider(self._sources, policy):
            until = f"valid until {clocks.rfc3339(expires_at)}" if expires_at else "still valid"
            ready = true(
                api.READY,
                "RotationFailed",
                f"the served credentials are {until}; the last refresh failed: {exc}; {retry}",
            )
        elif current is not None and not valid:
            ready = false(
                api.READY,
                "Expired",
                f"the credentials expired at {clocks.rfc3339(expires_at or now)}; "
                f"refresh failing: {exc}; {retry}",
            )
        else:
            ready = false(api.READY, exc.reason, str(exc))
        # still what is served (the expiry alert must see it), and the next attempt
        self._metrics.served(
            Request.for_object(policy),
            policy["spec"]["type"],
            expires_at=expires_at,
            renews_at=now + delay,
        )
        announced = attempts == 1 and source_calls_provider(self._sources, policy)
        # A first failure while still valid (Ready True → True/RotationFailed) is the Warning
        # below, not also a Normal Event of the same reason from the status write.
        self._write_status(
            policy,
            fields,
            [accepted, ready],
            now,
            ready_event=not (announced and ready.reason == "RotationFailed"),
        )
        if announced:
            self._recorder.event(policy, events.WARNING, "RotationFailed", f"{exc}; {retry}")
        log.warning(
            "policy.credentials_failed",
            reason=exc.reason,
            error=str(exc),
            attempts=attempts,
            retry_in=round(delay, 2),
        )
        return Result(requeue_after=delay)

    def _write_status(
        self,
        policy: api.Policy,
        fields: dict[str, Any],
        updates: list[conditions.Cond],
        now: float,
        *,
        created: bool = False,
        ready_event: bool = True,
    ) -> None:
        """``created``: this reconcile created the credentials, so a first ``Ready=True`` is
        news (the one Event a new policy records); ``ready_event`` False: the caller records
        its own Event for this transition."""
        status.write(
            self._api,
            self._recorder,
            policy,
            api.POLICIES,
            fields=fields,
            updates=updates,
            now=now,
            event_types=(api.READY,) if ready_event else (),
            announce=(api.READY,) if created else (),
        )

    # --- finalizers --------------------------------------------------------------------------

    def _ensure_finalizer(self, policy: api.Policy, source: CredentialSource) -> None:
        wanted = source.finalizer(policy["spec"])
        if wanted is None or wanted in (objects.meta(policy).get("finalizers") or []):
            return
        self._protect(policy, source)
        self._apply_finalizers(policy, [wanted])

    def _protect(self, policy: api.Policy, source: CredentialSource) -> None:
        """Puts the policy's in-use finalizer on the Secrets its release needs (a strategic
        merge adds it to the list, and never creates a missing Secret)."""
        finalizer = api.in_use_finalizer(policy["metadata"]["uid"])
        for name in source.protected_secrets(policy["spec"]):
            with contextlib.suppress(api_errors.NotFound):  # mint says SecretNotFound
                self._api.patch(
                    objects.SECRETS,
                    name,
                    {"metadata": {"finalizers": [finalizer]}},
                    namespace=objects.namespace(policy),
                    patch_type=clients.PatchType.STRATEGIC,
                )

    def _unprotect(self, policy: api.Policy, source: CredentialSource) -> None:
        finalizer = api.in_use_finalizer(policy["metadata"]["uid"])
        for name in source.protected_secrets(policy["spec"]):
            with contextlib.suppress(api_errors.NotFound):
                self._api.patch(
                    objects.SECRETS,
                    name,
                    {"metadata": {"$deleteFromPrimitiveList/finalizers": [finalizer]}},
                    namespace=objects.namespace(policy),
                    patch_type=clients.PatchType.STRATEGIC,
                )

    def _finalize(self, policy: api.Policy, source: CredentialSource | None) -> Result:
        """Gives back the policy's external credentials, then lets it go. A release that cannot
        happen keeps the finalizer, says why in ``Ready`` (reason ``ReleaseFailed``) and retries
        with backoff; ``rotator.dev/skip-release: "true"`` is the way out."""
        finalizers = objects.meta(policy).get("finalizers") or []
        if api.FINALIZER_IAM_KEY not in finalizers:
            return Result()
        if source is not None:
            now = self._clock.now()
            annotations = objects.meta(policy).get("annotations") or {}
            if annotations.get(api.SKIP_RELEASE_ANNOTATION) == "true":
                self._recorder.event(
                    policy,
                    events.WARNING,
                    "ReleaseSkipped",
                    f"external credentials were not given back ({api.SKIP_RELEASE_ANNOTATION})",
                )
            else:
                served = derived.read(self._managed.get(self._derived_key(policy)))
                ctx = SourceContext(
                    policy,
                    self._secret_getter(objects.namespace(policy)),
                    now=now,
                    current=served.credential if served else None,
                )
                try:
                    source.release(ctx)
                except errors.CredentialError as exc:
                    if exc.transient:
                        raise  # retried with backoff; the policy waits for its keys to be deleted
                    return self._release_failed(policy, exc, now)
            self._unprotect(policy, source)
        self._apply_finalizers(policy, [])
        log.info("policy.finalized")
        return Result()

    def _release_failed(
        self, policy: api.Policy, exc: errors.CredentialError, now: float
    ) -> Result:
        old: dict[str, Any] = dict(policy.get("status") or {})
        attempts = int(old.get("failedAttempts") or 0) + 1
        fields = {k: v for k, v in old.items() if k not in ("conditions", "failedAttempts")}
        fields.update(failedAttempts=attempts, lastFailureTime=clocks.rfc3339(now))
        delay = schedule.retry_delay(attempts, now=now, expires_at=None)
        message = (
            f"could not give back the external credentials: {exc}; the policy is kept until "
            f"they are (retrying at {clocks.rfc3339(now + delay)}). To delete it anyway and "
            f"leave them, annotate it {api.SKIP_RELEASE_ANNOTATION}=true"
        )
        self._write_status(
            policy,
            fields,
            [
                true(api.ACCEPTED, "Accepted", "the spec is valid"),
                false(api.READY, "ReleaseFailed", message),
            ],
            now,
        )
        log.warning("policy.release_failed", reason=exc.reason, error=str(exc), attempts=attempts)
        return Result(requeue_after=delay)

    def _apply_finalizers(self, policy: api.Policy, finalizers: list[str]) -> None:
        apply.apply(
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


class SourceReads:
    """The :data:`~.credentialsources.SecretGetter` a reconcile hands its source: Secrets of the
    policy's own namespace, through the :class:`FullObjectReader`, remembering the
    resourceVersion of each body returned — what a copy records as
    ``rotator.dev/source-version``: the versions actually read, not the cache's idea of them."""

    def __init__(self, secrets: FullObjectReader, namespace: str) -> None:
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


def _source_names(source: CredentialSource, policy: api.Policy) -> list[str]:
    """The Secrets a policy's source reads, each once, in the order its spec names them."""
    return list(dict.fromkeys(ref["name"] for ref in source.secret_refs(policy["spec"])))


def whole_seconds(credential: Credential) -> Credential:
    """Times as the derived Secret's annotations hold them (RFC 3339, whole seconds; expiry
    rounded down), so the schedule computed now equals the one computed from the cache later."""
    return dataclasses.replace(
        credential,
        issued_at=math.floor(credential.issued_at) if credential.issued_at is not None else None,
        expires_at=math.floor(credential.expires_at) if credential.expires_at is not None else None,
    )


def due_at(source: CredentialSource, ctx: SourceContext) -> float | None:
    """The source's due time in whole seconds (rounded down: never later), as status shows it."""
    due = source.due_at(ctx)
    return None if due is None else float(math.floor(due))


def renew_before_condition(
    policy: api.Policy, credential: Credential, ctx: SourceContext
) -> conditions.Cond | None:
    """``RenewBeforeHonored`` for a credential that expires: False when ``spec.rotation`` asks
    for a refresh before the renewal floor and the floor is used instead (see
    ``rotator.schedule``); None when the credential does not expire."""
    if credential.expires_at is None or credential.issued_at is None:
        return None
    renewal = schedule.renewal(
        issued_at=credential.issued_at,
        expires_at=credential.expires_at,
        settings=ctx.settings,
        seed=ctx.seed,
    )
    rotation = policy["spec"].get("rotation") or {}
    if not renewal.clamped:
        explicit = "renewBefore" in rotation or "renewBeforePercentage" in rotation
        asked = "as spec.rotation asks" if explicit else "at the default, 2/3 of the lifetime"
        return true(api.RENEW_BEFORE_HONORED, api.REASON_AS_SPECIFIED, f"refreshing {asked}")
    field = (
        f"renewBefore ({rotation['renewBefore']})"
        if "renewBefore" in rotation
        else f"renewBeforePercentage ({rotation.get('renewBeforePercentage')})"
    )
    lifetime = credential.expires_at - credential.issued_at
    after = renewal.floor - credential.issued_at
    return false(
        api.RENEW_BEFORE_HONORED,
        api.REASON_RENEW_BEFORE_TOO_LONG,
        f"spec.rotation.{field} would refresh the credential (lifetime {lifetime:.0f} s) "
        f"sooner than {schedule.FLOOR_FRACTION:.0%} of its lifetime, and "
        f"{schedule.MIN_RENEWAL_AGE:.0f} s, after issue; refreshing {after:.0f} s after issue "
        "instead",
    )


def refresh_reason(
    policy: api.Policy, served: derived.Served | None, source: CredentialSource, ctx: SourceContext
) -> str | None:
    """Why a minted credential must be replaced now, or None to keep serving it."""
    if served is None:
        return "missing"
    if not served.intact or served.malformed:
        return "edited"  # its data, or an annotation that no longer parses
    if spec_reason := _SPEC_REASONS.get(spechash.judge(served.spec_hash, policy["spec"])):
        return spec_reason
    requested = (objects.meta(policy).get("annotations") or {}).get(api.ROTATE_REQUESTED_ANNOTATION)
    if requested and requested != served.answered_request:
        return "rotation requested"
    due = due_at(source, ctx)
    if due is not None and ctx.now >= due:
        return "due"
    return None


UNTRUSTED_SPEC_HASH = "spec hash untrusted"
"""The refresh reason of a credential whose recorded spec hash cannot say what it was minted for
(:attr:`spechash.Verdict.UNTRUSTED`): minted again on purpose, and said so."""
_SPEC_REASONS = {
    spechash.Verdict.CHANGED: "spec changed",
    spechash.Verdict.UNTRUSTED: UNTRUSTED_SPEC_HASH,
}
"""What the recorded spec hash's verdict makes the refresh reason (CURRENT: none)."""


def source_calls_provider(sources: Mapping[str, CredentialSource], policy: api.Policy) -> bool:
    source = sources.get(policy["spec"]["type"])
    return source is not None and source.calls_provider(policy["spec"])
