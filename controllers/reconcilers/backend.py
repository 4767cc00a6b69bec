"""The ServiceBackend reconciler: which policy authenticates this backend.

Exactly one BackendSecurityPolicy may target a backend (GEP-2648 direct policy attachment); two
are a conflict the backend reports. A backend no policy targets is valid: it is called without
credentials. Routes do not hear from here: they watch policies and derived Secrets themselves
(``setup``), so a status the backend writes is for people, not a link in the chain.
"""

from __future__ import annotations

from typing import Any

from controllers.reconcilers import api, conditions, indexes, status
from controllers.reconcilers.conditions import false, true
from controllers.runtime import client as clients
from controllers.runtime import clock as clocks
from controllers.runtime import events, objects
from controllers.runtime.reconcile import Request, Result
from controllers.runtime.store import Store


class BackendReconciler:
    def __init__(
        self,
        *,
        api_client: clients.Client,
        backends: Store,
        policies: Store,
        recorder: events.EventRecorder,
        clock: clocks.Clock,
    ) -> None:
        self._api = api_client
        self._backends = backends
        self._policies = policies
        self._recorder = recorder
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
                updates=[
                    true(api.ACCEPTED, "Accepted", "the spec is valid"),
                    self._resolved(request),
                ],
                now=self._clock.now(),
                event_types=(api.RESOLVED_REFS,),
            )
        return Result()

    def _resolved(self, request: Request) -> conditions.Cond:
        policies = policies_for(self._policies, request.key)
        if not policies:
            return true(
                api.RESOLVED_REFS, "NoPolicy", "no BackendSecurityPolicy targets this backend"
            )
        if len(policies) > 1:
            names = ", ".join(sorted(objects.name(p) for p in policies))
            return false(
                api.RESOLVED_REFS,
                "PolicyConflict",
                f"BackendSecurityPolicies {names} all target this backend; exactly one may",
            )
        policy = policies[0]
        name = objects.name(policy)
        if not conditions.is_true(policy, api.READY):
            ready = conditions.of(policy, api.READY)
            why = ready["message"] if ready is not None else "not reconciled yet"
            return false(
                api.RESOLVED_REFS,
                "PolicyNotReady",
                f"BackendSecurityPolicy {name} is not ready: {why}",
            )
        return true(
            api.RESOLVED_REFS, "ResolvedRefs", f"credentials from BackendSecurityPolicy {name}"
        )


def policies_for(policies: Store, backend_key: str) -> list[dict[str, Any]]:
    """The live policies that target a backend."""
    return [
        p
        for p in policies.by_index(indexes.POLICY_BY_BACKEND, backend_key)
        if not objects.is_being_deleted(p)
    ]
