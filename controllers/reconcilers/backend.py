"""The ServiceBackend reconciler: which policy authenticates this backend, and the Routes that
must look again.

Exactly one BackendSecurityPolicy may target a backend (GEP-2648 direct policy attachment); two
are a conflict the backend reports. A backend no policy targets is valid: it is called without
credentials. Every reconcile tells the referencing Routes to look again, since a backend is
reconciled whenever its policy's credentials may have changed.
"""

from __future__ import annotations

from typing import Any

from controllers.reconcilers import api, conditions, indexes, status
from controllers.reconcilers.conditions import false, true
from controllers.runtime import channel, events, objects
from controllers.runtime import client as clients
from controllers.runtime import clock as clocks
from controllers.runtime.reconcile import Request, Result
from controllers.runtime.store import Store

ACCEPTED = "Accepted"
RESOLVED_REFS = "ResolvedRefs"


class BackendReconciler:
    def __init__(
        self,
        *,
        api_client: clients.Client,
        backends: Store,
        policies: Store,
        routes: Store,
        recorder: events.EventRecorder,
        to_routes: channel.Channel[Request],
        clock: clocks.Clock,
    ) -> None:
        self._api = api_client
        self._backends = backends
        self._policies = policies
        self._routes = routes
        self._recorder = recorder
        self._to_routes = to_routes
        self._clock = clock

    def reconcile(self, request: Request) -> Result:
        backend = self._backends.get(request.key)
        if backend is not None and not objects.is_being_deleted(backend):
            status.write(
                self._api,
                self._recorder,
                backend,
                api.BACKENDS,
                fields={},
                updates=[true(ACCEPTED, "Accepted", "the spec is valid"), self._resolved(request)],
                now=self._clock.now(),
                event_types=(RESOLVED_REFS,),
            )
        for route in self._routes.by_index(indexes.ROUTE_BY_BACKEND, request.key):
            self._to_routes.send(Request.for_object(route))
        return Result()

    def _resolved(self, request: Request) -> conditions.Cond:
        policies = policies_for(self._policies, request.key)
        if not policies:
            return true(RESOLVED_REFS, "NoPolicy", "no BackendSecurityPolicy targets this backend")
        if len(policies) > 1:
            names = ", ".join(sorted(objects.name(p) for p in policies))
            return false(
                RESOLVED_REFS,
                "PolicyConflict",
                f"BackendSecurityPolicies {names} all target this backend; exactly one may",
            )
        policy = policies[0]
        name = objects.name(policy)
        if not conditions.is_true(policy, "Ready"):
            ready = conditions.of(policy, "Ready")
            why = ready["message"] if ready is not None else "not reconciled yet"
            return false(
                RESOLVED_REFS, "PolicyNotReady", f"BackendSecurityPolicy {name} is not ready: {why}"
            )
        return true(RESOLVED_REFS, "ResolvedRefs", f"credentials from BackendSecurityPolicy {name}")


def policies_for(policies: Store, backend_key: str) -> list[dict[str, Any]]:
    """The live policies that target a backend."""
    return [
        p
        for p in policies.by_index(indexes.POLICY_BY_BACKEND, backend_key)
        if not objects.is_being_deleted(p)
    ]
