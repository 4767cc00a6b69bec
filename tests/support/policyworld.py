"""The policy reconciler over the in-memory API server (:mod:`tests.support.memapi`), as its unit
tests build it: the policy and managed-Secret caches fed by the server through the controller's
views, Events recorded, metrics on a registry of their own, and the policy ``p`` put on the
server. One shape for the tests of the policy reconciler (faults, the controller-identity rule),
not a copy in each."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from controllers.reconcilers import api
from controllers.reconcilers.cache import ownwrites, secretviews
from controllers.reconcilers.credentialsources import CredentialSource
from controllers.reconcilers.metrics import CredentialMetrics
from controllers.reconcilers.policy import PolicyReconciler
from controllers.runtime import clock as clocks
from controllers.runtime import objects
from controllers.runtime.store import Store
from tests.support import memapi


def policy_body(namespace: str, spec: Mapping[str, Any], *, name: str = "p") -> dict[str, Any]:
    """A BackendSecurityPolicy as a user creates it (uid ``u``, generation 1)."""
    return {
        "apiVersion": api.API_VERSION,
        "kind": "BackendSecurityPolicy",
        "metadata": {"name": name, "namespace": namespace, "uid": "u", "generation": 1},
        "spec": dict(spec),
    }


@dataclass
class PolicyWorld:
    api: memapi.MemAPI
    events: memapi.RecordedEvents
    registry: CollectorRegistry
    policies: Store
    managed: Store
    reconciler: PolicyReconciler
    policy: dict[str, Any]
    """Policy ``p`` as the server holds it."""


def policy_world(
    namespace: str,
    spec: Mapping[str, Any],
    sources: Mapping[str, CredentialSource],
    *,
    clock: clocks.Clock,
    controller_identity_namespaces: Collection[str] = frozenset(),
) -> PolicyWorld:
    """Policy ``p`` of ``spec`` in ``namespace`` on a new in-memory API server, and the policy
    reconciler over it and ``sources`` (no Secret cache of full bodies is warmed: a source that
    reads a Secret reads it from the server)."""
    server, events, registry = memapi.MemAPI(), memapi.RecordedEvents(), CollectorRegistry()
    policies, managed = Store(), Store()
    server.feed(api.POLICIES, policies)
    server.feed(objects.SECRETS, managed, view=secretviews.managed)
    policy: dict[str, Any] = server.put(api.POLICIES, policy_body(namespace, spec))
    reconciler = PolicyReconciler(
        api_client=server,
        policies=policies,
        managed_secrets=managed,
        secrets=memapi.FullBodies(server),
        secret_versions=Store(),
        sources=sources,
        recorder=events,
        metrics=CredentialMetrics(registry),
        own_writes=ownwrites.OwnWrites(),
        clock=clock,
        controller_identity_namespaces=controller_identity_namespaces,
    )
    return PolicyWorld(server, events, registry, policies, managed, reconciler, policy)
