"""Wires the chain into a manager: informers and their indexes, the channels between
controllers, and the four controllers with their sources.

::

    Secret ──ch──► BackendSecurityPolicy ──ch──► ServiceBackend ──ch──► Route
    (metadata)      ▲ owned derived Secret        ▲ policies' targetRefs   ▲ owned config Secret
                                                                           ▲ backends it references

Channels carry "look again" from a reconcile to the next kind, at once. Informer sources are the
guarantee: they fire only once the cache holds the change, so the downstream reconcile cannot
read a state older than the one that triggered it, and they cover what no reconcile can see
afterwards (a policy deleted or retargeted, a backend deleted).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controllers.reconcilers import api, conditions, indexes, secretviews
from controllers.reconcilers.backend import BackendReconciler
from controllers.reconcilers.metrics import CredentialMetrics
from controllers.reconcilers.policy import PolicyReconciler
from controllers.reconcilers.route import RouteReconciler
from controllers.reconcilers.secret import SecretReconciler
from controllers.reconcilers.sources import CredentialSource
from controllers.reconcilers.sources.apikey import APIKeySource
from controllers.reconcilers.sources.aws import AWSCredentialsSource
from controllers.reconcilers.sources.azure import AzureCredentialsSource
from controllers.reconcilers.sources.gcp import GCPCredentialsSource
from controllers.reconcilers.tokens import ServiceAccountTokens
from controllers.runtime import clock as clocks
from controllers.runtime import objects, sources
from controllers.runtime.cache import FullObjectReader
from controllers.runtime.controller import ControllerOptions
from controllers.runtime.manager import Manager
from controllers.runtime.objects import Body
from controllers.runtime.reconcile import Request
from rotator import oidc
from rotator.providers import azure
from rotator.providers.aws import clients as aws_clients
from rotator.providers.gcp import common as gcp_common


@dataclass(frozen=True)
class ChainOptions:
    workers: int = 4
    """Concurrent reconciles per controller. Defaults to 4."""
    policy_workers: int = 16
    """Concurrent policy reconciles: they wait on providers, so more of them. Defaults to 16."""
    provider_concurrency: int = 4
    """Calls in flight to any one provider — for OIDC, to any one issuer host (a bulkhead: a
    hanging provider holds at most this many policy workers). Defaults to 4."""
    channel_capacity: int = 1024
    """Keys each channel holds before senders are pushed back. Defaults to 1024."""
    iam_key_grace_period: float = 300.0
    """Seconds a replaced IAM access key stays valid before rotator deletes it. Defaults to 300."""
    gcp_endpoints: gcp_common.Endpoints = field(default_factory=gcp_common.Endpoints)
    """Google STS, IAM credentials and OAuth token endpoints. Defaults to Google's."""
    azure_authority_host: str = azure.DEFAULT_AUTHORITY
    """Azure AD authority host. Defaults to login.microsoftonline.com."""
    allow_insecure_oidc_issuers: bool = False
    """Accept ``http://`` OIDC issuers (client secrets in clear): local development only.
    Defaults to False (an http issuer fails its policies with reason InsecureIssuer)."""


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
    before, after = conditions.of(old, "Ready"), conditions.of(new, "Ready")
    return _summary(before) != _summary(after)


def _summary(condition: api.Condition | None) -> tuple[str, str] | None:
    return None if condition is None else (condition["status"], condition["message"])


def credential_sources(
    mgr: Manager, metrics: CredentialMetrics, options: ChainOptions
) -> dict[str, CredentialSource]:
    """One source per policy type, with the provider clients they share."""
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
            clients=aws_clients.Clients(metrics, concurrency=concurrency),
            tokens=tokens,
            service_accounts=service_accounts,
            iam_grace=options.iam_key_grace_period,
        ),
        "GCPCredentials": GCPCredentialsSource(
            transport=gcp_common.Transport(metrics, concurrency=concurrency),
            endpoints=options.gcp_endpoints,
            tokens=tokens,
            service_accounts=service_accounts,
        ),
        "AzureCredentials": AzureCredentialsSource(
            azure=azure.Azure(
                metrics, authority_host=options.azure_authority_host, concurrency=concurrency
            ),
            tokens=tokens,
            service_accounts=service_accounts,
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
    policies = cache.informer(api.POLICIES)
    backends = cache.informer(api.BACKENDS)
    routes = cache.informer(api.ROUTES)
    policies.add_index(indexes.POLICY_BY_SECRET, indexes.policy_secrets(credential_sources_))
    policies.add_index(indexes.POLICY_BY_BACKEND, indexes.policy_backends)
    routes.add_index(indexes.ROUTE_BY_BACKEND, indexes.route_backends)

    to_policies = mgr.new_channel("backendsecuritypolicy", o.channel_capacity)
    to_backends = mgr.new_channel("servicebackend", o.channel_capacity)
    to_routes = mgr.new_channel("route", o.channel_capacity)
    controller_options = ControllerOptions(workers=o.workers)

    secret = SecretReconciler(policies=policies.store, to_policies=to_policies)
    c = mgr.new_controller("secret", secret, controller_options)
    c.watch(sources.Mapped(all_secrets, secret.referenced))

    policy = PolicyReconciler(
        api_client=mgr.api,
        policies=policies.store,
        managed_secrets=managed.store,
        secrets=FullObjectReader(mgr.api, all_secrets),
        sources=credential_sources_,
        recorder=mgr.recorder,
        metrics=metrics,
        to_backends=to_backends,
        clock=clock,
    )
    c = mgr.new_controller(
        "backendsecuritypolicy", policy, ControllerOptions(workers=o.policy_workers)
    )
    c.watch(sources.Kind(policies, _spec_or_annotations_changed))
    c.watch(sources.Owned(managed, api.POLICIES))
    c.watch(sources.ChannelSource(to_policies))

    backend = BackendReconciler(
        api_client=mgr.api,
        backends=backends.store,
        policies=policies.store,
        routes=routes.store,
        recorder=mgr.recorder,
        to_routes=to_routes,
        clock=clock,
    )
    c = mgr.new_controller("servicebackend", backend, controller_options)
    c.watch(sources.Kind(backends, sources.generation_changed))
    c.watch(sources.ChannelSource(to_backends))
    c.watch(sources.Mapped(policies, _targets, _spec_or_readiness_changed))

    route = RouteReconciler(
        api_client=mgr.api,
        routes=routes.store,
        backends=backends.store,
        policies=policies.store,
        managed_secrets=managed.store,
        recorder=mgr.recorder,
        clock=clock,
    )
    c = mgr.new_controller("route", route, controller_options)
    c.watch(sources.Kind(routes, sources.generation_changed))
    c.watch(sources.Owned(managed, api.ROUTES))
    c.watch(sources.ChannelSource(to_routes))

    def routes_of(backend_obj: Mapping[str, Any]) -> list[Request]:
        key = objects.key_of(backend_obj)
        return [Request.for_object(r) for r in routes.store.by_index(indexes.ROUTE_BY_BACKEND, key)]

    c.watch(sources.Mapped(backends, routes_of, sources.generation_changed))


def _targets(policy: Mapping[str, Any]) -> list[Request]:
    namespace = objects.namespace(policy)
    return [
        Request(namespace, ref["name"])
        for ref in (policy.get("spec") or {}).get("targetRefs") or []
    ]
