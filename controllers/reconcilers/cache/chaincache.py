"""The chain's informers, one per view of the cluster, and the indexes the wiring looks up.

Made once by ``setup`` (for the composition root, ``controllers.cli``) and shared by every
controller's wiring: two controllers watching one kind share its informer, and each object is
cached once per view.
What each view keeps is docs/design.md §3 (``secretviews``, ``crviews``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from controllers.reconcilers import api
from controllers.reconcilers.cache import crviews, indexes, secretviews
from controllers.reconcilers.credentialsources import CredentialSource
from controllers.runtime import objects
from controllers.runtime.cache import Cache
from controllers.runtime.informer import Informer, Transform
from controllers.runtime.store import IndexFunc


@dataclass(frozen=True)
class ChainCache:
    all_secrets: Informer
    """Every Secret, metadata only: which exist, at which resourceVersion. Its objects are
    ``objects.Identity`` (read-only mappings, typed ``Body`` by the informer): read them, never
    write to them or encode them as JSON."""
    managed: Informer
    """Secrets labelled ``app.kubernetes.io/managed-by=rotator``: derived and route config."""
    policies: Informer
    """BackendSecurityPolicies, indexed ``policy-by-secret`` and ``policy-by-backend``."""
    backends: Informer
    routes: Informer
    """Routes, indexed ``route-by-backend``."""


def chain_cache(cache: Cache, by_type: Mapping[str, CredentialSource]) -> ChainCache:
    """The informers of ``cache`` the chain reads, with their indexes (``by_type``'s sources
    name the Secrets a policy references)."""
    chain = ChainCache(
        all_secrets=cache.informer(
            objects.SECRETS, metadata_only=True, transform=secretviews.identity_only
        ),
        managed=cache.informer(
            objects.SECRETS,
            label_selector=api.MANAGED_SELECTOR,
            transform=secretviews.managed,
            page_size=secretviews.MANAGED_PAGE_SIZE,
            own_keys=secretviews.OWN_KEYS,
        ),
        policies=custom(cache, api.POLICIES, crviews.policy),
        backends=custom(cache, api.BACKENDS, crviews.backend),
        routes=custom(cache, api.ROUTES, crviews.route),
    )
    index(policies=chain.policies, routes=chain.routes, by_type=by_type)
    return chain


class Indexable(Protocol):
    """An informer, or a bare store (a test's)."""

    def add_index(self, name: str, func: IndexFunc) -> None: ...


def index(
    *,
    policies: Indexable | None = None,
    routes: Indexable | None = None,
    by_type: Mapping[str, CredentialSource] | None = None,
) -> None:
    """Adds the chain's indexes: to the policies ``policy-by-backend`` and, given ``by_type``,
    ``policy-by-secret``; to the routes ``route-by-backend``. The one setup of them, which the
    tests' worlds call too, so a test cannot drift from the production indexes."""
    if policies is not None:
        if by_type is not None:
            policies.add_index(indexes.POLICY_BY_SECRET, indexes.policy_secrets(by_type))
        policies.add_index(indexes.POLICY_BY_BACKEND, indexes.policy_backends)
    if routes is not None:
        routes.add_index(indexes.ROUTE_BY_BACKEND, indexes.route_backends)


def custom(cache: Cache, resource: objects.Resource, transform: Transform) -> Informer:
    """The informer of one of rotator's own kinds: pages of the 500 objects it asks for of
    :data:`crviews.ITEM_BYTES` each, 32 MiB — not of the largest object etcd stores, which
    made the client's 128 MiB each (the reason is at :data:`crviews.ITEM_BYTES`)."""
    return cache.informer(resource, transform=transform, item_bytes=crviews.ITEM_BYTES)
