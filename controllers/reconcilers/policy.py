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

import dataclasses
import enum
import math
from collections.abc import Mapping
from typing import Any, cast

import structlog

from controllers.reconcilers import api, conditions, derived, status
from controllers.reconcilers.conditions import false, true
from controllers.reconcilers.metrics import CredentialMetrics
from controllers.reconcilers.sources import (
    CredentialSource,
    MintContext,
    UnsupportedSource,
    rotation_settings,
)
from controllers.runtime import apply, channel, events, objects
from controllers.runtime import client as clients
from controllers.runtime import clock as clocks
from controllers.runtime import errors as api_errors
from controllers.runtime.cache import FullObjectReader
from controllers.runtime.reconcile import Request, Result
from controllers.runtime.store import Store
from rotator import errors, schedule
from rotator.credentials import Credential

log = structlog.get_logger(__name__)

ACCEPTED = "Accepted"
READY = "Ready"


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
        sources: Mapping[str, CredentialSource],
        recorder: events.EventRecorder,
        metrics: CredentialMetrics,
        to_backends: channel.Channel[Request],
        clock: clocks.Clock,
    ) -> None:
        self._api = api_client
        self._policies = policies
        self._managed = managed_secrets
        self._secrets = secrets
        self._sources = sources
        self._recorder = recorder
        self._metrics = metrics
        self._to_backends = to_backends
        self._clock = clock

    def reconcile(self, request: Request) -> Result:
        cached = self._policies.get(request.key)
        if cached is None:
            self._metrics.forget(request)
            return Result()  # the derived Secret goes with its owner (garbage collector)
        policy = cast(api.Policy, cached)
        source = self._sources.get(policy["spec"]["type"])
        if objects.is_being_deleted(policy):
            self._finalize(policy, source)
            return Result()
        now = self._clock.now()
        served = derived.read(self._managed.get(self._derived_key(policy)))
        ctx = MintContext(
            policy,
            self._secret_getter(request.namespace),
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
        minted = source.mints(policy["spec"])
        why = refresh_reason(policy, served, source, ctx) if minted else "copy"
        if why is None:
            assert served is not None
            return self._serving(policy, source, served.credential, Change.NONE, ctx)
        outcome = self._mint(
            policy, source, MintContext(**{**ctx.__dict__, "forced": why not in ("due", "copy")})
        )
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
        return self._serve_new(policy, source, credential, minted=minted, ctx=ctx)

    def _serve_new(
        self,
        policy: api.Policy,
        source: CredentialSource,
        credential: Credential,
        *,
        minted: bool,
        ctx: MintContext,
    ) -> Result:
        answered = (objects.meta(policy).get("annotations") or {}).get(
            api.ROTATE_REQUESTED_ANNOTATION
        )
        try:
            change = self._write_derived(policy, credential, minted=minted, answered=answered)
        except api_errors.Forbidden as exc:
            # RBAC is missing a rule: say so where the user looks, and back off
            denied = WriteForbidden(f"rotator may not write Secrets here: {exc}")
            return self._failed(policy, denied, ctx)
        return self._serving(policy, source, credential, change, ctx)

    def _mint(
        self, policy: api.Policy, source: CredentialSource, ctx: MintContext
    ) -> Credential | errors.CredentialError:
        try:
            return source.mint(ctx)
        except errors.CredentialError as exc:
            return exc
        except Exception as exc:  # a provider error we failed to map: a bug, not a reason to loop
            # Only the type is logged: unmapped exceptions may carry response bodies.
            log.error("policy.unexpected_provider_error", error_type=type(exc).__name__)
            return errors.ProviderUnavailable(
                f"unexpected {type(exc).__name__} from the {policy['spec']['type']} provider"
            )

    # --- derived Secret ----------------------------------------------------------------------

    def _derived_key(self, policy: api.Policy) -> objects.ObjectKey:
        md = policy["metadata"]
        return objects.make_key(md["namespace"], api.derived_secret_name(md["name"]))

    def _secret_getter(self, namespace: str) -> Any:
        def secret_data(name: str) -> Mapping[str, str] | None:
            secret = self._secrets.get(namespace, name)
            return None if secret is None else dict(secret.get("data") or {})

        return secret_data

    def _write_derived(
        self, policy: api.Policy, credential: Credential, *, minted: bool, answered: str | None
    ) -> Change:
        """Writes the derived Secret if it differs from the cached one; says what changed."""
        desired = derived.build(policy, credential, minted=minted, answered_request=answered)
        md = desired["metadata"]
        actual = self._managed.get(self._derived_key(policy))
        ours = (
            {
                k
                for k in (objects.meta(actual).get("annotations") or {})
                if k.startswith("rotator.dev/") or k.startswith(api.STATE_ANNOTATION_PREFIX)
            }
            if actual
            else set()
        )
        if actual is None:
            change = Change.CREATED
        elif (actual.get("data") or {}) != desired["data"]:
            change = Change.ROTATED
        elif not apply.subset(md, actual.get("metadata")) or ours - set(md["annotations"]):
            change = Change.REPAIRED  # metadata edited, or state that no longer applies
        else:
            return Change.NONE
        apply.apply(
            self._api,
            objects.SECRETS,
            desired,
            field_manager=api.FIELD_MANAGER,
            resource_version=objects.meta(actual).get("resourceVersion") if actual else None,
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
        ctx: MintContext,
    ) -> Result:
        now = ctx.now
        due = (
            due_at(source, MintContext(**{**ctx.__dict__, "current": credential}))
            if source.mints(policy["spec"])
            else None
        )
        name = api.derived_secret_name(objects.name(policy))
        message = f"credentials are in Secret {name}"
        if credential.expires_at is not None:
            message += f", valid until {clocks.rfc3339(credential.expires_at)}"
        if due is not None:
            message += f", next refresh at {clocks.rfc3339(due)}"
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
                true(ACCEPTED, "Accepted", "the spec is valid"),
                true(READY, "CredentialsReady", message),
            ],
            now,
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
        self._notify_targets(policy)
        return Result(requeue_after=max(0.001, due - now)) if due is not None else Result()

    def _failed(self, policy: api.Policy, exc: errors.CredentialError, ctx: MintContext) -> Result:
        now = ctx.now
        old: dict[str, Any] = dict(policy.get("status") or {})
        attempts = int(old.get("failedAttempts") or 0) + 1
        fields: dict[str, Any] = {
            k: v for k, v in old.items() if k not in ("conditions", "failedAttempts")
        }
        fields.update(failedAttempts=attempts, lastFailureTime=clocks.rfc3339(now))
        current = ctx.current
        valid = current is not None and (current.expires_at is None or now < current.expires_at)
        accepted = (
            false(ACCEPTED, exc.reason, str(exc))
            if isinstance(exc, UnsupportedSource)
            else true(ACCEPTED, "Accepted", "the spec is valid")
        )
        expires_at = current.expires_at if current is not None else None
        delay = schedule.retry_delay(attempts, now=now, expires_at=expires_at)
        if valid and expires_at is not None:
            delay = min(delay, max(0.001, expires_at - now))  # turn Expired on time
        retry = f"retrying at {clocks.rfc3339(now + delay)}"
        if valid and source_mints(self._sources, policy):
            until = f"valid until {clocks.rfc3339(expires_at)}" if expires_at else "still valid"
            ready = true(
                READY,
                "RotationFailed",
                f"the served credentials are {until}; the last refresh failed: {exc}; {retry}",
            )
        elif current is not None and not valid:
            ready = false(
                READY,
                "Expired",
                f"the credentials expired at {clocks.rfc3339(expires_at or now)}; "
                f"refresh failing: {exc}; {retry}",
            )
        else:
            ready = false(READY, exc.reason, str(exc))
        self._write_status(policy, fields, [accepted, ready], now)
        if attempts == 1 and source_mints(self._sources, policy):
            self._recorder.event(policy, events.WARNING, "RotationFailed", f"{exc}; {retry}")
        log.warning(
            "policy.credentials_failed",
            reason=exc.reason,
            error=str(exc),
            attempts=attempts,
            retry_in=round(delay, 2),
        )
        self._notify_targets(policy)
        return Result(requeue_after=delay)

    def _write_status(
        self, policy: api.Policy, fields: dict[str, Any], updates: list[conditions.Cond], now: float
    ) -> None:
        status.write(
            self._api,
            self._recorder,
            policy,
            api.POLICIES,
            fields=fields,
            updates=updates,
            now=now,
            event_types=(READY,),
        )

    def _notify_targets(self, policy: api.Policy) -> None:
        namespace = objects.namespace(policy)
        for ref in policy["spec"].get("targetRefs") or []:
            self._to_backends.send(Request(namespace, ref["name"]))

    # --- finalizers --------------------------------------------------------------------------

    def _ensure_finalizer(self, policy: api.Policy, source: CredentialSource) -> None:
        wanted = source.finalizer(policy["spec"])
        if wanted is None or wanted in (objects.meta(policy).get("finalizers") or []):
            return
        self._apply_finalizers(policy, [wanted])

    def _finalize(self, policy: api.Policy, source: CredentialSource | None) -> None:
        finalizers = objects.meta(policy).get("finalizers") or []
        ours = [f for f in finalizers if f == api.FINALIZER_IAM_KEY]
        if not ours:
            return
        if source is not None:
            served = derived.read(self._managed.get(self._derived_key(policy)))
            ctx = MintContext(
                policy,
                self._secret_getter(objects.namespace(policy)),
                now=self._clock.now(),
                current=served.credential if served else None,
            )
            try:
                source.release(ctx)
            except errors.CredentialError as exc:
                if exc.transient:
                    raise  # retried with backoff; the policy waits for its keys to be deleted
                self._recorder.event(
                    policy,
                    events.WARNING,
                    "ReleaseFailed",
                    f"could not give back external credentials: {exc}",
                )
        self._apply_finalizers(policy, [])
        log.info("policy.finalized")

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


