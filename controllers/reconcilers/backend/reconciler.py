"""The ServiceBackend reconciler: which policy authenticates this backend.

Exactly one BackendSecurityPolicy may target a backend (GEP-2648 direct policy attachment); two
are a conflict the backend reports. A backend no policy targets is valid: it is called without
credentials. Both rules, and what a missing ``Ready`` means, are
:func:`controllers.reconcilers.route.resolve.attachment`'s, which Routes read too. The
reconciler tells no other controller anything, and Routes do not depend on this status: they
resolve the policy and its derived Secret themselves and watch both
(:mod:`controllers.reconcilers.route.wiring`). A change of ``ResolvedRefs`` wakes them too, a
second word of what their own watches already said; what wakes the backend is :mod:`.wiring`.

The status is written once the decision is stable, so a chain created at once costs one status
write, not ``NoPolicy`` then ``PolicyNotReady`` then ``ResolvedRefs``: a policy that has not
reported ``Ready`` yet (never reconciled, :attr:`~.resolve.Standing.PENDING`) is waited for — its
first status wakes the backend — and a backend created less than :data:`~.resolve.SETTLE_SECONDS`
ago that no policy targets waits out the rest of that time for the policy applied with it
(``kubectl apply`` of one file creates them a few milliseconds apart, and the two watches deliver
in either order).
"""

from __future__ import annotations

from controllers.reconcilers import api, conditions, status
from controllers.reconcilers.conditions import false, true
from controllers.reconcilers.route import resolve
from controllers.reconcilers.route.resolve import Standing
from controllers.runtime import apiclient, eventsink, objects
from controllers.runtime import clock as clocks
from controllers.runtime.reconcile import Request, Result
from controllers.runtime.store import Store


class BackendReconciler:
    def __init__(
        self,
        *,
        api_client: apiclient.ApiClient,
        backends: Store,
        policies: Store,
        recorder: eventsink.EventSink,
        clock: clocks.Clock,
    ) -> None:
        self._api = api_client
        self._backends = backends
        self._policies = policies
        self._recorder = recorder
        self._clock = clock

    def reconcile(self, request: Request) -> Result:
        backend = self._backends.get(request.key)
        if backend is None or objects.is_being_deleted(backend):
            return Result()
        now = self._clock.now()
        resolved = self._resolved(request)
        if resolved is None:
            return Result()  # its policy's first status wakes this backend (wiring.py)
        if resolved.reason == api.REASON_NO_POLICY and (wait := resolve.settling(backend, now)) > 0:
            return Result(requeue_after=wait)  # a policy applied with it may be on its way
        status.write(
            self._api,
            self._recorder,
            backend,
            api.BACKENDS,
            fields={},
            updates=[conditions.accepted(), resolved],
            now=now,
            event_types=(api.RESOLVED_REFS,),
        )
        return Result()

    def _resolved(self, request: Request) -> conditions.Cond | None:
        """``ResolvedRefs``; None while the one policy targeting the backend has no ``Ready``
        condition yet (not reconciled: its verdict is moments away)."""
        attached = resolve.attachment(self._policies, request.key)
        match attached.standing:
            case Standing.NO_POLICY:
                return true(
                    api.RESOLVED_REFS,
                    api.REASON_NO_POLICY,
                    "no BackendSecurityPolicy targets this backend",
                )
            case Standing.CONFLICT:
                names = ", ".join(sorted(objects.name(p) for p in attached.policies))
                return false(
                    api.RESOLVED_REFS,
                    api.REASON_POLICY_CONFLICT,
                    f"BackendSecurityPolicies {names} all target this backend; exactly one may",
                )
            case Standing.PENDING:
                return None
        name = objects.name(attached.policy)
        if attached.standing is Standing.READY:
            return true(
                api.RESOLVED_REFS,
                api.REASON_RESOLVED_REFS,
                f"credentials from BackendSecurityPolicy {name}",
            )
        message = attached.ready["message"] if attached.ready is not None else ""
        return false(
            api.RESOLVED_REFS,
            api.REASON_POLICY_NOT_READY,
            f"BackendSecurityPolicy {name} is not ready: {message}",
        )
