"""The ServiceBackend reconciler: which policy authenticates this backend.

Exactly one BackendSecurityPolicy may target a backend (GEP-2648 direct policy attachment); two
are a conflict the backend reports. A backend no policy targets is valid: it is called without
credentials. The reconciler tells no other controller anything, and Routes do not depend on
this status: they resolve the policy and its derived Secret themselves and watch both
(``route_wiring``). A change of ``ResolvedRefs`` wakes them too, a second word of what their
own watches already said; what wakes the backend is ``backend_wiring``.

The status is written once the decision is stable, so a chain created at once costs one status
write, not ``NoPolicy`` then ``PolicyNotReady`` then ``ResolvedRefs``: a policy that has not
reported ``Ready`` yet (never reconciled) is waited for — its first status wakes the backend —
and a backend created less than :data:`SETTLE_SECONDS` ago that no policy targets waits out the
rest of that time for the policy applied with it (``kubectl apply`` of one file creates them a
few milliseconds apart, and the two watches deliver in either order).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controllers.reconcilers import api, conditions, indexes, status
from controllers.reconcilers.conditions import false, true
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
            return Result()  # its policy's first status wakes this backend (backend_wiring)
        if resolved.reason == api.REASON_NO_POLICY and (wait := settling(backend, now)) > 0:
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
        policies = policies_for(self._policies, request.key)
        if not policies:
            return true(
                api.RESOLVED_REFS,
                api.REASON_NO_POLICY,
                "no BackendSecurityPolicy targets this backend",
            )
        if len(policies) > 1:
            names = ", ".join(sorted(objects.name(p) for p in policies))
            return false(
                api.RESOLVED_REFS,
                api.REASON_POLICY_CONFLICT,
                f"BackendSecurityPolicies {names} all target this backend; exactly one may",
            )
        policy = policies[0]
        name = objects.name(policy)
        ready = conditions.of(policy, api.READY)
        if ready is None:
            return None
        if ready["status"] != "True":
            return false(
                api.RESOLVED_REFS,
                api.REASON_POLICY_NOT_READY,
                f"BackendSecurityPolicy {name} is not ready: {ready['message']}",
            )
        return true(
            api.RESOLVED_REFS,
            api.REASON_RESOLVED_REFS,
            f"credentials from BackendSecurityPolicy {name}",
        )


SETTLE_SECONDS = 2.0
"""How long after its creation a ServiceBackend or Route that has no status yet waits for the
objects applied with it to reach the cache, rather than report them missing (``NoPolicy``,
``BackendNotFound``) and then, a moment later, resolved: one status write instead of two, and no
Event for a state nobody created. creationTimestamp has whole seconds, so the wait is 1 to 2 s."""


def settling(obj: Mapping[str, Any], now: float) -> float:
    """Seconds left of ``obj``'s :data:`SETTLE_SECONDS`; 0 once it has a status, once the time
    is up, and when its creationTimestamp is missing, unreadable or ahead of ``now`` (a clock
    behind the API server's: never wait on a skew)."""
    md = objects.meta(obj)
    if obj.get("status") or not md.get("creationTimestamp"):
        return 0.0
    try:
        age = now - clocks.parse_rfc3339(md["creationTimestamp"])
    except ValueError:
        return 0.0
    return SETTLE_SECONDS - age if 0.0 <= age < SETTLE_SECONDS else 0.0


def policies_for(policies: Store, backend_key: str) -> list[dict[str, Any]]:
    """The live policies that target a backend."""
    return [
        p
        for p in policies.by_index(indexes.POLICY_BY_BACKEND, backend_key)
        if not objects.is_being_deleted(p)
    ]
