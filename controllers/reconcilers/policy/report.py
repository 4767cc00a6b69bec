"""What a policy reconcile reports, and the one writer that reports it: the one place a reason
is shown to the user (cert-manager's ``readiness``).

:func:`serving`, :func:`failed` and :func:`release_failed` are pure: from the policy as cached
and the outcome of the reconcile to a :class:`Report` — the status fields, the conditions, the
Events, the metrics and when to come back. :class:`Writer` carries a report out, in one order
for every outcome: the metrics (so the expiry alert sees what is served even when the status
write then fails), the status (with an Event per ``Ready`` transition: ``status.write``), the
Events, the log line, and the :class:`Result`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from controllers.reconcilers import api, conditions, derived, status
from controllers.reconcilers.conditions import Cond
from controllers.reconcilers.credentialsources import SourceContext, UnsupportedSource
from controllers.reconcilers.metrics import CredentialMetrics
from controllers.runtime import apiclient, events, eventsink, objects
from controllers.runtime import clock as clocks
from controllers.runtime.reconcile import Request, Result
from rotator import errors, schedule
from rotator.credentials import Credential

log = structlog.get_logger("controllers.reconcilers.policy")


@dataclass(frozen=True)
class Event:
    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class Gauges:
    """``metrics.served``: the credential served, and when it is next refreshed or retried."""

    expires_at: float | None
    renews_at: float | None


@dataclass(frozen=True)
class Report:
    fields: Mapping[str, Any]
    """The status fields besides ``conditions``."""
    conditions: tuple[Cond, ...]
    now: float
    """When it was judged: a condition whose status changes records it as its transition."""
    events: tuple[Event, ...] = ()
    """Recorded after the status write, besides its own ``Ready`` transition Events."""
    ready_events: bool = True
    """Whether the status write records an Event for a ``Ready`` transition (False: one of
    :attr:`events` says it)."""
    announce: bool = False
    """The credentials were created: a first ``Ready=True`` is news (the one Event a new policy
    records)."""
    gauges: Gauges | None = None
    retry_after: float | None = None
    """A failure's retry, counted from when it was judged."""
    renews_at: float | None = None
    """The next refresh: the requeue is counted from the end of the reconcile."""
    warning: tuple[str, Mapping[str, Any]] | None = None
    """A line to log as a warning: its event name and fields."""


def serving(
    policy: api.Policy,
    credential: Credential,
    ctx: SourceContext,
    *,
    change: derived.Change,
    due: float | None,
) -> Report:
    """The credential is served; ``due`` is its next refresh (None: a copy, or a credential
    that never expires)."""
    name = api.derived_secret_name(objects.name(policy))
    message = f"credentials are in Secret {name}"
    if credential.expires_at is not None:
        message += f", valid until {clocks.rfc3339(credential.expires_at)}"
    if due is not None:
        message += f", next refresh at {clocks.rfc3339(due)}"
    honored = renew_before_condition(policy, credential, ctx) if due is not None else None
    clamped = honored if honored is not None and honored.status == "False" else None
    if clamped is not None:
        message += f"; {clamped.message}"
    old = policy.get("status") or {}
    fields: dict[str, Any] = {"derivedSecretName": name, "failedAttempts": 0}
    issued = credential.issued_at
    if issued is None and change in (derived.Change.CREATED, derived.Change.ROTATED):
        issued = ctx.now
    last_rotation = clocks.rfc3339(issued) if issued is not None else old.get("lastRotationTime")
    if last_rotation:
        fields["lastRotationTime"] = last_rotation
    if credential.expires_at is not None:
        fields["expirationTime"] = clocks.rfc3339(credential.expires_at)
    if due is not None:
        fields["renewalTime"] = clocks.rfc3339(due)
    if "lastFailureTime" in old:
        fields["lastFailureTime"] = old["lastFailureTime"]
    news: list[Event] = []
    was = conditions.of(policy, api.RENEW_BEFORE_HONORED)
    if clamped is not None and (was is None or was.get("status") != "False"):
        news.append(Event(events.WARNING, clamped.reason, clamped.message))
    if change is derived.Change.ROTATED:
        rotated = f"new credentials in Secret {name}"
        news.append(Event(events.NORMAL, api.REASON_CREDENTIALS_ROTATED, rotated))
    return Report(
        fields,
        (
            conditions.accepted(),
            conditions.ready(api.REASON_CREDENTIALS_READY, message, ok=True),
            *([honored] if honored is not None else []),
        ),
        ctx.now,
        events=tuple(news),
        announce=change is derived.Change.CREATED,
        gauges=Gauges(credential.expires_at, due),
        renews_at=due,
    )


