"""Wires the chain into a manager: informers and their indexes, and the three controllers with
the event sources that wake them.

One hop per event, every one an informer event (controller-runtime's ``Watches`` with
``EnqueueRequestsFromMapFunc``): it fires only once the cache holds the change, so the reconcile
it wakes cannot read a state older than the one that woke it.

::

    Secret (metadata) ─────────── policies that reference it ──► BackendSecurityPolicy
    derived Secret (edited, deleted; not rotator's own write) ──► its policy
    BackendSecurityPolicy (spec, Ready) ─── its targetRefs ─────► ServiceBackend
    ServiceBackend (spec) ──────────── routes that reference it ─► Route
    BackendSecurityPolicy (spec, Ready status) ─ via targets ────► Route
    derived Secret (any change) ──── via its policy's targets ───► Route
    route config Secret (edited, deleted; not rotator's own write) ► its Route

One Secret edit costs one policy reconcile and one reconcile of each Route that embeds the
credential (tests/e2e/test_event_paths.py counts them); the ServiceBackend is reconciled only when
its policy's readiness changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from controllers.reconcilers import api, conditions, crviews, echoes, indexes, secretviews
from controllers.reconcilers.backend import BackendReconciler
from controllers.reconcilers.credentialsources import CredentialSource
from controllers.reconcilers.credentialsources.apikey import APIKeySource
from controllers.reconcilers.credentialsources.aws import AWSCredentialsSource, lazy_clients
from controllers.reconcilers.credentialsources.azure import AzureCredentialsSource, lazy_azure
from controllers.reconcilers.credentialsources.gcp import (
    GCPCredentialsSource,
    lazy_application_default,
    lazy_transport,
)
from controllers.reconcilers.metrics import CredentialMetrics
from controllers.reconcilers.policy import PolicyReconciler
from controllers.reconcilers.route import RouteReconciler
from controllers.reconcilers.tokens import ServiceAccountTokens
from controllers.runtime import clock as clocks
from controllers.runtime import objects, sources
from controllers.runtime.cache import FullObjectReader
from controllers.runtime.controller import ControllerOptions
from controllers.runtime.manager import Manager
from controllers.runtime.objects import Body
from controllers.runtime.reconcile import Request
from rotator import oidc
from rotator.providers import azure_endpoints
from rotator.providers.gcp.endpoints import Endpoints as GCPEndpoints


@dataclass(frozen=True)
class ChainOptions:
    workers: int = 4
    """Concurrent reconciles per controller. Defaults to 4."""
    policy_workers: int = 16
    """Concurrent policy reconciles: they wait on providers, so more of them. Defaults to 16."""
    provider_concurrency: int = 4
    """Calls in flight to any one provider — for OIDC, to any one issuer host (a bulkhead: a
    hanging provider holds at most this many policy workers). Defaults to 4."""
    iam_key_grace_period: float = 300.0
    """Seconds a replaced IAM access key stays valid before rotator deletes it. Defaults to 300."""
    gcp_endpoints: GCPEndpoints = field(default_factory=GCPEndpoints)
    """Google STS, IAM credentials and OAuth token endpoints. Defaults to Google's."""
    azure_authority_host: str = azure_endpoints.DEFAULT_AUTHORITY
    """Azure AD authority host. Defaults to login.microsoftonline.com."""
    allow_insecure_oidc_issuers: bool = False
    """Accept ``http://`` OIDC issuers (client secrets in clear): local development only.
    Defaults to False (an http issuer fails its policies with reason InsecureIssuer)."""
    controller_identity_namespaces: frozenset[str] = frozenset()
    """Namespaces whose policies may use the controller's own cloud identity
    (``controllerIdentity``); ``*`` for all. Defaults to none
    (credentialsources.check_controller_identity)."""


def _spec_or_annotations_changed(old: Body | None, new: Body) -> bool:
    """Generation (spec), annotations or deletion; status-only updates are our own writes."""
    if sources.generation_changed(old, new):
        return True
    assert old is not None
    before, after = objects.meta(old), objects.meta(new)
    return any(
        before.get(k) != after.get(k) for k in ("annotations", "deletionTimestamp", "finalizers")
    )