def whole_seconds(credential: Credential) -> Credential:
    """Times as the derived Secret's annotations hold them (RFC 3339, whole seconds; expiry
    rounded down), so the schedule computed now equals the one computed from the cache later."""
    return dataclasses.replace(
        credential,
        issued_at=math.floor(credential.issued_at) if credential.issued_at is not None else None,
        expires_at=math.floor(credential.expires_at) if credential.expires_at is not None else None,
    )


def due_at(source: CredentialSource, ctx: MintContext) -> float | None:
    """The source's due time in whole seconds (rounded down: never later), as status shows it."""
    due = source.due_at(ctx)
    return None if due is None else float(math.floor(due))


def refresh_reason(
    policy: api.Policy, served: derived.Served | None, source: CredentialSource, ctx: MintContext
) -> str | None:
    """Why a minted credential must be replaced now, or None to keep serving it."""
    if served is None:
        return "missing"
    if not served.intact:
        return "edited"
    if served.spec_hash != derived.spec_hash(policy["spec"]):
        return "spec changed"
    requested = (objects.meta(policy).get("annotations") or {}).get(api.ROTATE_REQUESTED_ANNOTATION)
    if requested and requested != served.answered_request:
        return "rotation requested"
    due = due_at(source, ctx)
    if due is not None and ctx.now >= due:
        return "due"
    return None


def source_mints(sources: Mapping[str, CredentialSource], policy: api.Policy) -> bool:
    source = sources.get(policy["spec"]["type"])
    return source is not None and source.mints(policy["spec"])