def failed(
    policy: api.Policy,
    exc: errors.CredentialError,
    current: Credential | None,
    *,
    now: float,
    minted: bool,
) -> Report:
    """A refresh failed at ``now``; ``current`` is what is still served, if anything, and
    ``minted`` whether the policy's credential is minted (a copy is never "still valid")."""
    attempts, fields = _attempt(policy, now)
    valid = current is not None and (current.expires_at is None or now < current.expires_at)
    accepted = (
        conditions.accepted(exc.reason, str(exc), ok=False)
        if isinstance(exc, UnsupportedSource)
        else conditions.accepted()
    )
    expires_at = current.expires_at if current is not None else None
    delay = schedule.retry_delay(attempts, now=now, expires_at=expires_at)
    if valid and expires_at is not None:
        delay = min(delay, max(0.001, expires_at - now))  # turn Expired on time
    retry = f"retrying at {clocks.rfc3339(now + delay)}"
    if valid and minted:
        until = f"valid until {clocks.rfc3339(expires_at)}" if expires_at else "still valid"
        ready = conditions.ready(
            api.REASON_ROTATION_FAILED,
            f"the served credentials are {until}; the last refresh failed: {exc}; {retry}",
            ok=True,
        )
    elif current is not None and not valid:
        ready = conditions.ready(
            api.REASON_EXPIRED,
            f"the credentials expired at {clocks.rfc3339(expires_at or now)}; "
            f"refresh failing: {exc}; {retry}",
            ok=False,
        )
    else:
        ready = conditions.ready(exc.reason, str(exc), ok=False)
    announced = attempts == 1 and minted
    return Report(
        fields,
        (accepted, ready),
        now,
        # A first failure while still valid (Ready True → True/RotationFailed) is this Warning,
        # not also a Normal Event of the same reason from the status write.
        events=(
            (Event(events.WARNING, api.REASON_ROTATION_FAILED, f"{exc}; {retry}"),)
            if announced
            else ()
        ),
        ready_events=not (announced and ready.reason == api.REASON_ROTATION_FAILED),
        # still what is served (the expiry alert must see it), and the next attempt
        gauges=Gauges(expires_at, now + delay),
        retry_after=delay,
        warning=(
            "policy.credentials_failed",
            {
                "reason": exc.reason,
                "error": str(exc),
                "attempts": attempts,
                "retry_in": round(delay, 2),
            },
        ),
    )


def release_failed(policy: api.Policy, exc: errors.CredentialError, *, now: float) -> Report:
    """Giving back a deleted policy's external credentials failed for good (until someone acts):
    the finalizer stays, and ``Ready`` says how out."""
    attempts, fields = _attempt(policy, now)
    delay = schedule.retry_delay(attempts, now=now, expires_at=None)
    message = (
        f"could not give back the external credentials: {exc}; the policy is kept until "
        f"they are (retrying at {clocks.rfc3339(now + delay)}). To delete it anyway and "
        f"leave them, annotate it {api.SKIP_RELEASE_ANNOTATION}=true"
    )
    return Report(
        fields,
        (conditions.accepted(), conditions.ready(api.REASON_RELEASE_FAILED, message, ok=False)),
        now,
        retry_after=delay,
        warning=(
            "policy.release_failed",
            {"reason": exc.reason, "error": str(exc), "attempts": attempts},
        ),
    )