def _spec_or_readiness_changed(old: Body | None, new: Body) -> bool:
    """Generation or the Ready condition: what a targeted backend's status depends on. Reacting
    to the informer's event (not only to the policy reconcile's message) guarantees the backend
    reads the policy's new status from the cache."""
    if sources.generation_changed(old, new):
        return True
    assert old is not None
    before, after = conditions.of(old, api.READY), conditions.of(new, api.READY)
    return _summary(before) != _summary(after)


def _spec_or_ready_status_changed(old: Body | None, new: Body) -> bool:
    """Generation or whether the policy is Ready: all a Route reads of a policy (its
    credentials come from the derived Secret, whose own events reach the Route)."""
    if sources.generation_changed(old, new):
        return True
    assert old is not None
    before, after = conditions.of(old, api.READY), conditions.of(new, api.READY)
    return (before["status"] if before else None) != (after["status"] if after else None)


def _resolution_changed(old: Body | None, new: Body) -> bool:
    """A ServiceBackend's ``ResolvedRefs`` status or reason changed."""
    if old is None:
        return False  # the Kind-like generation source covers creation
    before, after = conditions.of(old, api.RESOLVED_REFS), conditions.of(new, api.RESOLVED_REFS)
    return _reason(before) != _reason(after)


def _reason(condition: api.Condition | None) -> tuple[str, str] | None:
    return None if condition is None else (condition["status"], condition["reason"])


def _summary(condition: api.Condition | None) -> tuple[str, str] | None:
    return None if condition is None else (condition["status"], condition["message"])


def credential_sources(
    mgr: Manager, metrics: CredentialMetrics, options: ChainOptions
) -> dict[str, CredentialSource]:
    """One source per policy type, with the provider clients they share — each cloud's built,
    and its SDK imported, when the first policy that calls that cloud is reconciled
    (credentialsources.lazy): never at start-up."""
    concurrency = options.provider_concurrency
    tokens = oidc.TokenSource(
        observer=metrics,
        concurrency=concurrency,
        allow_insecure=options.allow_insecure_oidc_issuers,
    )
    service_accounts = ServiceAccountTokens(mgr.api, metrics)
    return {
        "APIKey": APIKeySource(),
        "AWSCredentials": AWSCredentialsSource(
            clients=lazy_clients(metrics, concurrency=concurrency),
            tokens=tokens,
            service_accounts=service_accounts,
            iam_grace=options.iam_key_grace_period,
            identity_namespaces=options.controller_identity_namespaces,
        ),
        "GCPCredentials": GCPCredentialsSource(
            transport=lazy_transport(metrics, concurrency=concurrency),
            endpoints=options.gcp_endpoints,
            tokens=tokens,
            service_accounts=service_accounts,
            application_default=lazy_application_default(metrics, concurrency=concurrency),
            controller_identity_namespaces=options.controller_identity_namespaces,
        ),
        "AzureCredentials": AzureCredentialsSource(
            azure=lazy_azure(
                metrics, authority_host=options.azure_authority_host, concurrency=concurrency
            ),
            tokens=tokens,
            service_accounts=service_accounts,
            controller_identity_namespaces=options.controller_identity_namespaces,
        ),
    }


