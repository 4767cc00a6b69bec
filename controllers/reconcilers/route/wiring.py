"""What wakes the Route controller (controller-runtime's ``SetupWithManager``).

* its spec (generation) — not its status, which only the reconcile itself writes;
* its config Secret edited or deleted by anyone else — its own write's echo is skipped
  (:mod:`controllers.reconcilers.cache.ownwrites`; this module owns the
  :class:`~controllers.reconcilers.cache.ownwrites.OwnWrites`);
* a backend it references whose spec or ``ResolvedRefs`` (status or reason) changed: a change
  of resolution is a second word that the backend's policy appeared, went or changed
  readiness, and costs a route reconcile only when resolution changes;
* a policy whose spec or ``Ready`` status changed, mapped through its targets to their routes
  (not its ``Ready`` message: a rotation changes that, and reaches the routes as the derived
  Secret's event);
* a derived Secret's change, mapped through its policy's targets to their routes: the new
  credential, already in the cache when the route reads it.

The restarts of ``spec.rolloutRestartTargets`` (:mod:`.restarts`) run inside the route's
reconcile and are woken by these same events.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from controllers.reconcilers import api, predicates
from controllers.reconcilers.cache import indexes, ownwrites
from controllers.reconcilers.cache.chaincache import ChainCache
from controllers.reconcilers.metrics import RouteMetrics
from controllers.reconcilers.route.reconciler import RouteReconciler
from controllers.runtime import builder, objects
from controllers.runtime import clock as clocks
from controllers.runtime.builder import ControllerHost, Wiring
from controllers.runtime.controller import ControllerOptions
from controllers.runtime.reconcile import Request


def setup_with_manager(
    mgr: ControllerHost,
    chain: ChainCache,
    *,
    workers: int,
    clock: clocks.Clock,
    metrics: RouteMetrics | None = None,
) -> Wiring:
    writes = ownwrites.OwnWrites()
    reconciler = RouteReconciler(
        api_client=mgr.api,
        routes=chain.routes.store,
        backends=chain.backends.store,
        policies=chain.policies.store,
        managed_secrets=chain.managed.store,
        recorder=mgr.recorder,
        own_writes=writes,
        clock=clock,
        metrics=metrics,
    )

    def routes_of_backends(keys: Iterable[str]) -> list[Request]:
        store = chain.routes.store
        return [
            Request.for_object(r)
            for key in keys
            for r in store.by_index(indexes.ROUTE_BY_BACKEND, key)
        ]

    def routes_of_backend(backend: Mapping[str, Any]) -> list[Request]:
        return routes_of_backends([objects.key_of(backend)])

    def routes_of_policy(policy: Mapping[str, Any]) -> list[Request]:
        return routes_of_backends(indexes.policy_backends(policy))

    def routes_of_derived_secret(secret: Mapping[str, Any]) -> list[Request]:
        owner = objects.controller_of(secret)
        if owner is None or owner.get("kind") != api.POLICIES.kind:
            return []
        key = objects.make_key(objects.namespace(secret), owner.get("name", ""))
        policy = chain.policies.store.get(key)
        return [] if policy is None else routes_of_policy(policy)

    by_backend = f"`{indexes.ROUTE_BY_BACKEND}`"
    return (
        builder.controller_managed_by(mgr)
        .for_(chain.routes, when=predicates.generation_changed())
        .owns(chain.managed, when=predicates.not_own_write(writes))
        .watches(
            chain.backends,
            routes_of_backend,
            wakes=f"the routes that reference it ({by_backend})",
            when=predicates.any_of(
                predicates.generation_changed(),
                predicates.condition_changed(api.RESOLVED_REFS, "status", "reason"),
            ),
        )
        .watches(
            chain.policies,
            routes_of_policy,
            wakes=f"the routes of its targets ({by_backend})",
            when=predicates.any_of(
                predicates.generation_changed(), predicates.condition_changed(api.READY, "status")
            ),
        )
        .watches(
            chain.managed,
            routes_of_derived_secret,
            wakes=f"if a policy controls it, the routes of that policy's targets ({by_backend})",
        )
        .with_options(ControllerOptions(workers=workers))
        .complete(reconciler)
    )
