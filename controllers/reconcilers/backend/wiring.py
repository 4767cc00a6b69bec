"""What wakes the ServiceBackend controller (controller-runtime's ``SetupWithManager``).

* its spec (generation) — not its status, which only the reconcile itself writes;
* a policy whose spec or ``Ready`` (status or message) changed, mapped to its ``targetRefs``:
  the backend's ``ResolvedRefs`` says whether its one policy is Ready, and carries that
  policy's message. Reacting to the policy informer's event (not to a word from the policy
  reconcile) guarantees the backend reads the policy's new status from the cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controllers.reconcilers import api, predicates
from controllers.reconcilers.backend.reconciler import BackendReconciler
from controllers.reconcilers.cache import indexes
from controllers.reconcilers.cache.chaincache import ChainCache
from controllers.runtime import builder, objects
from controllers.runtime import clock as clocks
from controllers.runtime.builder import ControllerHost, Wiring
from controllers.runtime.controller import ControllerOptions
from controllers.runtime.reconcile import Request


def setup_with_manager(
    mgr: ControllerHost, chain: ChainCache, *, workers: int, clock: clocks.Clock
) -> Wiring:
    reconciler = BackendReconciler(
        api_client=mgr.api,
        backends=chain.backends.store,
        policies=chain.policies.store,
        recorder=mgr.recorder,
        clock=clock,
    )
    return (
        builder.controller_managed_by(mgr)
        .for_(chain.backends, when=predicates.generation_changed())
        .watches(
            chain.policies,
            targets,
            wakes="its `targetRefs`",
            when=predicates.any_of(
                predicates.generation_changed(),
                predicates.condition_changed(api.READY, "status", "message"),
            ),
        )
        .with_options(ControllerOptions(workers=workers))
        .complete(reconciler)
    )


def targets(policy: Mapping[str, Any]) -> list[Request]:
    """The ServiceBackends a policy names in ``targetRefs`` (:func:`indexes.target_names`)."""
    namespace = objects.namespace(policy)
    return [Request(namespace, name) for name in indexes.target_names(policy)]