def register(
    mgr: Manager,
    *,
    options: ChainOptions | None = None,
    by_type: Mapping[str, CredentialSource] | None = None,
    clock: clocks.Clock | None = None,
) -> None:
    o = options or ChainOptions()
    clock = clock or clocks.RealClock()
    metrics = CredentialMetrics(mgr.metrics.registry)
    credential_sources_ = by_type if by_type is not None else credential_sources(mgr, metrics, o)
    cache = mgr.cache
    all_secrets = cache.informer(
        objects.SECRETS, metadata_only=True, transform=secretviews.identity_only
    )
    managed = cache.informer(
        objects.SECRETS,
        label_selector=api.MANAGED_SELECTOR,
        transform=secretviews.managed,
        page_size=secretviews.MANAGED_PAGE_SIZE,
    )
    policies = cache.informer(api.POLICIES, transform=crviews.policy)
    backends = cache.informer(api.BACKENDS, transform=crviews.backend)
    routes = cache.informer(api.ROUTES, transform=crviews.route)
    policies.add_index(indexes.POLICY_BY_SECRET, indexes.policy_secrets(credential_sources_))
    policies.add_index(indexes.POLICY_BY_BACKEND, indexes.policy_backends)
    routes.add_index(indexes.ROUTE_BY_BACKEND, indexes.route_backends)

    controller_options = ControllerOptions(workers=o.workers)

    def policies_using(secret: Mapping[str, Any]) -> list[Request]:
        key = objects.key_of(secret)
        return [
            Request.for_object(p) for p in policies.store.by_index(indexes.POLICY_BY_SECRET, key)
        ]

    def routes_of_backends(keys: Iterable[str]) -> list[Request]:
        return [
            Request.for_object(r)
            for key in keys
            for r in routes.store.by_index(indexes.ROUTE_BY_BACKEND, key)
        ]

    def routes_of_policy(policy_obj: Mapping[str, Any]) -> list[Request]:
        return routes_of_backends(indexes.policy_backends(policy_obj))

    def routes_of_derived_secret(secret: Mapping[str, Any]) -> list[Request]:
        owner = objects.controller_of(secret)
        if owner is None or owner.get("kind") != "BackendSecurityPolicy":
            return []
        policy_obj = policies.store.get(
            objects.make_key(objects.namespace(secret), owner.get("name", ""))
        )
        return [] if policy_obj is None else routes_of_policy(policy_obj)

    policy_writes, route_writes = echoes.OwnWrites(), echoes.OwnWrites()
    policy = PolicyReconciler(
        api_client=mgr.api,
        policies=policies.store,
        managed_secrets=managed.store,
        secrets=FullObjectReader(mgr.api, all_secrets),
        secret_versions=all_secrets.store,
        sources=credential_sources_,
        recorder=mgr.recorder,
        metrics=metrics,
        own_writes=policy_writes,
        clock=clock,
    )
    c = mgr.new_controller(
        "backendsecuritypolicy", policy, ControllerOptions(workers=o.policy_workers)
    )
    c.watch(sources.Kind(policies, _spec_or_annotations_changed))
    c.watch(sources.Mapped(all_secrets, policies_using))
    c.watch(sources.Owned(managed, api.POLICIES, policy_writes.not_echo))

    backend = BackendReconciler(
        api_client=mgr.api,
        backends=backends.store,
        policies=policies.store,
        recorder=mgr.recorder,
        clock=clock,
    )
    c = mgr.new_controller("servicebackend", backend, controller_options)
    c.watch(sources.Kind(backends, sources.generation_changed))
    c.watch(sources.Mapped(policies, _targets, _spec_or_readiness_changed))

    route = RouteReconciler(
        api_client=mgr.api,
        routes=routes.store,
        backends=backends.store,
        policies=policies.store,
        managed_secrets=managed.store,
        recorder=mgr.recorder,
        own_writes=route_writes,
        clock=clock,
    )
    c = mgr.new_controller("route", route, controller_options)
    c.watch(sources.Kind(routes, sources.generation_changed))
    c.watch(sources.Owned(managed, api.ROUTES, route_writes.not_echo))
    c.watch(
        sources.Mapped(
            backends, lambda b: routes_of_backends([objects.key_of(b)]), sources.generation_changed
        )
    )
    c.watch(sources.Mapped(policies, routes_of_policy, _spec_or_ready_status_changed))
    # A backend's resolution (ResolvedRefs) changing is a second word that its policy appeared,
    # went or changed readiness: it costs a route reconcile only when resolution changes.
    c.watch(
        sources.Mapped(
            backends, lambda b: routes_of_backends([objects.key_of(b)]), _resolution_changed
        )
    )
    c.watch(sources.Mapped(managed, routes_of_derived_secret))


def _targets(policy: Mapping[str, Any]) -> list[Request]:
    namespace = objects.namespace(policy)
    return [
        Request(namespace, ref["name"])
        for ref in (policy.get("spec") or {}).get("targetRefs") or []
    ]
