"""What wakes the BackendSecurityPolicy controller (controller-runtime's ``SetupWithManager``).

* its own changes that a reconcile acts on: the spec (generation), a ``rotator.dev/`` annotation
  (a rotation request, ``skip-release``), deletion and finalizers — not its status, which only
  the reconcile itself writes;
* any event of a Secret it references (the metadata informer): a copied credential is copied
  again, a minted one reads it at its next mint;
* its derived Secret edited or deleted by anyone else — its own write's echo is skipped
  (:mod:`controllers.reconcilers.cache.ownwrites`; this module owns the
  :class:`~controllers.reconcilers.cache.ownwrites.OwnWrites` the reconciler records its writes
  in and the source skips them by).

The reconciler tells no other controller anything: backends and routes watch the policy
informer and the derived Secret themselves (:mod:`..backend.wiring`, :mod:`..route.wiring`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from controllers.reconcilers import predicates
from controllers.reconcilers.cache import crviews, indexes, ownwrites
from controllers.reconcilers.cache.chaincache import ChainCache
from controllers.reconcilers.credentialsources import CredentialSource
from controllers.reconcilers.metrics import CredentialMetrics
from controllers.reconcilers.policy.reconciler import PolicyReconciler
from controllers.runtime import builder, objects
from controllers.runtime import clock as clocks
from controllers.runtime.builder import ControllerHost, Wiring
from controllers.runtime.cache import FullObjectReader
from controllers.runtime.controller import ControllerOptions
from controllers.runtime.reconcile import Request


def setup_with_manager(
    mgr: ControllerHost,
    chain: ChainCache,
    *,
    by_type: Mapping[str, CredentialSource],
    metrics: CredentialMetrics,
    workers: int,
    controller_identity_namespaces: Collection[str],
    clock: clocks.Clock,
) -> Wiring:
    writes = ownwrites.OwnWrites()
    reconciler = PolicyReconciler(
        api_client=mgr.api,
        policies=chain.policies.store,
        managed_secrets=chain.managed.store,
        secrets=FullObjectReader(mgr.api, chain.all_secrets),
        secret_versions=chain.all_secrets.store,
        sources=by_type,
        recorder=mgr.recorder,
        metrics=metrics,
        own_writes=writes,
        clock=clock,
        controller_identity_namespaces=controller_identity_namespaces,
    )

    def policies_using(secret: Mapping[str, Any]) -> list[Request]:
        key = objects.key_of(secret)
        store = chain.policies.store
        return [Request.for_object(p) for p in store.by_index(indexes.POLICY_BY_SECRET, key)]

    return (
        builder.controller_managed_by(mgr)
        .for_(
            chain.policies,
            when=predicates.any_of(
                predicates.generation_changed(),
                predicates.annotations_changed(crviews.ROTATOR_ANNOTATION_PREFIX),
                predicates.metadata_changed("deletionTimestamp", "finalizers"),
            ),
        )
        .watches(
            chain.all_secrets,
            policies_using,
            wakes=f"the policies that reference it (`{indexes.POLICY_BY_SECRET}`)",
        )
        .owns(chain.managed, when=predicates.not_own_write(writes))
        .with_options(ControllerOptions(workers=workers))
        .complete(reconciler)
    )