def _attempt(policy: api.Policy, now: float) -> tuple[int, dict[str, Any]]:
    """This failure's number (``failedAttempts`` + 1: the backoff kept in status) and the status
    fields that record it, the others kept as they are."""
    old: dict[str, Any] = dict(policy.get("status") or {})
    attempts = int(old.get("failedAttempts") or 0) + 1
    fields = {k: v for k, v in old.items() if k not in ("conditions", "failedAttempts")}
    fields.update(failedAttempts=attempts, lastFailureTime=clocks.rfc3339(now))
    return attempts, fields


def renew_before_condition(
    policy: api.Policy, credential: Credential, ctx: SourceContext
) -> Cond | None:
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
        return conditions.renew_before_honored(
            api.REASON_AS_SPECIFIED, f"refreshing {asked}", ok=True
        )
    field = (
        f"renewBefore ({rotation['renewBefore']})"
        if "renewBefore" in rotation
        else f"renewBeforePercentage ({rotation.get('renewBeforePercentage')})"
    )
    lifetime = credential.expires_at - credential.issued_at
    after = renewal.floor - credential.issued_at
    return conditions.renew_before_honored(
        api.REASON_RENEW_BEFORE_TOO_LONG,
        f"spec.rotation.{field} would refresh the credential (lifetime {lifetime:.0f} s) "
        f"sooner than {schedule.FLOOR_FRACTION:.0%} of its lifetime, and "
        f"{schedule.MIN_RENEWAL_AGE:.0f} s, after issue; refreshing {after:.0f} s after issue "
        "instead",
        ok=False,
    )


class Writer:
    """Carries out reports, and says what a reconcile read or did on the way (the Events and
    metrics that are not a status): every Event and metric of the policy reconciler."""

    def __init__(
        self,
        *,
        api_client: apiclient.Writer,
        recorder: eventsink.EventSink,
        metrics: CredentialMetrics,
        clock: clocks.Clock,
    ) -> None:
        self._api = api_client
        self._recorder = recorder
        self._metrics = metrics
        self._clock = clock

    def carry_out(self, policy: api.Policy, report: Report) -> Result:
        if report.gauges is not None:
            self._metrics.served(
                Request.for_object(policy),
                policy["spec"]["type"],
                expires_at=report.gauges.expires_at,
                renews_at=report.gauges.renews_at,
            )
        status.write(
            self._api,
            self._recorder,
            policy,
            api.POLICIES,
            fields=dict(report.fields),
            updates=report.conditions,
            now=report.now,
            event_types=(api.READY,) if report.ready_events else (),
            announce=(api.READY,) if report.announce else (),
        )
        for event in report.events:
            self._recorder.event(policy, event.type, event.reason, event.message)
        if report.warning is not None:
            name, fields = report.warning
            log.warning(name, **fields)
        if report.retry_after is not None:
            return Result(requeue_after=report.retry_after)
        if report.renews_at is None:
            return Result()
        # From the clock as the reconcile ends, not from its start: the queue counts
        # ``requeue_after`` from the return, so a delay computed at the start would fire late
        # by the reconcile's own duration (the provider call and the writes, ~0.1 s; up to the
        # deadline). Nothing re-runs the policy to correct it: its own writes' events are echoes.
        return Result(requeue_after=max(0.001, report.renews_at - self._clock.now()))

    def observed(self, policy: api.Policy, served: derived.Served | None) -> None:
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

    def untrusted_spec_hash(self, policy: api.Policy, served: derived.Served | None) -> None:
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

    def release_skipped(self, policy: api.Policy) -> None:
        self._recorder.event(
            policy,
            events.WARNING,
            api.REASON_RELEASE_SKIPPED,
            f"external credentials were not given back ({api.SKIP_RELEASE_ANNOTATION})",
        )

    def rotated(self, policy: api.Policy, *, ok: bool) -> None:
        """A mint was attempted (``rotator_rotations_total``)."""
        self._metrics.rotated(policy["spec"]["type"], ok=ok)

    def forget(self, request: Request) -> None:
        """The policy is gone: so are its series."""
        self._metrics.forget(request)
